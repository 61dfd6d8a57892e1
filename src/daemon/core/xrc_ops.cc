// XRC: domains (OpenXrcd, CloseXrcd), the domain of an XRC_RECV QP or XRC SRQ (SetQpXrcd), the
// opening of an XRC_RECV QP by another holder of its domain (OpenXrcQp), and
// what an XRC_SEND QP reaches: the XRC_RECV QP its RTR named (with that QP's consent, as RC),
// and through it the XRC SRQs of that QP's domain, by number.
#include <errno.h>

#include "common/log.h"
#include "daemon/core/daemon.h"

namespace vrdma::daemon {

namespace {
constexpr uint32_t kXrcSend = static_cast<uint32_t>(proto::QpType::kXrcSend);
constexpr uint32_t kXrcRecv = static_cast<uint32_t>(proto::QpType::kXrcRecv);
constexpr uint32_t kXrcSrq = static_cast<uint32_t>(proto::QpType::kXrcSrq);
}  // namespace

bool connectable_types(uint32_t local, uint32_t dest) {
  if (local == kXrcSend) return dest == kXrcRecv;
  if (local == kXrcRecv) return dest == kXrcSend;
  return local == dest && local != kXrcSrq;
}

void Daemon::handle(Client& c, const Decoded& d, const proto::OpenXrcdReq& r) {
  proto::OpenXrcdRep rep{};
  int err = xrcds_.open(c.id, c.tenant, std::move(received_fds_[0]), r.oflags, rep.xrcd);
  if (err) return void(reply_error(c, d, err));
  LOG_DEBUG("client %u: XRC domain %u opened", c.id, rep.xrcd);
  send(c, proto::Op::kOpenXrcd, d.seq, 0, &rep, sizeof(rep));
}

void Daemon::handle(Client& c, const Decoded& d, const proto::CloseXrcdReq& r) {
  send(c, proto::Op::kCloseXrcd, d.seq, xrcds_.close(c.id, r.xrcd), nullptr, 0);
}

void Daemon::handle(Client& c, const Decoded& d, const proto::SetQpXrcdReq& r) {
  const QpRecord* q = registry_.find_qp(r.qpn);
  if (!q || q->owner != c.id) return void(reply_error(c, d, EPERM));
  if (q->type != kXrcRecv && q->type != kXrcSrq) return void(reply_error(c, d, EINVAL));
  if (!xrcds_.holds(c.id, r.xrcd)) return void(reply_error(c, d, EACCES));
  registry_.set_xrcd(r.qpn, r.xrcd);
  send(c, proto::Op::kSetQpXrcd, d.seq, 0, nullptr, 0);
}

// ibv_open_qp, as the kernel answers it: the caller must hold the domain it names (EACCES, as
// SetQpXrcd), and the QP must be an XRC_RECV QP of that domain whose creator is of the caller's
// tenant; any other number is EINVAL, as one the domain does not have.
void Daemon::handle(Client& c, const Decoded& d, const proto::OpenXrcQpReq& r) {
  if (!xrcds_.holds(c.id, r.xrcd)) return void(reply_error(c, d, EACCES));
  const QpRecord* q = registry_.find_qp(r.qpn);
  Client* owner = q ? find_live(q->owner) : nullptr;
  if (!q || q->type != kXrcRecv || q->xrcd != r.xrcd || !owner || owner->tenant != c.tenant) {
    LOG_DEBUG("client %u: open of XRC_RECV QP 0x%x in domain %u refused", c.id, r.qpn, r.xrcd);
    return void(reply_error(c, d, EINVAL));
  }
  open_shared_xrc_qp(c, d, r.qpn, *q);  // xrc_shared_ops.cc
}

// The XRC_RECV QP that XRC_SEND QP `via` (of `req`) is connected to, when its RTR names `via`
// back; nullptr otherwise.
const QpRecord* Daemon::xrc_target_of(const Client& req, const QpRecord& via,
                                      uint32_t via_qpn) const {
  if (via.type != kXrcSend || !via.has_peer) return nullptr;
  const QpRecord* t = registry_.find_qp(via.peer_qpn);
  if (!t || t->type != kXrcRecv || t->xrcd == 0) return nullptr;
  // At the address the RTR named (another container of this host, or the sender's own); a QP
  // on another host is its router's business.
  auto owner = clients_.find(t->owner);
  if (owner == clients_.end() || owner->second->ident.ipv4 != via.peer_ipv4) return nullptr;
  if (!registry_.names_peer(via.peer_qpn, req.ident.ipv4, via_qpn)) return nullptr;
  return t;
}

// ConnectQp from an XRC_SEND QP to XRC SRQ `dest`: only through the XRC_RECV QP it is connected
// to, of the SRQ's domain, in the same tenant. Anything else is as unknown as a missing SRQ.
void Daemon::connect_xrc_srq(Client& c, const Decoded& d, const proto::ConnectQpReq& r,
                             const QpRecord& local, const QpRecord& dest) {
  Client* owner = find_live(dest.owner);
  const QpRecord* target = xrc_target_of(c, local, r.local_qpn);
  Client* target_owner = target ? find_live(target->owner) : nullptr;
  if (!owner || !target || !target_owner || target_owner->tenant != c.tenant ||
      owner->tenant != c.tenant || owner->ident.ipv4 != target_owner->ident.ipv4 ||
      dest.xrcd != target->xrcd) {
    LOG_DEBUG("client %u: QP 0x%x -> XRC SRQ 0x%x refused", c.id, r.local_qpn, r.dest_qpn);
    return void(reply_error(c, d, ENOENT));
  }
  proto::ConnectQpRep rep{};
  rep.peer_client = owner->id;
  rep.peer_object_fd_id = dest.object_fd_id;
  rep.peer_qp_type = dest.type;
  send(c, proto::Op::kConnectQp, d.seq, 0, &rep, sizeof(rep));
}

// What XRC_SEND QP `via` reaches of `owner` besides its XRC_RECV QP: the XRC SRQs of that QP's
// domain.
void Daemon::reachable_xrc(const Client& req, const QpRecord& via, uint32_t via_qpn,
                           const Client& owner, std::vector<const QpRecord*>& out) const {
  const QpRecord* target = xrc_target_of(req, via, via_qpn);
  if (!target || owner.ident.ipv4 != via.peer_ipv4) return;
  for (uint32_t qpn : registry_.qpns_of(owner.id)) {
    const QpRecord* s = registry_.find_qp(qpn);
    if (s && s->type == kXrcSrq && s->xrcd == target->xrcd) out.push_back(s);
  }
}

}  // namespace vrdma::daemon
