// UD multicast: attaching a QP to a group (vrdmad keeps the memberships, per tenant) and sending
// to one. A datagram to a multicast GID goes to every QP of the sender's tenant on this host
// attached to the group, the sender's own QP included when it is attached (multicast loopback,
// as devices do by default), each copy as a UD SEND to that QP would be: its Q_Key must match, a
// member without a posted receive drops it. The member list comes from vrdmad once and is
// asked for again only after vrdmad bumped the arena's mcast_gen (a membership of the tenant
// changed on this host), so a send to a known group costs no call. With a router on this host,
// the request also goes to it, which sends one copy to each other host with members of the
// sender's tenant (daemon/router/router_multicast.cc) and completes it.
#include <errno.h>
#include <string.h>

#include "common/address.h"
#include "engine/qp.h"

namespace vrdma {

namespace {

int mcast_call(Qp& qp, proto::Op op, const uint8_t* gid) {
  if (qp.type() != IBV_QPT_UD || !gid_is_multicast(gid)) return EINVAL;
  proto::McastReq req{qp.qpn(), 0, {}};
  memcpy(req.gid, gid, 16);
  return qp.context().device().control().call(op, req);
}

}  // namespace

int Qp::attach_mcast(const uint8_t* gid) {
  return mcast_call(*this, proto::Op::kMcastAttach, gid);
}

int Qp::detach_mcast(const uint8_t* gid) {
  return mcast_call(*this, proto::Op::kMcastDetach, gid);
}

const shm::PeerQp* Qp::local_ud_peer(uint32_t qpn) {
  // Keyed as ud_peer() keys a destination named without a GID (address 0).
  auto it = ud_peers_.find(qpn);
  if (it != ud_peers_.end()) {
    const shm::PeerQp& p = it->second;
    if (!(p.attrs && p.attrs->gone.load(std::memory_order_acquire))) return &p;
    ud_peers_.erase(it);
  }
  static constexpr uint8_t kNoGid[16] = {};
  shm::PeerQp p;
  if (connect_peer(qpn, kNoGid, p) || p.routed) return nullptr;
  return &ud_peers_.emplace(qpn, std::move(p)).first->second;
}

Qp::Result Qp::execute_mcast(const ibv_send_wr& wr) {
  Result res;
  shm::Seg local[shm::kMaxSendSge];
  int nl;
  uint64_t total;
  if ((res.status = gather(wr, local, nl, total)) != IBV_WC_SUCCESS) return res;
  res.byte_len = static_cast<uint32_t>(total);

  const Ah* ah = reinterpret_cast<const Ah*>(wr.wr.ud.ah);
  std::array<uint8_t, 16> gid;
  memcpy(gid.data(), ah->attr.grh.dgid.raw, 16);
  Device& dev = context().device();
  const uint32_t gen = dev.arena().header()->mcast_gen.load(std::memory_order_acquire);
  McastMembers& m = mcast_groups_[gid];
  if (!m.known || m.gen != gen) {
    proto::McastReq req{qpn_, 0, {}};
    memcpy(req.gid, gid.data(), 16);
    auto reply = std::make_unique<Packet>();
    m.qpns.clear();
    if (dev.control().call(proto::Op::kMcastMembers, req, reply.get()) == 0) {
      const auto* rep = reply->as<proto::McastMembersRep>();
      if (rep && rep->routed && reply->nfds == 1) {
        dev.set_router_doorbell(reply->fds[0]);
        reply->nfds = 0;
      }
      reply->close_fds();
      if (rep && rep->count <= proto::kMaxMcastMembers) {
        m.qpns.assign(rep->qpn, rep->qpn + rep->count);
        m.routed = rep->routed && dev.router_doorbell() >= 0;
        m.gen = gen;
        m.known = true;
      }
    }
  }
  // The router's queue must have room before anyone receives a copy: a request that waits for
  // room is executed again, and no member may receive it twice.
  if (m.routed &&
      sq_->tail.load(std::memory_order_relaxed) - sq_->done.load(std::memory_order_acquire) >=
          cap_.max_send_wr) {
    res.block = Block::kFull;
    return res;
  }
  const shm::Incoming in = incoming(wr, total);
  for (uint32_t qpn : m.qpns) {
    const shm::PeerQp* peer = local_ud_peer(qpn);
    if (!peer) continue;
    shm::Placement pl;
    shm::admit_request(*peer, in, pl);
    if (pl.admission != shm::Admission::kDone || pl.status != IBV_WC_SUCCESS) continue;
    shm::copy_segs(pl.segs, pl.nsegs, local, nl, total);
    shm::commit_request(*peer, pl, total);
  }
  // To the other hosts through the router, which completes the request; else a datagram is
  // sent, whoever received it.
  if (m.routed) return route(wr, shm::PeerQp{});
  return res;
}

}  // namespace vrdma
