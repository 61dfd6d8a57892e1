// vrdmad configuration: what main() parses from the command line and tests set directly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/address.h"
#include "daemon/directory/directory.h"
#include "daemon/identity/tenants.h"
#include "daemon/router/router_config.h"

namespace vrdma::daemon {

struct DaemonConfig {
  // What the directory and the router take from the daemon's options.
  DirectoryConfig directory_config() const {
    return DirectoryConfig{directory, host_id, static_peers, directory_lease_s};
  }
  RouterConfig router_config() const { return RouterConfig{host_id, router_listen}; }
  // This host's directory entry.
  HostEntry self_entry() const { return HostEntry{host_id, router_listen, pod_cidrs}; }

  std::string socket_path;
  uint32_t host_id = 0;
  std::vector<TenantRule> tenants;
  // Where named network namespaces are pinned (`ip netns add`); a client's container name is
  // the entry there whose inode matches its namespace, without a leading "vrdma-".
  std::string netns_dir = "/run/netns";
  std::string netns_prefix = "vrdma-";  // left out of container names
  // A namespace that is neither the daemon's own nor pinned in netns_dir can be made by any
  // unprivileged process (unshare -Urn) with any address in it, so by default its address
  // does not select a tenant: such clients are put in the "default" tenant.
  bool trust_unnamed_netns = false;

  // Per-client quotas.
  size_t max_fds_per_client = 4096;   // PutFd beyond this: EMFILE
  size_t max_keys_per_client = 4096;  // AllocKey beyond this: EDQUOT
  size_t max_qps_per_client = 16384;  // AllocQpn beyond this: EDQUOT
  int max_protocol_errors = 16;       // malformed requests before the client is dropped

  // Across hosts. A daemon without router_listen serves its own host only.
  std::string router_listen;            // "a.b.c.d:port" this host's router accepts links on
  std::vector<Ipv4Cidr> pod_cidrs;      // container networks this host owns
  std::string directory = "embedded";   // "embedded" or "etcd://host:port[,host:port...]"
  std::vector<std::string> static_peers;  // embedded directory: "ID=a.b.c.d:port=CIDR[,CIDR]"
  int directory_lease_s = 5;            // entries of a dead host expire after this
  // Scheduling priority (nice) of a daemon with a router: it must get a core promptly when
  // routed traffic wakes it, also when the applications it serves spin on every core.
  int router_nice = -10;

  bool operator==(const DaemonConfig&) const = default;
};

}  // namespace vrdma::daemon
