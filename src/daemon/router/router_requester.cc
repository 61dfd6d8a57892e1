// The requester side of the router: local QPs whose destination is on another host (or of
// another tenant) hand their work to the router through their SendQueue; transport::Requester
// carries it (transport/requester.h). Here: attaching a QP, the links its requests take, and
// the silence of those links.
#include <string.h>

#include <vector>

#include "common/address.h"
#include "common/log.h"
#include "daemon/router/router_state.h"

namespace vrdma::daemon {

int Router::attach_outbound(const PendingConnect& pc, std::unique_ptr<Outbound>* out) {
  auto o = std::make_unique<Outbound>();
  o->qpn = pc.qpn;
  o->owner = pc.qp.owner;
  o->type = pc.qp.type;
  o->ipv4 = pc.qp.ipv4;
  o->tenant = pc.qp.tenant;
  o->dst_qpn = pc.dst_qpn;
  o->cls = pc.cls;
  o->lane = pc.lane;
  o->peer = peer(pc.qp.owner);
  if (!o->peer) return EIO;
  if (int err = transport::Requester::attach(*o, pc.qp.arena_offset)) return err;
  *out = std::move(o);
  return 0;
}

Link* Router::ud_link(Outbound& o, const uint8_t* dgid) {
  uint32_t ip = 0;
  gid_to_ipv4(dgid, &ip);
  auto it = o.ud_links.find(ip);
  if (it != o.ud_links.end())
    if (Link* l = find_link(it->second)) return l;
  HostEntry h;
  if (dir_.host_of(ip, &h) != Lookup::kFound || h.host_id == cfg_.host_id) return nullptr;
  int err;
  Link* l = outbound_link(h.host_id, o.lane, &err);
  if (l) o.ud_links[ip] = l->id();
  return l;
}

bool Router::link_full(const Link& link) const {
  return !link.has_room(1) || link.unwritten_bytes() >= lim_.link_window_bytes;
}

bool Router::waits_for_room(const Outbound& o) {
  if (o.type == IBV_QPT_UD) return false;  // a datagram's link is its destination's
  const Link* link = find_link(o.link_id);
  return link && link->tx_blocked && link_full(*link);
}

void Router::check_timeouts(int64_t now) {
  std::vector<uint32_t> silent;
  // QPs with outstanding requests are on the work list.
  for (Outbound* op = work_head_; op; op = op->work_next) {
    Outbound& o = *op;
    if (o.failed || o.done == o.sent || o.type == IBV_QPT_UD) continue;
    Link* l = find_link(o.link_id);
    if (!l || !l->open()) continue;
    if (transport::Requester::check_silence(o, *l, now)) {
      LOG_WARN("router: QP 0x%x: no answer from host %u for %lld ms (timeout %u, retry_cnt %u)",
               o.qpn, l->host_id, static_cast<long long>((now - l->last_rx_ns) / 1000000),
               o.qp->timeout.load() & 31, o.qp->retry_cnt.load() & 7);
      silent.push_back(l->id());
    }
  }
  for (uint32_t id : silent)
    if (Link* l = find_link(id)) close_link(*l, "peer silent");
}

}  // namespace vrdma::daemon
