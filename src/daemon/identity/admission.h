// Who gets a device, and in which tenant, from what the daemon found out about a client
// (client_identity.h) and its configuration. Pure: no I/O.
//
//   - A client in an anonymous namespace gets none: its address names nothing.
//   - A namespace with an address another live namespace claimed first gets none.
//   - The host's own processes (the daemon's network namespace) get one only when a tenant rule
//     covers the host's address or `allow_host_clients` is set (tenant "@host").
//   - A container gets one: in the tenant the platform gives its namespace (`platform_tenant`,
//     platform_tenants.h) when there is one, else in the tenant of the rule covering its
//     address, else in a tenant of its own ("@a.b.c.d"): without either, containers share
//     nothing.
// A client without a device may still ask for status (as a status-only client).
#pragma once

#include <string>
#include <vector>

#include "daemon/identity/client_identity.h"
#include "daemon/identity/tenants.h"

namespace vrdma::daemon {

struct DevicePolicy {
  const std::vector<TenantRule>* tenants = nullptr;
  bool allow_host_clients = false;
  std::string netns_dir;  // for the messages
};

struct Admission {
  std::string tenant;  // "" when the client gets no device
  int refusal = 0;     // 0, or the errno a device request (verbs Hello) is answered with
  std::string why;     // why it was refused, for the log and the operator
};

Admission admit(const Identity& id, const DevicePolicy& policy,
                const std::string& platform_tenant = {});

}  // namespace vrdma::daemon
