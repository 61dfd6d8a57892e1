// `vrdma sandbox ...`: a test bed of network namespaces on this machine, hosts
// with one vrdmad each and containers behind them. Each returns the exit code.
#pragma once

#include <string>
#include <vector>

#include "ctl/sandbox_state.h"

namespace vrdma::ctl {

struct SandboxUpOptions {
  int hosts = 1;
  int containers = 2;                // per host
  std::string log_level;             // passed to vrdmad as --log-level if not empty
  // NAME=CIDR, each passed to vrdmad as --tenant; without any, every container is in tenant
  // "sandbox" (sandbox_tenant.h).
  std::vector<std::string> tenants;
  std::vector<std::string> daemon_args;  // more vrdmad options, for every host
  // With several hosts: kDirectoryEtcd (default: an etcd in the underlay namespace) or
  // kDirectoryEmbedded (each vrdmad gets the other hosts as --peer).
  std::string directory;
  // With several hosts: links between routers without TLS (insecure; for benchmarks).
  bool router_plaintext = false;
};

int sandbox_up(const SandboxUpOptions& options);
int sandbox_down();
// `vrdma sandbox etcd start|stop`: the multi-host sandbox's etcd, on the same data directory.
int sandbox_etcd_start();
int sandbox_etcd_stop();
// `vrdma sandbox etcd get [PREFIX]`: the keys under PREFIX and their values, one JSON object,
// read as etcd's root user.
int sandbox_etcd_get(const std::string& prefix);
int sandbox_list(bool json);
// Replaces the process with `command` inside the namespace of `name`; returns
// only on failure (127: command not found, 126: cannot execute it).
int sandbox_exec(const std::string& name, const std::vector<std::string>& command, bool no_lib);

// What teardown found and removed; errors are reported, not thrown.
struct TeardownResult {
  int daemons = 0;     // vrdmad processes stopped
  bool etcd = false;   // the sandbox's etcd was running and was stopped
  int processes = 0;   // other processes killed inside the namespaces
  int namespaces = 0;  // namespaces deleted
  bool state = false;  // a state file or host directory was removed
  std::vector<std::string> errors;
  bool nothing_found() const {
    return !daemons && !etcd && !processes && !namespaces && !state;
  }
};

// Stops every daemon with a pidfile under run_dir, then the sandbox's etcd, kills what is left
// in the sandbox namespaces (is_sandbox_netns), deletes them and removes the state (etcd's data
// included). Works without a state file (after a crash). The caller holds the RunDirLock.
TeardownResult teardown_sandbox(const std::string& run_dir);

// The `vrdma sandbox list` table.
void print_sandbox_table(const Sandbox& sandbox);

}  // namespace vrdma::ctl
