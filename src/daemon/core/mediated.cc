// The mediated path between tenants: containers of tenants that an --allow rule pairs reach
// each other through the router (router_self.cc on one host), never through shared memory.
#include <errno.h>

#include "common/log.h"
#include "daemon/core/daemon.h"

namespace vrdma::daemon {

void Daemon::set_tenant_allow(std::vector<TenantAllow> rules) {
  allow_ = TenantPolicy(rules);
  cfg_.allow = std::move(rules);
}

RouterPool* Daemon::mediation_router() {
  if (router_) return router_.get();
  // A host without a cluster router: one for its own mediated connections. Made while the
  // control loop runs (a client's connect), so its thread starts at once.
  RouterConfig rc = cfg_.router_config();
  rc.listen.clear();
  rc.local_only = true;
  int err = make_router(rc);
  if (!err) err = router_->run();
  if (err) {
    LOG_ERROR("router for mediated connections: cannot start: %s", strerror(err));
    router_.reset();
    return nullptr;
  }
  return router_.get();
}

std::string Daemon::tenant_of_address(uint32_t ipv4) {
  if (cfg_.platform_tenants.empty()) return tenant_for(cfg_.tenants, ipv4);
  for (const auto& [id, c] : clients_)
    if (!c->doomed && c->identified && !c->ident.host && c->ident.ipv4 == ipv4) return c->tenant;
  return remote_tenant_of(ipv4);
}

bool Daemon::cm_may_initiate(const std::string& from, const std::string& to) {
  return allow_.may_initiate(from, to);
}

}  // namespace vrdma::daemon
