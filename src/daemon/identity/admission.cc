#include "daemon/identity/admission.h"

#include <errno.h>

#include "common/address.h"

namespace vrdma::daemon {

Admission admit(const Identity& id, const DevicePolicy& policy,
                const std::string& platform_tenant) {
  static const std::vector<TenantRule> kNone;
  const std::vector<TenantRule>& rules = policy.tenants ? *policy.tenants : kNone;
  Admission a;
  if (id.anonymous) {
    a.refusal = EACCES;
    a.why = id.foreign_userns
                ? "its network namespace belongs to a user namespace other than vrdmad's "
                  "(unshare -U): its address names nothing"
                : "its network namespace is neither the host's nor pinned in " + policy.netns_dir +
                      " (vrdmad --trust-unnamed-netns trusts such namespaces)";
    return a;
  }
  if (id.duplicate) {
    a.refusal = EADDRINUSE;
    a.why =
        "address " + ipv4_text(id.ipv4) + " is already claimed by another live network namespace";
    return a;
  }
  if (!id.host && !platform_tenant.empty()) {
    a.tenant = platform_tenant;
    return a;
  }
  if (const TenantRule* r = rule_for(rules, id.ipv4)) {
    a.tenant = r->name;
    return a;
  }
  if (id.host) {
    if (policy.allow_host_clients) {
      a.tenant = kHostTenant;
      return a;
    }
    a.refusal = EACCES;
    a.why = "a process of the host (vrdmad's own network namespace, " + ipv4_text(id.ipv4) +
            ") gets a device only with vrdmad --allow-host-clients or a --tenant rule covering "
            "its address";
    return a;
  }
  a.tenant = own_tenant(id.ipv4);
  return a;
}

}  // namespace vrdma::daemon
