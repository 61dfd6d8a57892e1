// Reloading the configuration: on SIGHUP (through request_reload) and on a Reload request of the
// host's administrator. What a reload does is the handler's (main.cc: reload.h's Reloader).
#include <errno.h>
#include <unistd.h>

#include <algorithm>

#include "common/log.h"
#include "daemon/core/daemon.h"

namespace vrdma::daemon {

void Daemon::set_reload_handler(std::function<ReloadOutcome()> handler) {
  reload_handler_ = std::move(handler);
}

void Daemon::request_reload() {
  uint64_t one = 1;
  ssize_t rc = ::write(reload_.get(), &one, sizeof(one));  // async-signal-safe
  (void)rc;
}

void Daemon::set_tenant_rules(std::vector<TenantRule> rules) {
  cfg_.tenants = std::move(rules);
}

ReloadOutcome Daemon::reload() {
  if (!reload_handler_) {
    LOG_WARN("reload: this daemon has no configuration to reload");
    return {EOPNOTSUPP, "this vrdmad has no configuration to reload\n"};
  }
  return reload_handler_();
}

void Daemon::handle(Client& c, const Decoded& d, const proto::ReloadReq&) {
  if (!sees_everything(c)) {
    LOG_WARN("client %u: Reload refused: not the host's administrator", c.id);
    reply_error(c, d, EPERM);
    return;
  }
  ReloadOutcome r = reload();
  send(c, proto::Op::kReload, d.seq, r.error, r.text.data(),
       std::min(r.text.size(), proto::kMaxStatusText));
}

}  // namespace vrdma::daemon
