// etcd's users and roles for a vrdma cluster, set up once with the root user's certificate
// (subject CN "root") before the hosts start:
//   user root, role root                 everything (administration)
//   user vrdma-host-<id>, role of the same name:
//     read        /vrdma/                 every host reads the whole directory
//     read-write  /vrdma/hosts/<id>/      and writes only its own entries
// and auth enabled. With --client-cert-auth etcd takes a verified client certificate's Common
// Name as the user, so a host's certificate (vrdma-host-<id>) is all it needs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "etcd/etcd_client.h"

namespace vrdma::etcd {

inline constexpr const char* kRootUser = "root";
inline constexpr const char* kDirectoryPrefix = "/vrdma/";

// "vrdma-host-<id>": the user and role of host `id` (its certificate's Common Name).
std::string host_user(uint32_t id);
// "/vrdma/hosts/<id>/": what host `id` may write.
std::string host_write_prefix(uint32_t id);

// Adds the root user and each host's user and role (as above). Enables auth if `enable`.
// The client must be root's (or talk to an etcd without auth yet). false and *error on the
// first failure.
bool setup_auth(Client& root, const std::vector<uint32_t>& host_ids, bool enable,
                std::string* error);
// Adds host `id`'s user and role to an etcd whose auth is already on (a host that joins).
bool add_host(Client& root, uint32_t id, std::string* error);

}  // namespace vrdma::etcd
