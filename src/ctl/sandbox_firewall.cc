#include "ctl/sandbox_firewall.h"

#include <string>
#include <vector>

#include "ctl/error.h"
#include "ctl/proc.h"

namespace vrdma::ctl {

void firewall_router_ports(const Sandbox& sandbox) {
  if (!find_tool("iptables"))
    throw Error("cannot find iptables (Debian package iptables), which keeps the sandbox's "
                "containers away from the routers");
  const std::string port = std::to_string(kRouterPort);
  for (const auto& h : sandbox.hosts) {
    for (const auto& other : sandbox.hosts) {
      for (const char* chain : {"INPUT", "FORWARD"}) {
        check_command({"ip", "netns", "exec", h.netns, "iptables", "-w", "5", "-A", chain, "-p",
                       "tcp", "-s", other.pod_cidr, "--dport", port, "-j", "DROP"});
      }
    }
  }
}

}  // namespace vrdma::ctl
