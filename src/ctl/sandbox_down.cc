// vrdma sandbox down, and the teardown that a failed `up` shares.
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <regex>

#include "ctl/daemon_proc.h"
#include "ctl/error.h"
#include "ctl/format.h"
#include "ctl/netns.h"
#include "ctl/proc.h"
#include "ctl/sandbox.h"
#include "ctl/sandbox_etcd.h"
#include "ctl/sandbox_mounts.h"

namespace vrdma::ctl {

namespace {

constexpr int kProcessGraceMs = 1000;

// Containers first, then hosts, then the underlay: the reverse of creation.
// Names are those is_sandbox_netns accepts.
int teardown_rank(const std::string& netns) {
  if (netns == underlay_netns()) return 2;
  return netns.find('c', netns_prefix().size()) != std::string::npos ? 0 : 1;
}

// Removes sandbox.json, the h<N> directories, etcd's and the PKI; true if there was any.
bool remove_state(const std::string& run_dir, std::vector<std::string>& errors) {
  namespace fs = std::filesystem;
  static const std::regex host_dir_name("h[0-9]+");
  std::vector<fs::path> doomed;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(run_dir, ec)) {
    std::string name = entry.path().filename();
    if (name == "sandbox.json" || name == "sandbox.json.tmp" || name == "etcd" || name == "pki" ||
        (std::regex_match(name, host_dir_name) && entry.is_directory()))
      doomed.push_back(entry.path());
  }
  for (const auto& path : doomed) {
    fs::remove_all(path, ec);
    if (ec) errors.push_back("cannot remove " + path.string() + ": " + ec.message());
  }
  ::rmdir(run_dir.c_str());  // only if nothing else lives there
  return !doomed.empty();
}

}  // namespace

TeardownResult teardown_sandbox(const std::string& run_dir) {
  TeardownResult result;
  std::vector<pid_t> daemons = sandbox_daemons(run_dir);
  result.daemons = static_cast<int>(daemons.size());
  for (pid_t pid : terminate_processes(daemons, kDaemonStopGraceMs, true))
    std::cerr << "vrdma sandbox: vrdmad pid " << pid << " ignored SIGTERM for "
              << kDaemonStopGraceMs / 1000 << " s; killed it\n";
  // After the daemons, which revoke their leases when they stop.
  if (pid_t etcd = running_etcd(run_dir)) {
    result.etcd = true;
    if (!stop_etcd(etcd))
      std::cerr << "vrdma sandbox: etcd pid " << etcd << " ignored SIGTERM for "
                << kEtcdStopGraceMs / 1000 << " s; killed it\n";
  }

  std::vector<std::string> namespaces = list_sandbox_netns();
  std::vector<pid_t> leftovers = pids_in_netns(namespaces);
  result.processes = static_cast<int>(leftovers.size());
  terminate_processes(leftovers, kProcessGraceMs, false);
  for (pid_t pid : pids_in_netns(namespaces))
    if (pid_alive(pid))
      result.errors.push_back("pid " + std::to_string(pid) + " (" + read_cmdline(pid) +
                              ") survived SIGKILL in a sandbox namespace");

  const bool mounts = release_container_mounts(run_dir, result.errors);
  std::stable_sort(namespaces.begin(), namespaces.end(), [](const auto& a, const auto& b) {
    return teardown_rank(a) < teardown_rank(b);
  });
  for (const auto& netns : namespaces) {
    try {
      delete_netns(netns);
      ++result.namespaces;
    } catch (const Error& e) {
      result.errors.push_back(e.what());
    }
  }
  result.state = remove_state(run_dir, result.errors) || mounts;
  return result;
}

int sandbox_down() {
  const std::string dir = run_dir();
  RunDirLock lock(dir);
  TeardownResult t = teardown_sandbox(dir);
  for (const auto& err : t.errors) std::cerr << "vrdma sandbox down: " << err << "\n";
  if (t.nothing_found()) {
    std::cout << "no sandbox is up; nothing to do\n";
  } else {
    std::cout << "sandbox down: stopped " << t.daemons << " vrdmad" << (t.etcd ? " and etcd" : "")
              << ", killed "
              << plural(t.processes, "other process", "other processes") << ", deleted "
              << plural(t.namespaces, "namespace") << "\n";
  }
  return t.errors.empty() ? kExitOk : kExitError;
}

}  // namespace vrdma::ctl
