// vrdma sandbox list
#include <iostream>

#include "ctl/daemon_proc.h"
#include "ctl/error.h"
#include "ctl/files.h"
#include "ctl/format.h"
#include "ctl/netns.h"
#include "ctl/sandbox.h"
#include "ctl/sandbox_etcd.h"

namespace vrdma::ctl {

void print_sandbox_table(const Sandbox& sandbox) {
  std::vector<std::string> daemon_state;
  for (const auto& h : sandbox.hosts) {
    pid_t pid = running_daemon(h.pidfile, h.socket);
    daemon_state.push_back(pid ? "running (pid " + std::to_string(pid) + ")" : "not running");
  }
  auto netns_state = [](const std::string& netns) { return netns_alive(netns) ? "up" : "missing"; };
  Table table({"NAME", "HOST", "IP", "NETNS", "DAEMON", "SOCKET"});
  for (const auto& h : sandbox.hosts)
    table.add({h.name, h.name, h.ip, netns_state(h.netns), daemon_state.at(h.id), h.socket});
  for (const auto& c : sandbox.containers)
    table.add({c.name, c.host, c.ip, netns_state(c.netns), daemon_state.at(c.host_id), c.socket});
  table.print(std::cout);
  if (!sandbox.underlay.empty())
    std::cout << "\nunderlay: namespace " << sandbox.underlay << " ("
              << netns_state(sandbox.underlay) << "), bridge " << kUnderlayBridge
              << ", hosts at 10.76.0.<id+1>/24\n";
  if (sandbox.directory == kDirectoryEtcd) {
    pid_t pid = running_etcd(sandbox.run_dir);
    std::cout << "directory: etcd " << sandbox.etcd.client_url << " in " << sandbox.etcd.netns
              << ", " << (pid ? "running (pid " + std::to_string(pid) + ")" : "not running")
              << "; data " << sandbox.etcd.data_dir << ", log " << sandbox.etcd.log << "\n";
  } else if (sandbox.directory == kDirectoryEmbedded) {
    std::cout << "directory: embedded (each vrdmad knows the others from --peer)\n";
  }
}

int sandbox_list(bool json) {
  const std::string dir = run_dir();
  if (json) {
    auto text = read_file(state_path(dir));
    if (!text) throw Error("no sandbox is up (no " + state_path(dir) + ")");
    std::cout << *text;
    return kExitOk;
  }
  auto sandbox = load_sandbox(dir);
  if (!sandbox) {
    std::cout << "no sandbox is up\n";
    auto leftovers = list_sandbox_netns();
    if (!leftovers.empty())
      std::cout << "but " << plural(leftovers.size(), "sandbox namespace")
                << " exist (a crashed up?); `vrdma sandbox down` removes them\n";
    return kExitOk;
  }
  print_sandbox_table(*sandbox);
  return kExitOk;
}

}  // namespace vrdma::ctl
