// vrdmad: the per-host vrdma daemon.
#include <arpa/inet.h>
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <CLI/CLI.hpp>
#include <filesystem>
#include <string>
#include <vector>

#include "common/log.h"
#include "common/unix_socket.h"
#include "daemon/core/config.h"
#include "daemon/core/daemon.h"
#include "daemon/core/socket_group.h"
#include "daemon/directory/directory.h"

namespace {

vrdma::daemon::Daemon* g_daemon = nullptr;

void on_stop_signal(int) {
  if (g_daemon) g_daemon->stop();
}

// Creates the socket's parent directories (mode 0755) when they do not exist.
int make_parent_dirs(const std::string& socket_path) {
  std::filesystem::path parent = std::filesystem::path(socket_path).parent_path();
  if (parent.empty()) return 0;
  std::string partial;
  for (const auto& part : parent) {
    partial = (std::filesystem::path(partial) / part).string();
    if (partial == "/") continue;
    if (::mkdir(partial.c_str(), 0755) < 0 && errno != EEXIST) return errno;
  }
  return 0;
}

void raise_fd_limit() {
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &rl);
  }
}

// Validates and stores the options about other hosts; 0, or the exit code after a message.
int check_cluster_options(const std::vector<std::string>& pod_cidr_args,
                          vrdma::daemon::DaemonConfig* cfg) {
  using namespace vrdma;
  using namespace vrdma::daemon;
  uint32_t addr;
  uint16_t port;
  if (!cfg->router_listen.empty() && !parse_ipv4_port(cfg->router_listen, &addr, &port)) {
    std::fprintf(stderr, "vrdmad: --router-listen: expected IPV4:PORT, not '%s'\n",
                 cfg->router_listen.c_str());
    return 2;
  }
  const bool tls_given = !cfg->tls_ca.empty() || !cfg->tls_cert.empty() || !cfg->tls_key.empty();
  if (!cfg->router_listen.empty() && !cfg->router_plaintext &&
      (cfg->tls_ca.empty() || cfg->tls_cert.empty() || cfg->tls_key.empty())) {
    std::fprintf(stderr,
                 "vrdmad: a router (--router-listen) authenticates and encrypts its links with "
                 "TLS: give --tls-ca, --tls-cert and --tls-key%s (or --router-plaintext, "
                 "insecure)\n",
                 tls_given ? " (all three)" : "");
    return 2;
  }
  for (const auto& c : pod_cidr_args) {
    Ipv4Cidr net;
    if (c.empty() || !parse_cidr(c, &net, nullptr)) {
      std::fprintf(stderr, "vrdmad: --pod-cidr: expected A.B.C.D/LEN, not '%s'\n", c.c_str());
      return 2;
    }
    cfg->pod_cidrs.push_back(net);
  }
  if (tls_given &&
      (cfg->tls_ca.empty() || cfg->tls_cert.empty() || cfg->tls_key.empty())) {
    std::fprintf(stderr, "vrdmad: --tls-ca, --tls-cert and --tls-key go together\n");
    return 2;
  }
  std::string error;
  if (!make_directory(cfg->directory_config(), &error)) {
    std::fprintf(stderr, "vrdmad: bad directory configuration: %s\n", error.c_str());
    return 2;
  }
  return 0;
}

// What the command line gives beyond DaemonConfig's own fields, before it is checked.
struct RawArgs {
  std::vector<std::string> tenants;
  std::vector<std::string> pod_cidrs;
  std::string log_level = "info";
  bool no_peer_pidfd = false;
};

std::string quota_help(vrdma::daemon::Resource r) {
  using vrdma::daemon::Resource;
  switch (r) {
    case Resource::kConnections:
      return "connections to vrdmad (EMFILE beyond)";
    case Resource::kQps:
      return "QPs (EDQUOT beyond)";
    case Resource::kMrs:
      return "registered memory regions (EDQUOT beyond)";
    case Resource::kRegisteredBytes:
      return "bytes of registered memory (EDQUOT beyond)";
    case Resource::kFds:
      return "descriptors handed to vrdmad (EMFILE beyond)";
    case Resource::kCmListeners:
      return "rdma_cm listeners (EMFILE beyond)";
    case Resource::kCmConnections:
      return "rdma_cm connections it initiates (EMFILE beyond)";
    case Resource::kDirectoryEntries:
      return "entries in the cluster directory: its address and its rdma_cm listeners (EDQUOT "
             "beyond)";
  }
  return "";
}

void add_options(CLI::App& app, vrdma::daemon::DaemonConfig& cfg, RawArgs& raw) {
  using namespace vrdma::daemon;
  app.add_option("--socket", cfg.socket_path,
                 "Unix socket to serve (default: $VRDMA_SOCKET or /run/vrdma/vrdmad.sock)");
  app.add_option("--host-id", cfg.host_id, "This host's number in the cluster")->default_val(0);
  app.add_option("--socket-group", cfg.socket_group,
                 "Group (name or number) that may connect to the socket, which is mode 0660 "
                 "(default: vrdmad's own group, root's when it runs as root)");
  app.add_option("--tenant", raw.tenants,
                 "NAME=CIDR: clients whose IPv4 address is in CIDR belong to tenant NAME and "
                 "may connect to each other; the first matching rule wins. A container no rule "
                 "covers is a tenant of its own, \"@<its address>\" (repeatable)")
      ->allow_extra_args(false);
  app.add_option("--platform-tenants", cfg.platform_tenants,
                 "FILE: take containers' tenants from the platform: lines \"TENANT NETNS_PATH\" "
                 "written by `vrdma device-plugin --tenants-from-cri` from the container "
                 "runtime's pod sandboxes, read when a client connects. Only root (or vrdmad's "
                 "user) may write the file and its directory, or it is ignored. A container "
                 "it does not name is a tenant of its own. Exclusive with --tenant");
  app.add_flag("--allow-host-clients", cfg.allow_host_clients,
               "Give a device to the host's own processes (vrdmad's network namespace) without "
               "a --tenant rule covering the host's address; their tenant is \"@host\"");
  app.add_option("--log-level", raw.log_level, "error, warn, info or debug")
      ->check(CLI::IsMember({"error", "warn", "info", "debug"}))
      ->default_val("info");
  app.add_option("--netns-dir", cfg.netns_dir,
                 "Where named network namespaces are pinned; a client's container name is "
                 "the entry whose inode matches its namespace, without --netns-prefix")
      ->default_val("/run/netns");
  app.add_option("--netns-prefix", cfg.netns_prefix,
                 "Left out of container names taken from --netns-dir")
      ->default_val("vrdma-");
  app.add_flag("--trust-unnamed-netns", cfg.trust_unnamed_netns,
               "Give a device to clients in network namespaces that are neither the host's "
               "nor pinned in --netns-dir, trusting their address (by default they get none: "
               "such namespaces can be made by unprivileged users, with any address). "
               "Namespaces made in another user namespace (unshare -U) never get one");
  app.add_flag("--no-peer-pidfd", raw.no_peer_pidfd,
               "Identify clients as on kernels before 6.5, without SO_PEERPIDFD (the pid is "
               "checked by the socket its process holds); for testing that path");
  for (size_t i = 0; i < kResourceCount; ++i) {
    auto r = static_cast<Resource>(i);
    std::string name = resource_name(r);
    for (char& ch : name)
      if (ch == '_') ch = '-';
    app.add_option("--max-" + name + "-per-container", cfg.quotas[r],
                   "Quota of each container (network namespace; all anonymous ones together): " +
                       quota_help(r))
        ->default_val(cfg.quotas[r]);
  }
  app.add_option("--router-listen", cfg.router_listen,
                 "ADDR:PORT (IPv4) where this host's router accepts links from other hosts; "
                 "without it the daemon serves its own host only");
  app.add_option("--tls-ca", cfg.tls_ca,
                 "PEM file of the cluster CA, which signed etcd's and every host's certificate: "
                 "a router accepts links only from hosts whose certificate it signed")
      ->check(CLI::ExistingFile);
  app.add_option("--tls-cert", cfg.tls_cert,
                 "PEM file of this host's certificate (subject CN vrdma-host-<host id>, which etcd "
                 "takes as this host's user; subjectAltName IP of its --router-listen address)")
      ->check(CLI::ExistingFile);
  app.add_option("--tls-key", cfg.tls_key, "PEM file of this host's private key")
      ->check(CLI::ExistingFile);
  app.add_flag("--router-plaintext", cfg.router_plaintext,
               "INSECURE: links between routers without TLS, neither authenticated nor "
               "encrypted (for benchmarks and closed test networks); without it a router needs "
               "--tls-ca, --tls-cert and --tls-key");
  app.add_option("--pod-cidr", raw.pod_cidrs,
                 "CIDR: a container network this host owns, published in the directory "
                 "(repeatable)")
      ->allow_extra_args(false);
  app.add_option("--directory", cfg.directory,
                 "Cluster directory: \"embedded\" (this host and its --peer hosts) or "
                 "\"etcd://HOST:PORT[,HOST:PORT...]\" (etcd v3 over TLS with --tls-ca, --tls-cert "
                 "and --tls-key; IPv4 endpoints)")
      ->default_val("embedded");
  app.add_option("--peer", cfg.static_peers,
                 "ID=ADDR:PORT=CIDR[,CIDR...]: another host of an embedded directory, its "
                 "router address and container networks (repeatable)")
      ->allow_extra_args(false);
  app.add_option("--cm-remote-timeout", cfg.cm_remote_timeout_s,
                 "Seconds an rdma_cm connection waits for another host (its reply, its RTU) or "
                 "for a listener here to answer that host, before it fails")
      ->default_val(cfg.cm_remote_timeout_s)
      ->check(CLI::Range(1, 3600));
  app.add_option("--directory-lease", cfg.directory_lease_s,
                 "Seconds after which a dead host's etcd entries expire")
      ->default_val(cfg.directory_lease_s);
  app.add_option("--metrics-listen", cfg.metrics_listen,
                 "IPV4:PORT to serve Prometheus metrics on (http://IPV4:PORT/metrics), e.g. "
                 "127.0.0.1:9464 (default: no metrics endpoint). The page describes every "
                 "container of the host and has no authentication: an address on a container "
                 "network (--pod-cidr, --tenant) or 0.0.0.0 is refused without "
                 "--metrics-on-pod-network");
  app.add_flag("--metrics-on-pod-network", cfg.metrics_on_pod_network,
               "Allow --metrics-listen on 0.0.0.0 or on a container network");
}

// The metrics endpoint's address: well formed, and off the container networks unless allowed.
int check_metrics_options(vrdma::daemon::DaemonConfig* cfg) {
  using namespace vrdma;
  if (cfg->metrics_listen.empty()) {
    if (cfg->metrics_on_pod_network)
      std::fprintf(stderr, "vrdmad: --metrics-on-pod-network without --metrics-listen: ignored\n");
    return 0;
  }
  uint32_t addr;
  uint16_t port;
  if (!parse_ipv4_port(cfg->metrics_listen, &addr, &port)) {
    std::fprintf(stderr, "vrdmad: --metrics-listen: expected IPV4:PORT, not '%s'\n",
                 cfg->metrics_listen.c_str());
    return 2;
  }
  const uint32_t host_order = ntohl(addr);
  std::string on;
  if (host_order == 0) on = "every address of the host (0.0.0.0)";
  for (const auto& c : cfg->pod_cidrs)
    if (on.empty() && c.contains(host_order)) on = "the container network " + cidr_text(c);
  for (const auto& t : cfg->tenants)
    if (on.empty() && t.contains(host_order))
      on = "the network of tenant " + t.name + " (" + cidr_text(t) + ")";
  if (!on.empty() && !cfg->metrics_on_pod_network) {
    std::fprintf(stderr,
                 "vrdmad: --metrics-listen %s is on %s: containers could read every container's "
                 "counters. Listen on 127.0.0.1 or a management address, or allow it with "
                 "--metrics-on-pod-network\n",
                 cfg->metrics_listen.c_str(), on.c_str());
    return 2;
  }
  if ((host_order >> 24) != 127)
    LOG_WARN("metrics: %s is not a loopback address; the page has no authentication",
             cfg->metrics_listen.c_str());
  return 0;
}

// Checks what the options say and completes `cfg`. 0, or the exit status (2) after a message.
int apply_options(const RawArgs& raw, vrdma::daemon::DaemonConfig* cfg) {
  using namespace vrdma;
  using namespace vrdma::daemon;
  set_log_level(*parse_log_level(raw.log_level));
  cfg->peer_pidfd = !raw.no_peer_pidfd;
  if (!cfg->socket_group.empty()) {
    gid_t gid;
    std::string why;
    if (!resolve_group(cfg->socket_group, &gid, &why)) {
      std::fprintf(stderr, "vrdmad: --socket-group: %s\n", why.c_str());
      return 2;
    }
  }
  if (!cfg->platform_tenants.empty() && !raw.tenants.empty()) {
    std::fprintf(stderr,
                 "vrdmad: --platform-tenants and --tenant exclude each other: with tenants from "
                 "the platform, a container the platform does not name shares no tenant\n");
    return 2;
  }
  if (!cfg->platform_tenants.empty() && cfg->platform_tenants.front() != '/') {
    std::fprintf(stderr, "vrdmad: --platform-tenants: an absolute path, please\n");
    return 2;
  }
  for (const auto& t : raw.tenants) {
    std::string error;
    auto rule = parse_tenant_rule(t, &error);
    if (!rule) {
      std::fprintf(stderr, "vrdmad: --tenant: %s\n", error.c_str());
      return 2;
    }
    cfg->tenants.push_back(*rule);
  }
  if (int rc = check_cluster_options(raw.pod_cidrs, cfg); rc != 0) return rc;
  return check_metrics_options(cfg);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace vrdma;
  using namespace vrdma::daemon;
  CLI::App app{"vrdmad: per-host daemon of vrdma (software RDMA for containers)"};
  DaemonConfig cfg;
  cfg.socket_path = vrdma::socket_path_from_env();
  RawArgs raw;
  add_options(app, cfg, raw);
  CLI11_PARSE(app, argc, argv);
  if (int rc = apply_options(raw, &cfg); rc != 0) return rc;

  ::signal(SIGPIPE, SIG_IGN);
  raise_fd_limit();
  if (int err = make_parent_dirs(cfg.socket_path)) {
    LOG_ERROR("cannot create the directory of %s: %s", cfg.socket_path.c_str(), strerror(err));
    return 1;
  }

  Daemon daemon(cfg);
  g_daemon = &daemon;
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGTERM, &sa, nullptr);
  ::sigaction(SIGINT, &sa, nullptr);

  if (daemon.start() != 0) return 1;
  int err = daemon.run();
  g_daemon = nullptr;
  return err != 0 ? 1 : 0;
}
