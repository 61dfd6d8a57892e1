// XRC_RECV QPs shared between processes (ibv_open_qp by a process that did not make the QP).
// The QP's state is its object (the page XRC_SEND senders read): vrdmad hands that object's
// descriptor to each process that opens the QP, counts their handles, and when the owner lets the
// QP go (its last handle destroyed, or the process gone) while another process still holds it,
// makes that process the owner: the record, the links and the object follow, so that senders
// reach the same QP as before.
#include <errno.h>

#include <span>

#include "common/log.h"
#include "daemon/core/daemon.h"

namespace vrdma::daemon {

namespace {
// Ids vrdmad gives the objects it hands over; a library numbers its own descriptors from 1
// upwards and never reaches these.
constexpr uint32_t kHandedFdIds = 0x80000000u;
}  // namespace

// After OpenXrcQp's checks: the maker's own process opens through its local QP (no descriptor);
// any other process (or the owner that got the QP handed over) gets the QP object, and its handle
// is counted.
void Daemon::open_shared_xrc_qp(Client& c, const Decoded& d, uint32_t qpn, const QpRecord& q) {
  auto existing = shared_xrc_.find(qpn);
  const bool maker = q.owner == c.id && (existing == shared_xrc_.end() || !existing->second.handed);
  if (maker) {
    proto::OpenXrcQpRep rep{0, 0};
    return void(send(c, proto::Op::kOpenXrcQp, d.seq, 0, &rep, sizeof(rep)));
  }
  Client* owner = find_live(q.owner);
  auto f = owner ? owner->fds.find(q.object_fd_id) : decltype(c.fds.end()){};
  if (!owner || f == owner->fds.end()) return void(reply_error(c, d, EINVAL));
  SharedXrcQp& s = shared_xrc_[qpn];
  if (q.owner == c.id)
    ++s.owner_handles;
  else
    ++s.holders[c.id];
  proto::OpenXrcQpRep rep{1, 0};
  const int fd = f->second.fd.get();
  LOG_DEBUG("client %u: XRC_RECV QP 0x%x of client %u opened", c.id, qpn, q.owner);
  send(c, proto::Op::kOpenXrcQp, d.seq, 0, &rep, sizeof(rep), std::span<const int>(&fd, 1));
}

bool Daemon::holds_xrc_qp(uint32_t client, uint32_t qpn) const {
  auto s = shared_xrc_.find(qpn);
  return s != shared_xrc_.end() && s->second.holders.count(client) != 0;
}

// The QP becomes the first live holder's: its object moves into that client's descriptors
// (under an id of vrdmad's), says who owns it, and the record follows. false: nobody left.
bool Daemon::hand_over_xrc_qp(Client& from, uint32_t qpn, SharedXrcQp& s) {
  const QpRecord* q = registry_.find_qp(qpn);
  auto f = q ? from.fds.find(q->object_fd_id) : from.fds.end();
  while (q && f != from.fds.end() && !s.holders.empty()) {
    auto h = s.holders.begin();
    Client* to = find_live(h->first);
    if (!to) {
      s.holders.erase(h);
      continue;
    }
    uint32_t id;
    do id = kHandedFdIds | (next_handed_fd_id_++ & ~kHandedFdIds);
    while (to->fds.count(id));
    ClientFd& moved = to->fds.emplace(id, std::move(f->second)).first->second;
    from.fds.erase(f);
    moved.object.set_owner(to->id);
    const uint32_t pd = q->pd;
    registry_.hand_over(qpn, to->id);
    registry_.set_objects(qpn, id, 0, 0, pd);
    // What the QP and its object count for moves with them (a holder at its quota keeps the QP
    // all the same: it lives while a handle does, as the kernel's).
    release(from, Resource::kQps);
    release(from, Resource::kFds);
    if (charge(*to, Resource::kQps) || charge(*to, Resource::kFds))
      LOG_WARN("client %u: XRC_RECV QP 0x%x taken over beyond its quota", to->id, qpn);
    s.owner_handles = h->second;
    s.handed = true;
    s.holders.erase(h);
    LOG_DEBUG("XRC_RECV QP 0x%x: client %u let it go, client %u holds it", qpn, from.id, to->id);
    return true;
  }
  return false;
}

void Daemon::handle(Client& c, const Decoded& d, const proto::CloseXrcQpReq& r) {
  const QpRecord* q = registry_.find_qp(r.qpn);
  auto it = shared_xrc_.find(r.qpn);
  if (!q || q->type != static_cast<uint32_t>(proto::QpType::kXrcRecv))
    return void(reply_error(c, d, EINVAL));
  proto::CloseXrcQpRep rep{0, q->object_fd_id};
  if (q->owner != c.id) {
    if (it == shared_xrc_.end()) return void(reply_error(c, d, EINVAL));
    auto h = it->second.holders.find(c.id);
    if (h == it->second.holders.end()) return void(reply_error(c, d, EINVAL));
    if (--h->second == 0) it->second.holders.erase(h);
    rep = proto::CloseXrcQpRep{1, 0};
  } else if (it != shared_xrc_.end()) {
    if (it->second.owner_handles > 0) --it->second.owner_handles;
    if (it->second.owner_handles > 0 || hand_over_xrc_qp(c, r.qpn, it->second))
      rep = proto::CloseXrcQpRep{1, 0};
    else
      shared_xrc_.erase(it);
  }
  send(c, proto::Op::kCloseXrcQp, d.seq, 0, &rep, sizeof(rep));
}

// A client that goes: its handles of others' QPs are dropped, and the shared QPs it owns go to
// another holder (before anything marks its objects gone or tells its peers).
void Daemon::xrc_client_gone(Client& c) {
  for (auto it = shared_xrc_.begin(); it != shared_xrc_.end();) {
    it->second.holders.erase(c.id);
    const QpRecord* q = registry_.find_qp(it->first);
    if (!q) {
      it = shared_xrc_.erase(it);
      continue;
    }
    if (q->owner == c.id && !hand_over_xrc_qp(c, it->first, it->second)) {
      it = shared_xrc_.erase(it);
      continue;
    }
    ++it;
  }
}

}  // namespace vrdma::daemon
