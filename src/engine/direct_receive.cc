// The receiving side of a direct connection (direct.h): the other process's QPs' requests to
// this process's QPs, checked and executed by a transport::Responder.
#include <string.h>

#include "common/clock.h"
#include "engine/device.h"
#include "engine/direct.h"
#include "engine/qp.h"

namespace vrdma {

int DirectLink::attach_receiver(Qp& qp, uint32_t src_ipv4, uint32_t src_qpn) {
  std::lock_guard lock(mu_);
  return attach_receiver_locked(qp, src_ipv4, src_qpn);
}

int DirectLink::attach_receiver_locked(Qp& qp, uint32_t src_ipv4, uint32_t src_qpn) {
  if (!live_) return ENOTCONN;
  if (!resp_.connect(link_, 0, src_ipv4, src_qpn, qp.qpn(), qp.type(), dev_.info().client_id))
    return ENOMEM;
  receivers_[qp.qpn()] = &qp;
  qp.joined_direct_in(shared_from_this());
  return 0;
}

void DirectLink::detach_receiver(Qp& qp) {
  std::lock_guard lock(mu_);
  if (!receivers_.erase(qp.qpn())) return;
  auto& conns = resp_.conns();
  for (auto it = conns.begin(); it != conns.end();) {
    if (it->second->dst_qpn != qp.qpn()) {
      ++it;
      continue;
    }
    resp_.release_held(*it->second, &link_);
    it = conns.erase(it);
  }
  if (live_) {
    wire::Close c{qp.qpn(), wire::kCloseReceiver};
    link_.send(wire::Type::kClose, &c, sizeof(c));
    if (!link_.flush(now_ns())) finish("send failed");
  }
}

void DirectLink::sender_closed(uint32_t src_qpn) {
  // A source QP went away on purpose: what it had with ours ends without failing ours.
  if (transport::InConn* c = resp_.find(link_.id(), src_qpn)) {
    resp_.release_held(*c, &link_);
    resp_.conns().erase(transport::conn_key(link_.id(), src_qpn));
  }
}

void DirectLink::receivers_ended() {
  // The other process died (its end closed without a word for these QPs): the QPs that agreed
  // to its QPs lost their peers, as on one host.
  for (const auto& [key, c] : resp_.conns())
    if (names_peer(c->dst_qpn, c->src_ipv4, c->src_qpn))
      dev_.queue_fatal(c->dst_qpn, proto::FatalReason::kPeerGone);
  resp_.forget_link(link_);
}

bool DirectLink::add(const wire::DirectAdd& a) {
  // This side's vrdmad kept the ticket for exactly this pair, from this connection's other
  // end's address, to a QP of this process: it says so by taking it.
  proto::DirectTakeReq req{};
  memcpy(req.ticket, a.ticket, sizeof(req.ticket));
  req.peer_ipv4 = peer_ipv4_;
  req.src_qpn = a.src_qpn;
  req.dst_qpn = a.dst_qpn;
  req.qp_type = a.qp_type;
  if (dev_.control().call(proto::Op::kDirectTake, req) != 0) return false;
  Qp* qp = dev_.pin_qp(a.dst_qpn);
  if (!qp) return false;
  const bool ok = attach_receiver_locked(*qp, peer_ipv4_, a.src_qpn) == 0;
  dev_.unpin_qp(qp);
  return ok;
}

bool DirectLink::names_peer(uint32_t qpn, uint32_t ipv4, uint32_t peer_qpn) {
  auto it = receivers_.find(qpn);
  return it != receivers_.end() && it->second->names_peer(ipv4, peer_qpn);
}

bool DirectLink::target(uint32_t qpn, shm::PeerQp& out) {
  auto it = receivers_.find(qpn);
  if (it == receivers_.end()) return false;
  return shm::attach_peer_qp(self_, it->second->object_fd_id(), 0, out) == 0 && out.qpn == qpn;
}

}  // namespace vrdma
