#include "ctl/sandbox_net.h"

#include <string>
#include <vector>

#include "ctl/netns.h"
#include "ctl/proc.h"

namespace vrdma::ctl {

namespace {

// `ip -n NETNS ARGS...`
void ip_in(const std::string& netns, std::vector<std::string> args) {
  args.insert(args.begin(), {"ip", "-n", netns});
  check_command(args);
}

void add_netns(const std::string& netns) {
  check_command({"ip", "netns", "add", netns});
  ip_in(netns, {"link", "set", "lo", "up"});
}

std::string subnet_of(const SandboxHost& h) {
  return "10.77." + std::to_string(h.id) + ".0/24";
}

void build_host(const SandboxHost& h) {
  add_netns(h.netns);
  ip_in(h.netns, {"link", "add", kHostBridge, "type", "bridge"});
  ip_in(h.netns, {"addr", "add", h.ip + "/24", "dev", kHostBridge});
  ip_in(h.netns, {"link", "set", kHostBridge, "up"});
  write_sysctl_in(h.netns, "/proc/sys/net/ipv4/ip_forward", "1\n");
}

void build_container(const SandboxHost& h, const SandboxContainer& c) {
  // The host end is named after the container's index: "h3c12" -> "c12".
  std::string port = c.name.substr(h.name.size());
  add_netns(c.netns);
  ip_in(h.netns, {"link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", c.netns});
  ip_in(h.netns, {"link", "set", port, "master", kHostBridge, "up"});
  ip_in(c.netns, {"addr", "add", c.ip + "/24", "dev", "eth0"});
  ip_in(c.netns, {"link", "set", "eth0", "up"});
  ip_in(c.netns, {"route", "add", "default", "via", h.ip});
}

// One veth per host from its namespace (kUnderlayDev) to the underlay bridge.
void attach_to_underlay(const std::string& underlay, const SandboxHost& h) {
  ip_in(h.netns,
        {"link", "add", kUnderlayDev, "type", "veth", "peer", "name", h.name, "netns", underlay});
  ip_in(underlay, {"link", "set", h.name, "master", kUnderlayBridge, "up"});
  ip_in(h.netns, {"addr", "add", h.underlay_ip + "/24", "dev", kUnderlayDev});
  ip_in(h.netns, {"link", "set", kUnderlayDev, "up"});
}

}  // namespace

void build_network(const Sandbox& sandbox, const std::function<void()>& step) {
  for (const auto& h : sandbox.hosts) {
    step();
    build_host(h);
  }
  for (const auto& c : sandbox.containers) {
    step();
    build_container(sandbox.hosts.at(static_cast<size_t>(c.host_id)), c);
  }
  if (sandbox.underlay.empty()) return;
  step();
  add_netns(sandbox.underlay);
  ip_in(sandbox.underlay, {"link", "add", kUnderlayBridge, "type", "bridge"});
  ip_in(sandbox.underlay,
        {"addr", "add", std::string(kUnderlayEtcdIp) + "/24", "dev", kUnderlayBridge});
  ip_in(sandbox.underlay, {"link", "set", kUnderlayBridge, "up"});
  for (const auto& h : sandbox.hosts) {
    step();
    attach_to_underlay(sandbox.underlay, h);
  }
  for (const auto& h : sandbox.hosts) {
    step();
    for (const auto& other : sandbox.hosts) {
      if (other.id == h.id) continue;
      ip_in(h.netns, {"route", "add", subnet_of(other), "via", other.underlay_ip});
    }
  }
}

}  // namespace vrdma::ctl
