// The two directory implementations behind make_directory, and the lookup rule they share.
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "daemon/directory/directory.h"
#include "etcd/etcd_client.h"

namespace vrdma::daemon {

// This host (from start()) plus fixed peers; always available.
std::unique_ptr<Directory> make_embedded_directory(std::vector<HostEntry> peers);

// etcd v3 through its gRPC API over TLS with the host's certificate; entries under one lease of
// lease_s seconds.
std::unique_ptr<Directory> make_etcd_directory(std::vector<etcd::Endpoint> endpoints,
                                               etcd::Credentials credentials, int lease_s);

// The host whose networks hold the address (host byte order) with the longest prefix, `self`
// first on a tie; an entry of `others` with self's id is skipped. nullptr if none does.
const HostEntry* host_by_cidr(const HostEntry& self, const std::map<uint32_t, HostEntry>& others,
                              uint32_t ipv4_host);
// The host (this one or another) whose router address has this IPv4 address (network order).
const HostEntry* host_by_router_ip(const HostEntry& self,
                                   const std::map<uint32_t, HostEntry>& others, uint32_t ipv4_net);

}  // namespace vrdma::daemon
