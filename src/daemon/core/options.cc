#include "daemon/core/options.h"

#include <arpa/inet.h>

#include <algorithm>

#include "common/address.h"
#include "common/cpu_list.h"
#include "common/protocol.h"
#include "daemon/core/reload.h"
#include "daemon/core/socket_group.h"
#include "daemon/directory/directory.h"
#include "daemon/identity/tenant_policy.h"
#include "daemon/identity/tenants.h"
#include "daemon/qos/rules.h"
#include "transport/wire.h"

namespace vrdma::daemon {

namespace {

// Validators: the option's own check, so that a bad value is refused where it was given (the
// command line, or the file's line).
CLI::Validator ipv4_port_or_empty() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        uint32_t addr;
        uint16_t port;
        if (s.empty() || parse_ipv4_port(s, &addr, &port)) return "";
        return "expected IPV4:PORT, not '" + s + "'";
      },
      "IPV4:PORT");
}

CLI::Validator cidr() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        Ipv4Cidr net;
        if (!s.empty() && parse_cidr(s, &net, nullptr)) return "";
        return "expected A.B.C.D/LEN, not '" + s + "'";
      },
      "CIDR");
}

CLI::Validator tenant_rule() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        std::string error;
        return parse_tenant_rule(s, &error) ? "" : error;
      },
      "NAME=CIDR");
}

CLI::Validator tenant_allow() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        std::string error;
        return parse_tenant_allow(s, &error) ? "" : error;
      },
      "FROM->TO");
}

CLI::Validator cpu_list() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        std::string error;
        return s.empty() || parse_cpu_list(s, &error) ? "" : error;
      },
      "CPU LIST");
}

CLI::Validator qos_rule() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        std::string error;
        return qos::parse_rule(s, &error) ? "" : error;
      },
      "container=IP|tenant=NAME:weight=W,rate=BYTES/S,msgs=MSGS/S");
}

CLI::Validator peer() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        std::string error;
        return parse_peer(s, &error) ? "" : error;
      },
      "ID=ADDR:PORT=CIDR[,CIDR]");
}

std::string quota_help(Resource r) {
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

}  // namespace

std::string quota_option(Resource r) {
  std::string name = resource_name(r);
  for (char& ch : name)
    if (ch == '_') ch = '-';
  return "max-" + name + "-per-container";
}

void add_options(CLI::App& app, DaemonOptions& opts) {
  DaemonConfig& cfg = opts.cfg;
  app.add_option("--socket", cfg.socket_path,
                 "Unix socket to serve ($VRDMA_SOCKET, when set, comes before the configuration "
                 "file)")
      ->envname(proto::kSocketEnv)
      ->default_val(proto::kDefaultSocket);
  app.add_option("--host-id", cfg.host_id, "This host's number in the cluster")->default_val(0);
  app.add_option("--socket-group", cfg.socket_group,
                 "Group (name or number) that may connect to the socket, which is mode 0660 "
                 "(default: vrdmad's own group, root's when it runs as root)");
  app.add_option("--tenant", opts.tenants,
                 "NAME=CIDR: clients whose IPv4 address is in CIDR belong to tenant NAME and "
                 "may connect to each other; the first matching rule wins. A container no rule "
                 "covers is a tenant of its own, \"@<its address>\" (repeatable)")
      ->allow_extra_args(false)
      ->check(tenant_rule());
  app.add_option("--platform-tenants", cfg.platform_tenants,
                 "FILE: take containers' tenants from the platform: lines \"TENANT NETNS_PATH\" "
                 "written by `vrdma device-plugin --tenants-from-cri` from the container "
                 "runtime's pod sandboxes, read when a client connects. Only root (or vrdmad's "
                 "user) may write the file and its directory, or it is ignored. A container "
                 "it does not name is a tenant of its own. Exclusive with --tenant");
  app.add_option("--allow", opts.allow,
                 "FROM->TO: containers of tenant FROM may connect to containers of tenant TO "
                 "through vrdmad (the mediated path: no memory shared, every request checked "
                 "by vrdmad's router). One-way for initiating rdma_cm connections; QPs of an "
                 "allowed pair connect to each other, each end naming the other, and carry "
                 "work both ways. Give the same rules on every host (repeatable)")
      ->allow_extra_args(false)
      ->check(tenant_allow());
  app.add_flag("--allow-host-clients", cfg.allow_host_clients,
               "Give a device to the host's own processes (vrdmad's network namespace) without "
               "a --tenant rule covering the host's address; their tenant is \"@host\"");
  app.add_option("--log-level", opts.log_level, "error, warn, info or debug")
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
  app.add_flag("--no-peer-pidfd", opts.no_peer_pidfd,
               "Identify clients as on kernels before 6.5, without SO_PEERPIDFD (the pid is "
               "checked by the socket its process holds); for testing that path");
  for (size_t i = 0; i < kResourceCount; ++i) {
    auto r = static_cast<Resource>(i);
    app.add_option("--" + quota_option(r), cfg.quotas[r],
                   "Quota of each container (network namespace; all anonymous ones together): " +
                       quota_help(r))
        ->default_val(cfg.quotas[r]);
  }
  app.add_option("--router-listen", cfg.router_listen,
                 "ADDR:PORT (IPv4) where this host's router accepts links from other hosts; "
                 "without it the daemon serves its own host only")
      ->check(ipv4_port_or_empty());
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
  app.add_option("--router-links", cfg.router_links,
                 "Bulk links (TCP streams) this host's router opens to each other host; the "
                 "bulk QPs connecting to a host take them in turn (the latency class has a link "
                 "of its own). More links spread the kernel's work where cores allow")
      ->default_val(cfg.router_links)
      ->check(CLI::Range(1u, wire::kMaxBulkLinks));
  app.add_option("--router-threads", cfg.router_threads,
                 "Threads the router runs on. Each lane's links belong to one thread: the "
                 "latency class's link to the last thread, which carries nothing else (so that "
                 "its frames never wait behind a bulk pass), and bulk link k (--router-links) "
                 "to thread k mod (N-1). More bulk threads help where cores are free for them")
      ->default_val(cfg.router_threads)
      ->check(CLI::Range(1u, RouterConfig::kMaxThreads));
  app.add_option("--router-cpus", opts.router_cpus,
                 "CPUs the router threads run on, as a list such as 0-3,6 (default: any the "
                 "daemon may use): keep the data path on chosen cores, e.g. near the NIC or "
                 "apart from the applications. A CPU the daemon may not use is refused")
      ->check(cpu_list());
  app.add_option("--router-poll-us", cfg.router_poll_us,
                 "Microseconds a router thread goes on polling after routed work before it "
                 "sleeps (0..1000000; default 0: it sleeps as soon as it finds nothing to do). "
                 "Polling spares the next frame a wake-up, which is worth it where the router "
                 "threads have cores of their own (--router-cpus); where programs spin on every "
                 "core, a polling router takes time from them")
      ->default_val(cfg.router_poll_us)
      ->check(CLI::Range(0u, 1'000'000u));
  app.add_flag("--no-direct-path", opts.no_direct_path,
               "Keep every connection between this host's containers and other hosts' on the "
               "routers (TLS between hosts, vrdmad's QoS), none on the direct path (by default "
               "containers of one tenant exchange their traffic straight over the pod network)");
  app.add_option("--direct-port", cfg.direct_port,
                 "TCP port of every container's address where its direct connections arrive, "
                 "inside its network namespace (the port a NetworkPolicy or firewall rule names "
                 "to govern RDMA between containers; give the same port on every host)")
      ->default_val(cfg.direct_port)
      ->check(CLI::Range(1, 65535));
  app.add_option("--qos", opts.qos,
                 "Quality of service between hosts: the share and limits of a container "
                 "(container=IPV4:...) or a tenant (tenant=NAME:...) on the router's links, as "
                 "weight=W (relative share, 1..1000, default 1), rate=BYTES/S and msgs=MSGS/S "
                 "(limits, default none); numbers take k, M, G (powers of 1000), e.g. "
                 "container=10.0.1.2:weight=3,rate=100M. A QP whose address has a nonzero SL "
                 "or DSCP 46 in its traffic class goes first (latency class). `vrdma qos set` "
                 "changes rules at run time (repeatable)")
      ->allow_extra_args(false)
      ->check(qos_rule());
  app.add_option("--pod-cidr", opts.pod_cidrs,
                 "CIDR: a container network this host owns, published in the directory "
                 "(repeatable)")
      ->allow_extra_args(false)
      ->check(cidr());
  app.add_option("--directory", cfg.directory,
                 "Cluster directory: \"embedded\" (this host and its --peer hosts) or "
                 "\"etcd://HOST:PORT[,HOST:PORT...]\" (etcd v3 over TLS with --tls-ca, --tls-cert "
                 "and --tls-key; IPv4 endpoints)")
      ->default_val("embedded");
  app.add_option("--peer", cfg.static_peers,
                 "ID=ADDR:PORT=CIDR[,CIDR...]: another host of an embedded directory, its "
                 "router address and container networks (repeatable)")
      ->allow_extra_args(false)
      ->check(peer());
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
                 "--metrics-on-pod-network")
      ->check(ipv4_port_or_empty());
  app.add_flag("--metrics-on-pod-network", cfg.metrics_on_pod_network,
               "Allow --metrics-listen on 0.0.0.0 or on a container network");
}

namespace {

// The metrics endpoint's address: off the container networks unless allowed. "" or why not.
std::string check_metrics_listen(const DaemonConfig& cfg) {
  uint32_t addr;
  uint16_t port;
  if (cfg.metrics_listen.empty() || !parse_ipv4_port(cfg.metrics_listen, &addr, &port)) return "";
  const uint32_t host_order = ntohl(addr);
  std::string on;
  if (host_order == 0) on = "every address of the host (0.0.0.0)";
  for (const auto& c : cfg.pod_cidrs)
    if (on.empty() && c.contains(host_order)) on = "the container network " + cidr_text(c);
  for (const auto& t : cfg.tenants)
    if (on.empty() && t.contains(host_order))
      on = "the network of tenant " + t.name + " (" + cidr_text(t) + ")";
  if (on.empty() || cfg.metrics_on_pod_network) return "";
  return "--metrics-listen " + cfg.metrics_listen + " is on " + on +
         ": containers could read every container's counters. Listen on 127.0.0.1 or a "
         "management address, or allow it with --metrics-on-pod-network";
}

}  // namespace

std::string check_options(DaemonOptions* opts) {
  DaemonConfig& cfg = opts->cfg;
  cfg.peer_pidfd = !opts->no_peer_pidfd;
  cfg.direct_path = !opts->no_direct_path;
  if (!cfg.socket_group.empty()) {
    gid_t gid;
    std::string why;
    if (!resolve_group(cfg.socket_group, &gid, &why)) return "--socket-group: " + why;
  }
  if (!cfg.platform_tenants.empty() && !opts->tenants.empty())
    return "--platform-tenants and --tenant exclude each other: with tenants from the platform, "
           "a container the platform does not name shares no tenant";
  if (!cfg.platform_tenants.empty() && cfg.platform_tenants.front() != '/')
    return "--platform-tenants: an absolute path, please";
  cfg.tenants.clear();
  for (const auto& t : opts->tenants) {
    std::string error;
    auto rule = parse_tenant_rule(t, &error);
    if (!rule) return "--tenant: " + error;
    cfg.tenants.push_back(*rule);
  }
  cfg.allow.clear();
  for (const auto& a : opts->allow) {
    std::string error;
    auto rule = parse_tenant_allow(a, &error);
    if (!rule) return "--allow: " + error;
    cfg.allow.push_back(*rule);
  }
  cfg.qos = qos::RuleSet{};
  for (const auto& q : opts->qos) {
    std::string error;
    auto rule = qos::parse_rule(q, &error);
    if (!rule) return "--qos: " + error;
    cfg.qos.put(*rule);
  }
  cfg.pod_cidrs.clear();
  for (const auto& c : opts->pod_cidrs) {
    Ipv4Cidr net;
    if (c.empty() || !parse_cidr(c, &net, nullptr))
      return "--pod-cidr: expected A.B.C.D/LEN, not '" + c + "'";
    cfg.pod_cidrs.push_back(net);
  }
  cfg.router_cpus.clear();
  if (!opts->router_cpus.empty()) {
    std::string error;
    auto cpus = parse_cpu_list(opts->router_cpus, &error);
    if (!cpus) return "--router-cpus: " + error;
    const std::vector<uint32_t> allowed = allowed_cpus();
    for (uint32_t c : *cpus)
      if (!std::binary_search(allowed.begin(), allowed.end(), c))
        return "--router-cpus: CPU " + std::to_string(c) + " is not one vrdmad may run on (" +
               cpu_list_text(allowed) + ")";
    cfg.router_cpus = std::move(*cpus);
  }
  const bool tls_given = !cfg.tls_ca.empty() || !cfg.tls_cert.empty() || !cfg.tls_key.empty();
  const bool tls_all = !cfg.tls_ca.empty() && !cfg.tls_cert.empty() && !cfg.tls_key.empty();
  if (!cfg.router_listen.empty() && !cfg.router_plaintext && !tls_all)
    return std::string(
               "a router (--router-listen) authenticates and encrypts its links with TLS: give "
               "--tls-ca, --tls-cert and --tls-key") +
           (tls_given ? " (all three)" : "") + " (or --router-plaintext, insecure)";
  if (tls_given && !tls_all) return "--tls-ca, --tls-cert and --tls-key go together";
  std::string error;
  if (!make_directory(cfg.directory_config(), &error))
    return "bad directory configuration: " + error;
  return check_metrics_listen(cfg);
}

DaemonSettings::DaemonSettings()
    : app_("vrdmad: per-host daemon of vrdma (software RDMA for containers)"),
      file_(app_, kDefaultConfigFile) {
  // Every option's default as the program starts is its default in --help and in the
  // template, also for options added without default_val().
  app_.option_defaults()->always_capture_default();
  add_options(app_, opts_);
  app_.add_flag("--print-config-template", print_template_,
                "Print the annotated configuration file (every key commented out, with its "
                "default) and exit")
      ->configurable(false);
  app_.add_flag("--print-config", print_config_,
                "Print the settings the command line and the configuration file give, as a "
                "configuration file, and exit")
      ->configurable(false);
  app_.footer(std::string("Settings: the command line, then the configuration file (default ") +
              kDefaultConfigFile +
              "; `vrdmad --print-config-template` lists its keys). SIGHUP or `vrdma reload` "
              "re-reads the file and applies what can change while vrdmad runs.\n"
              "Docs: docs/configuration.md (every option), docs/cluster.md (several hosts), "
              "docs/operating.md#the-service; installed in share/doc/vrdma/docs. man vrdmad.");
}

void DaemonSettings::parse(int argc, const char* const* argv) {
  file_.parse(argc, argv);
}

std::string config_file_template(const CLI::App& app) {
  std::string header =
      "# vrdmad's configuration file (vrdmad --config FILE; default " +
      std::string(kDefaultConfigFile) +
      ").\n"
      "# Every command-line option of vrdmad is a key: its name without \"--\". An option given\n"
      "# on the command line overrides the file; a repeatable option takes a list. Every key\n"
      "# below is commented out and shows its default: uncomment a line to change it.\n"
      "# A bad file (unknown key, wrong type, bad value) is refused with its line, and vrdmad\n"
      "# does not start. SIGHUP (systemctl reload vrdmad) or `vrdma reload` re-reads the file:\n"
      "# keys marked \"applied on reload\" change at once, the others at the next restart.\n"
      "# Generated by `vrdmad --print-config-template`.\n";
  return config::config_template(app, header, [](const std::string& key) -> std::string {
    return reloadable(key) ? "(applied on reload)" : "";
  });
}

}  // namespace vrdma::daemon
