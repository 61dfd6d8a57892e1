// vrdma sandbox up
#include <signal.h>
#include <sys/un.h>

#include <algorithm>
#include <filesystem>
#include <iostream>

#include "ctl/daemon_proc.h"
#include "ctl/error.h"
#include "ctl/files.h"
#include "ctl/format.h"
#include "ctl/netns.h"
#include "ctl/proc.h"
#include "ctl/sandbox.h"
#include "ctl/sandbox_etcd.h"
#include "ctl/sandbox_firewall.h"
#include "ctl/sandbox_mounts.h"
#include "ctl/sandbox_net.h"
#include "ctl/sandbox_pki.h"
#include "ctl/sandbox_tenant.h"

namespace vrdma::ctl {

namespace {

volatile sig_atomic_t g_interrupted = 0;

// While building, SIGINT/SIGTERM/SIGHUP only set a flag, so that a partial
// sandbox is torn down instead of left behind.
class InterruptGuard {
 public:
  InterruptGuard() {
    struct sigaction sa {};
    sa.sa_handler = [](int) { g_interrupted = 1; };
    sigemptyset(&sa.sa_mask);
    for (int i = 0; i < 3; ++i) ::sigaction(kSignals[i], &sa, &old_[i]);
  }
  ~InterruptGuard() {
    for (int i = 0; i < 3; ++i) ::sigaction(kSignals[i], &old_[i], nullptr);
  }
  static void check() {
    if (g_interrupted) throw Error("interrupted");
  }

 private:
  static constexpr int kSignals[3] = {SIGINT, SIGTERM, SIGHUP};
  struct sigaction old_[3];
};

// What a host's vrdmad needs to know of the other hosts; nothing with a single host.
std::vector<std::string> cluster_args(const Sandbox& sandbox, const SandboxHost& host) {
  if (sandbox.directory.empty()) return {};
  const std::string id = "host-" + std::to_string(host.id);
  std::vector<std::string> args = {"--router-listen", host.router,
                                   "--pod-cidr",      host.pod_cidr,
                                   "--tls-ca",        pki_cert(sandbox.run_dir, "ca"),
                                   "--tls-cert",      pki_cert(sandbox.run_dir, id),
                                   "--tls-key",       pki_key(sandbox.run_dir, id)};
  if (sandbox.router_security == "plaintext") args.push_back("--router-plaintext");
  if (sandbox.directory == kDirectoryEtcd) {
    args.insert(args.end(), {"--directory", "etcd://" + std::string(kUnderlayEtcdIp) + ":" +
                                                std::to_string(kEtcdClientPort)});
    return args;
  }
  args.insert(args.end(), {"--directory", "embedded"});
  for (const auto& other : sandbox.hosts) {
    if (other.id == host.id) continue;
    args.insert(args.end(),
                {"--peer", std::to_string(other.id) + "=" + other.router + "=" + other.pod_cidr});
  }
  return args;
}

}  // namespace

int sandbox_up(const SandboxUpOptions& options) {
  const std::string dir = run_dir();
  if (options.directory == kDirectoryEtcd && options.hosts < 2)
    throw UsageError("--directory etcd needs --hosts 2 or more (one host needs no directory)");
  Sandbox sandbox = plan_sandbox(options.hosts, options.containers, dir,
                                 options.directory.empty() ? kDirectoryEtcd : options.directory);
  if (sandbox.hosts.back().socket.size() >= sizeof(sockaddr_un::sun_path))
    throw Error("run directory " + dir + " is too long for a Unix socket path (set " + kRunDirEnv +
                " to a shorter one)");
  if (!find_tool("ip")) throw Error("cannot find the iproute2 `ip` command");
  sandbox.daemon = find_daemon();
  if (!sandbox.directory.empty())
    sandbox.router_security = options.router_plaintext ? "plaintext" : "tls";
  if (sandbox.directory == kDirectoryEtcd) sandbox.etcd.binary = find_etcd();

  RunDirLock lock(dir);
  if (std::filesystem::exists(state_path(dir)) || !list_sandbox_netns().empty())
    throw Error("sandbox already up (vrdma sandbox down first)");
  std::vector<std::string> daemon_args = {"--netns-prefix", netns_prefix()};
  if (!options.log_level.empty())
    daemon_args.insert(daemon_args.end(), {"--log-level", options.log_level});
  // The sandbox's containers share one tenant unless the caller gives tenants of its own, or
  // has vrdmad take them from the platform.
  const bool platform_tenants =
      std::any_of(options.daemon_args.begin(), options.daemon_args.end(), [](const auto& a) {
        return a == "--platform-tenants" || a.rfind("--platform-tenants=", 0) == 0;
      });
  const std::vector<std::string> tenants = !options.tenants.empty() || platform_tenants
                                               ? options.tenants
                                               : sandbox_tenant_rules(sandbox);
  for (const auto& t : tenants) daemon_args.insert(daemon_args.end(), {"--tenant", t});
  for (const auto& a : options.daemon_args) daemon_args.push_back(a);
  InterruptGuard guard;
  try {
    build_network(sandbox, InterruptGuard::check);
    if (!sandbox.directory.empty()) firewall_router_ports(sandbox);
    if (!sandbox.pki.empty()) write_sandbox_pki(sandbox);
    if (sandbox.directory == kDirectoryEtcd) {
      std::error_code ec;
      std::filesystem::remove_all(etcd_dir(dir), ec);  // a crashed sandbox's data
      if (ec) throw Error("cannot remove " + etcd_dir(dir) + ": " + ec.message());
      sandbox.etcd.pid = start_etcd(sandbox, InterruptGuard::check);
      setup_etcd_auth(sandbox);
    }
    for (auto& h : sandbox.hosts) {
      make_dirs(host_dir(dir, h.id));
      std::vector<std::string> args = daemon_args;
      for (auto& a : cluster_args(sandbox, h)) args.push_back(std::move(a));
      h.pid = start_daemon(h, sandbox.daemon, args);
    }
    wait_for_daemons(sandbox, InterruptGuard::check);
    build_container_mounts(sandbox, InterruptGuard::check);
    save_sandbox(sandbox);
    wait_for_directory(sandbox, InterruptGuard::check);
  } catch (const Error& e) {
    std::cerr << "vrdma sandbox up: " << (g_interrupted ? "interrupted" : e.what()) << "\n";
    TeardownResult t = teardown_sandbox(dir);
    for (const auto& err : t.errors) std::cerr << "vrdma sandbox up: cleanup: " << err << "\n";
    std::cerr << "vrdma sandbox up: "
              << (t.errors.empty() ? "removed the partial sandbox"
                                   : "could not remove all of the partial sandbox")
              << "\n";
    return kExitError;
  }
  std::cout << "sandbox up: " << plural(sandbox.hosts.size(), "host") << ", "
            << plural(sandbox.containers.size(), "container") << ", vrdmad " << sandbox.daemon;
  if (sandbox.directory == kDirectoryEtcd)
    std::cout << ", etcd " << sandbox.etcd.client_url << " (pid " << sandbox.etcd.pid << ")";
  else if (sandbox.directory == kDirectoryEmbedded)
    std::cout << ", embedded directory";
  if (!sandbox.router_security.empty())
    std::cout << ", routers " << (sandbox.router_security == "tls" ? "over mutual TLS" : "in PLAINTEXT");
  std::cout << "\n\n";
  print_sandbox_table(sandbox);
  return kExitOk;
}

}  // namespace vrdma::ctl
