// Tenants from the platform: a file that maps pods' network namespaces to tenants, written by a
// process of the host that asks the container runtime (`vrdma device-plugin --tenants-from-cri`,
// src/k8s/pod_tenants.h) and read by vrdmad when a client connects. Nothing a container says or
// holds enters it: the runtime knows each pod sandbox's namespace and the pod's Kubernetes
// namespace, and only root (or vrdmad's own user) may write the file and its directory.
//
// The file: one line per pod sandbox, "TENANT NETNS_PATH" (a bind mount of the sandbox's
// network namespace, as /var/run/netns/cni-...), '#' comments and blank lines ignored. A client
// whose network namespace is the one at NETNS_PATH belongs to TENANT. A path names a sandbox for
// the sandbox's whole life (runtimes make a fresh one per sandbox), so the mapping cannot be
// taken over by a later namespace that reuses an inode number.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "daemon/identity/client_identity.h"

namespace vrdma::daemon {

struct PlatformEntry {
  std::string tenant;
  std::string netns_path;
  bool operator==(const PlatformEntry&) const = default;
};

// Parses the file's text. False with *error (naming the line) on the first bad line: a tenant
// name that --tenant would refuse, a relative path, a missing or extra field.
bool parse_platform_tenants(std::string_view text, std::vector<PlatformEntry>* out,
                            std::string* error);

// Reads `path` when it can be trusted: a regular file (no symbolic link) owned by root or by
// the calling process's user and writable by nobody else, in a directory of which the same
// holds. False with *error otherwise (then no client gets a tenant from it).
bool read_platform_tenants(const std::string& path, std::vector<PlatformEntry>* out,
                           std::string* error);

// The tenant the entries give namespace `ns` (the first entry whose path is that namespace),
// or "" when none does.
std::string platform_tenant_of(const std::vector<PlatformEntry>& entries, const NetnsId& ns);

}  // namespace vrdma::daemon
