// QoS rules at run time: `vrdma qos set|show` (the Qos request, the host's administrator only)
// and reloads of the configuration file.
#include <string.h>

#include <algorithm>

#include "common/log.h"
#include "daemon/core/daemon.h"

namespace vrdma::daemon {

namespace {

std::string rules_text(const qos::RuleSet& set) {
  std::string out;
  for (const auto& r : set.rules()) out += qos::rule_text(r) + "\n";
  return out;
}

}  // namespace

void Daemon::set_qos_rules(const qos::RuleSet& rules) {
  qos::RuleSet before = cfg_.qos;
  cfg_.qos = rules;
  pacing_.apply(cfg_.qos);
  if (!router_) return;
  for (auto r : before.rules()) {
    bool kept = false;
    for (const auto& n : rules.rules())
      kept |= n.kind == r.kind && n.ipv4 == r.ipv4 && n.tenant == r.tenant;
    if (kept) continue;
    r.rule = qos::Rule{};
    router_->set_qos(r);
  }
  for (const auto& r : rules.rules()) router_->set_qos(r);
}

void Daemon::handle(Client& c, const Decoded& d, const proto::QosReq& req) {
  if (!sees_everything(c)) {
    LOG_WARN("client %u: Qos refused: not the host's administrator", c.id);
    reply_error(c, d, EPERM);
    return;
  }
  std::string text(req.rule, strnlen(req.rule, sizeof(req.rule)));
  int status = 0;
  if (!text.empty()) {
    std::string error;
    auto rule = qos::parse_rule(text, &error);
    if (!rule) {
      status = EINVAL;
      text = error + "\n";
    } else {
      cfg_.qos.put(*rule);
      pacing_.apply(cfg_.qos);
      if (router_) router_->set_qos(*rule);
      LOG_INFO("qos: %s", qos::rule_text(*rule).c_str());
      text.clear();
    }
  }
  if (!status) {
    text = rules_text(cfg_.qos);
  }
  send(c, proto::Op::kQos, d.seq, status, text.data(),
       std::min(text.size(), proto::kMaxStatusText));
}

void Daemon::handle(Client& c, const Decoded& d, const proto::PacingReq&) {
  if (c.pacing) {  // once per client
    reply_error(c, d, EEXIST);
    return;
  }
  int fds[2];
  if (int e = pacing_.acquire(c.ident.ipv4, c.tenant, fds)) {
    LOG_WARN("client %u: no pacing pages: %s", c.id, strerror(e));
    reply_error(c, d, e);
    return;
  }
  c.pacing = true;
  c.pacing_ipv4 = c.ident.ipv4;
  c.pacing_tenant = c.tenant;
  send(c, proto::Op::kPacing, d.seq, 0, nullptr, 0, fds);
}

}  // namespace vrdma::daemon
