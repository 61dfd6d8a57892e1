// vrdmad configuration: what main() parses from the command line and tests set directly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/address.h"
#include "daemon/core/quotas.h"
#include "daemon/directory/directory.h"
#include "daemon/identity/admission.h"
#include "daemon/identity/client_identity.h"
#include "daemon/identity/tenant_policy.h"
#include "daemon/identity/tenants.h"
#include "daemon/router/router_config.h"

namespace vrdma::daemon {

struct DaemonConfig {
  // What the directory and the router take from the daemon's options.
  DirectoryConfig directory_config() const {
    return DirectoryConfig{directory, host_id, static_peers, directory_lease_s,
                           tls_ca,    tls_cert, tls_key};
  }
  RouterConfig router_config() const {
    RouterConfig r;
    r.host_id = host_id;
    r.listen = router_listen;
    r.tls = TlsFiles{tls_ca, tls_cert, tls_key};
    r.plaintext = router_plaintext;
    r.bulk_links = router_links;
    r.threads = router_threads;
    r.cpus = router_cpus;
    r.poll_ns = int64_t(router_poll_us) * 1000;
    r.qos = qos;
    return r;
  }
  // This host's directory entry.
  HostEntry self_entry() const { return HostEntry{host_id, router_listen, pod_cidrs}; }

  IdentityOptions identity_options() const {
    return IdentityOptions{netns_dir, netns_prefix, trust_unnamed_netns, peer_pidfd};
  }
  DevicePolicy device_policy() const {
    return DevicePolicy{&tenants, allow_host_clients, netns_dir};
  }

  std::string socket_path;
  // The socket is mode 0660, owned by the daemon's user and this group (a name or a number;
  // empty: the daemon's own group). Only members (and root) can connect.
  std::string socket_group;
  uint32_t host_id = 0;
  // Tenants: clients whose address a rule covers share the rule's tenant; a container no rule
  // covers is a tenant of its own.
  std::vector<TenantRule> tenants;
  // Tenants from the platform (platform_tenants.h): the file that maps pods' network
  // namespaces to tenants, read when a client connects; "" for none. Exclusive with `tenants`.
  std::string platform_tenants;
  // Pairs of tenants whose containers may reach each other through the mediated path
  // (tenant_policy.h): "A->B" lets A initiate connections to B.
  std::vector<TenantAllow> allow;
  // The host's own processes (the daemon's network namespace) get a device without a tenant
  // rule covering the host's address (tenant "@host").
  bool allow_host_clients = false;
  // Where named network namespaces are pinned (`ip netns add`); a client's container name is
  // the entry there whose inode matches its namespace, without a leading "vrdma-".
  std::string netns_dir = "/run/netns";
  std::string netns_prefix = "vrdma-";  // left out of container names
  // A namespace that is neither the daemon's own nor pinned in netns_dir can be made by any
  // unprivileged process (unshare -Urn) with any address in it, so by default it is anonymous:
  // no device. With this set, such namespaces of the host's user namespace are trusted with
  // their address (namespaces of other user namespaces never are).
  bool trust_unnamed_netns = false;
  // Ask the kernel for the client's pidfd (SO_PEERPIDFD, Linux 6.5); false identifies clients
  // as on older kernels (to test that path).
  bool peer_pidfd = true;

  // Per-container quotas.
  QuotaLimits quotas;
  int max_protocol_errors = 16;  // malformed requests before the client is dropped
  // Connections waiting to be told they were refused (their Hello gets the error); beyond this
  // many, a refused connection is closed at once.
  size_t max_refused_pending = 256;

  // Across hosts. A daemon without router_listen serves its own host only.
  std::string router_listen;            // "a.b.c.d:port" this host's router accepts links on
  // The cluster's PKI (PEM files): the CA, this host's certificate (CN vrdma-host-<id>,
  // subjectAltName IP of its router address) and key. Required with a router unless
  // router_plaintext, and by the etcd directory (etcd takes the certificate's CN as this host's
  // user, whose role may write only this host's keys).
  std::string tls_ca, tls_cert, tls_key;
  bool router_plaintext = false;  // links between routers without TLS (insecure)
  uint32_t router_links = 1;      // bulk links to each other host (RouterConfig::bulk_links)
  uint32_t router_threads = 2;    // router threads (RouterConfig::threads, router_pool.h)
  std::vector<uint32_t> router_cpus;  // the CPUs router threads run on (RouterConfig::cpus)
  uint32_t router_poll_us = 0;  // polling on after work, in us (RouterConfig::poll_ns)
  // The direct path: connections between containers of this host and containers of other
  // hosts (same tenant, no QoS rule of vrdmad's) go straight between the two containers over
  // the pod network, to `direct_port` of the destination's address. Off: every such
  // connection goes through the routers (their TLS, their QoS).
  bool direct_path = true;
  uint16_t direct_port = wire::kDirectPort;
  std::vector<Ipv4Cidr> pod_cidrs;      // container networks this host owns
  qos::RuleSet qos;  // weights and rate limits of containers and tenants on the router's links
  std::string directory = "embedded";   // "embedded" or "etcd://host:port[,host:port...]"
  std::vector<std::string> static_peers;  // embedded directory: "ID=a.b.c.d:port=CIDR[,CIDR]"
  int directory_lease_s = 5;            // entries of a dead host expire after this
  int cm_remote_timeout_s = 30;  // an rdma_cm side waiting for another host gives up after this
  // Scheduling priority (nice) of a daemon with a router: it must get a core promptly when
  // routed traffic wakes it, also when the applications it serves spin on every core.
  int router_nice = -10;

  // The Prometheus endpoint ("a.b.c.d:port", http://.../metrics); empty: none. main() refuses
  // an address on a container network (a --pod-cidr or --tenant range) unless
  // metrics_on_pod_network: the counters describe every container of the host.
  std::string metrics_listen;
  bool metrics_on_pod_network = false;
  bool operator==(const DaemonConfig&) const = default;
};

}  // namespace vrdma::daemon
