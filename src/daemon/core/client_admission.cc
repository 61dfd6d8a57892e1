// Who a new connection is, whether it gets a device, and what it counts against its
// container's quotas. The policy itself is identity/admission.h; the counting, quotas.h.
#include <errno.h>
#include <string.h>

#include "common/address.h"
#include "common/log.h"
#include "daemon/core/daemon.h"
#include "daemon/identity/platform_tenants.h"

namespace vrdma::daemon {

namespace {

std::string quota_name(const Client& c) {
  return c.ident.anonymous ? std::string("(anonymous namespaces)") : c.ident.container;
}

}  // namespace

std::string Daemon::platform_tenant(const Identity& id) const {
  if (cfg_.platform_tenants.empty() || id.host || id.anonymous) return {};
  std::vector<PlatformEntry> entries;
  std::string why;
  if (!read_platform_tenants(cfg_.platform_tenants, &entries, &why)) {
    LOG_WARN("container %s: no tenant from the platform: %s", id.container.c_str(), why.c_str());
    return {};
  }
  std::string tenant = platform_tenant_of(entries, id.netns);
  if (tenant.empty())
    LOG_INFO(
        "container %s: the platform names no tenant for its network namespace (%s): a "
        "tenant of its own",
        id.container.c_str(), cfg_.platform_tenants.c_str());
  return tenant;
}

int Daemon::charge(Client& c, Resource r, uint64_t n) {
  if (!c.identified) return resource_errno(r);
  return quotas_.charge(c.quota_key, quota_name(c), r, n);
}

void Daemon::release(Client& c, Resource r, uint64_t n) {
  if (c.identified && n) quotas_.release(c.quota_key, r, n);
}

bool Daemon::admit_client(Client& c) {
  std::string why;
  if (int rc = identity_.identify(c.sock.get(), &c.ident, &why); rc == 0) {
    c.identified = true;
    Admission a = admit(c.ident, cfg_.device_policy(), platform_tenant(c.ident));
    c.tenant = std::move(a.tenant);
    c.device_refusal = a.refusal;
    c.refusal_why = std::move(a.why);
    c.quota_key = ContainerQuotas::key_of(c.ident);
    if (charge(c, Resource::kConnections) == 0) {
      c.connection_counted = true;
      return true;
    }
    c.refused = EMFILE;
  } else {
    c.identify_error = why;
  }
  // Refused: it learns why from the answer to its Hello. Only so many such connections are
  // kept waiting; beyond that they are closed at once.
  if (refused_pending_ >= cfg_.max_refused_pending) {
    LOG_DEBUG("closing a refused connection at once: %zu refused connections pending",
              refused_pending_);
    if (c.identified) identity_.release(c.ident.netns);
    c.identified = false;
    return false;
  }
  ++refused_pending_;
  return true;
}

void Daemon::release_client(Client& c) {
  if (!c.identified || c.refused) --refused_pending_;
  if (!c.identified) return;
  if (c.pacing) pacing_.release(c.pacing_ipv4, c.pacing_tenant);
  c.pacing = false;
  release(c, Resource::kQps, registry_.qpns_of(c.id).size());
  uint64_t keys = 0, bytes = 0;
  for (uint32_t k : registry_.keys_of(c.id)) {
    ++keys;
    if (const KeyRecord* rec = registry_.find_key(k)) bytes += rec->length;
  }
  release(c, Resource::kMrs, keys);
  release(c, Resource::kRegisteredBytes, bytes);
  release(c, Resource::kFds, c.fds.size());
  if (c.connection_counted) release(c, Resource::kConnections);
  c.connection_counted = false;
}

int Daemon::admit_device(Client& c) {
  if (c.device_refusal) {
    LOG_WARN("client %u (pid %d, container %s, address %s): no device: %s", c.id, c.ident.pid,
             c.ident.container.c_str(), ipv4_text(c.ident.ipv4).c_str(), c.refusal_why.c_str());
    return c.device_refusal;
  }
  if (int err = quotas_.charge_published(c.quota_key)) {
    LOG_WARN("client %u (container %s): no device: over its quota of directory entries", c.id,
             c.ident.container.c_str());
    return err;
  }
  return 0;
}

int Daemon::cm_charge(uint32_t client, CmCharge what) {
  auto it = clients_.find(client);
  if (it == clients_.end()) return 0;  // a client of another host: counted by its own daemon
  Client& c = *it->second;
  if (what == CmCharge::kConnection) return charge(c, Resource::kCmConnections);
  if (int err = charge(c, Resource::kCmListeners)) return err;
  // A listener is published in the directory.
  if (int err = charge(c, Resource::kDirectoryEntries)) {
    release(c, Resource::kCmListeners);
    return err;
  }
  return 0;
}

void Daemon::cm_release(uint32_t client, CmCharge what) {
  auto it = clients_.find(client);
  if (it == clients_.end()) return;
  Client& c = *it->second;
  if (what == CmCharge::kConnection) return release(c, Resource::kCmConnections);
  release(c, Resource::kCmListeners);
  release(c, Resource::kDirectoryEntries);
}

}  // namespace vrdma::daemon
