// The requester's half of an operation on the same host: gathers the local side, lets the
// destination's responder logic (respond.cc) place it, and moves the data with one memcpy.
// Work for another host goes to the router instead (route.cc).
#include <string.h>

#include "common/address.h"
#include "common/clock.h"
#include "engine/qp.h"
#include "shm/respond.h"
#include "shm/settle.h"

namespace vrdma {

namespace {
// The object a peer QP was reached through is no longer its QP's.
bool gone(const shm::PeerQp& p) {
  return p.attrs && p.attrs->gone.load(std::memory_order_acquire);
}

// The destination's owner moved pages while the payload was placed (a registration next to the
// target split or replaced its backing): the bytes may be in the old file. They are copied again
// from the source, which the request still holds, to where the pages are now.
void place_again(const shm::PeerQp& peer, const shm::Placement& pl, const shm::Seg* local,
                 int nl, uint64_t total) {
  const int64_t deadline = now_ns() + shm::kMoveWaitNs;
  shm::Seg now[shm::kMaxRecvSge];
  for (int round = 0; round < 8; ++round) {
    int64_t m = shm::translate_again(*peer.peer, peer.via_qpn, peer.pd, pl, now, deadline);
    if (m < 0) return;  // gone, or stuck mid-move: as a hardware write racing a deregistration
    shm::copy_segs(now, pl.nsegs, local, nl, total);
    if (!shm::moved_since(*peer.peer, static_cast<uint32_t>(m))) return;
  }
}
}  // namespace

const shm::PeerQp* Qp::ud_peer(const ibv_send_wr& wr) {
  const Ah* ah = reinterpret_cast<const Ah*>(wr.wr.ud.ah);
  uint8_t gid[16] = {};
  uint32_t ip = 0;
  if (ah->attr.is_global) {
    memcpy(gid, ah->attr.grh.dgid.raw, 16);
    gid_to_ipv4(gid, &ip);
  }
  uint64_t key = uint64_t(ip) << 32 | wr.wr.ud.remote_qpn;
  auto it = ud_peers_.find(key);
  if (it != ud_peers_.end()) {
    if (!gone(it->second)) return &it->second;
    ud_peers_.erase(it);  // the destination was reset (a new object) or destroyed: ask again
  }
  shm::PeerQp p;
  if (connect_peer(wr.wr.ud.remote_qpn, gid, p)) return nullptr;
  return &ud_peers_.emplace(key, std::move(p)).first->second;
}

const shm::PeerQp* Qp::connected_peer() {
  if (peer_.routed || (peer_.valid() && !gone(peer_))) return &peer_;
  // A destination that was reset has a new object (or, destroyed, none): ask again.
  if (peer_.valid()) peer_ = shm::PeerQp{};
  if (!peer_wanted_) return nullptr;
  shm::PeerQp p;
  DirectJoin direct;
  if (connect_peer(attr_.dest_qp_num, dest_gid_, p, &direct)) return nullptr;
  if (direct.direct && join_direct(direct, attr_.dest_qp_num) != 0) return nullptr;
  peer_ = std::move(p);
  routed_ = peer_.routed;
  return &peer_;
}

// The local side of a request: its gather list checked against this process's MRs.
// Returns 0 or the completion status.
ibv_wc_status Qp::gather(const ibv_send_wr& wr, shm::Seg* local, int& nl, uint64_t& total) const {
  nl = 0;
  total = 0;
  const bool inline_data = wr.send_flags & IBV_SEND_INLINE;
  const bool to_local = wr.opcode == IBV_WR_RDMA_READ || wr.opcode == IBV_WR_ATOMIC_CMP_AND_SWP ||
                        wr.opcode == IBV_WR_ATOMIC_FETCH_AND_ADD;
  const MemoryRegistry& mem = pd_->context().device().memory();
  for (int i = 0; i < wr.num_sge; ++i) {
    const ibv_sge& s = wr.sg_list[i];
    if (!inline_data) {
      const LocalMr* mr = mem.find(s.lkey);
      if (!mr || mr->pd != pd_->id() || s.addr < mr->iova || s.length > mr->length ||
          s.addr - mr->iova > mr->length - s.length ||
          (to_local && !(mr->access & IBV_ACCESS_LOCAL_WRITE)))
        return IBV_WC_LOC_PROT_ERR;
      local[nl++] = shm::Seg{reinterpret_cast<uint8_t*>(mr->addr + (s.addr - mr->iova)), s.length};
    } else {
      local[nl++] = shm::Seg{reinterpret_cast<uint8_t*>(s.addr), s.length};
    }
    total += s.length;
  }
  if (type_ == IBV_QPT_UD ? total > 4096 : total > (1ull << 31)) return IBV_WC_LOC_LEN_ERR;
  if ((wr.opcode == IBV_WR_ATOMIC_CMP_AND_SWP || wr.opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) &&
      (total < 8 || nl < 1 || local[0].len < 8))
    return IBV_WC_LOC_LEN_ERR;
  return IBV_WC_SUCCESS;
}

shm::Incoming Qp::incoming(const ibv_send_wr& wr, uint64_t total) const {
  shm::Incoming in;
  in.opcode = wr.opcode;
  in.qp_type = type_;
  in.src_qpn = qpn_;
  in.imm_data = wr.imm_data;
  in.solicited = wr.send_flags & IBV_SEND_SOLICITED;
  in.length = total;
  if (type_ == IBV_QPT_UD) {
    in.qkey = (wr.wr.ud.remote_qkey & 0x80000000u) ? attr_.qkey : wr.wr.ud.remote_qkey;
    in.src_ipv4 = pd_->context().device().info().ipv4;
    const Ah* ah = reinterpret_cast<const Ah*>(wr.wr.ud.ah);
    if (ah->attr.is_global) gid_to_ipv4(ah->attr.grh.dgid.raw, &in.dst_ipv4);
  } else if (wr.opcode == IBV_WR_ATOMIC_CMP_AND_SWP || wr.opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
    in.rkey = wr.wr.atomic.rkey;
    in.remote_addr = wr.wr.atomic.remote_addr;
    in.compare_add = wr.wr.atomic.compare_add;
    in.swap = wr.wr.atomic.swap;
  } else {
    in.rkey = wr.wr.rdma.rkey;
    in.remote_addr = wr.wr.rdma.remote_addr;
  }
  return in;
}

Qp::Result Qp::execute(const ibv_send_wr& wr) {
  Result res;
  if (type_ == IBV_QPT_UD) {
    const Ah* ah = reinterpret_cast<const Ah*>(wr.wr.ud.ah);
    if (ah->attr.is_global && gid_is_multicast(ah->attr.grh.dgid.raw)) return execute_mcast(wr);
  }
  if (shm::is_local_memory_op(type_, wr.opcode)) {
    res.status = memory_op(wr);
    return res;
  }
  const shm::PeerQp* peer;
  if (type_ == IBV_QPT_XRC_SEND) {
    peer = xrc_peer(wr, res.status);
    if (res.status != IBV_WC_SUCCESS) return res;
  } else {
    peer = type_ == IBV_QPT_UD ? ud_peer(wr) : connected_peer();
  }
  if (peer && peer->routed) return route(wr, *peer);
  shm::Seg local[shm::kMaxSendSge];
  int nl;
  uint64_t total;
  if ((res.status = gather(wr, local, nl, total)) != IBV_WC_SUCCESS) return res;
  res.byte_len = static_cast<uint32_t>(total);
  if (!peer) {
    // Nobody answers: UD and UC drop silently; RC retries until its timeout.
    if (type_ == IBV_QPT_RC || type_ == IBV_QPT_XRC_SEND) res.block = Block::kTransport;
    return res;
  }
  if (int64_t until = context().device().pace(total)) {
    res.block = Block::kPaced;
    res.not_before = until;
    return res;
  }
  shm::Placement pl;
  const uint32_t moves_before = peer->peer->moves();
  shm::admit_request(*peer, incoming(wr, total), pl);
  switch (pl.admission) {
    case shm::Admission::kRnr:
      context().device().unpace(total);
      res.block = Block::kRnr;
      return res;
    case shm::Admission::kNotReady:
      context().device().unpace(total);
      res.block = Block::kTransport;
      return res;
    case shm::Admission::kDrop:
      return res;
    case shm::Admission::kDone:
      break;
  }
  if (pl.status != IBV_WC_SUCCESS) {
    res.status = pl.status;
    return res;
  }
  switch (wr.opcode) {
    case IBV_WR_RDMA_READ:
      shm::copy_segs(local, nl, pl.segs, pl.nsegs, total);
      break;
    case IBV_WR_ATOMIC_CMP_AND_SWP:
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
      memcpy(local[0].p, &pl.atomic_old, 8);
      res.byte_len = 8;
      break;
    default:
      shm::copy_segs(pl.segs, pl.nsegs, local, nl, total);
      // (A datagram's placement starts with its GRH, which the sources do not describe: UD,
      // unreliable anyway, is not placed again.)
      if (type_ != IBV_QPT_UD && shm::moved_since(*peer->peer, moves_before))
        place_again(*peer, pl, local, nl, total);
      break;
  }
  // The receive completion could not be delivered (the destination's ring is full or corrupt):
  // the request fails, as when a responder fails after taking a receive.
  if (!shm::commit_request(*peer, pl, total)) res.status = IBV_WC_REM_OP_ERR;
  return res;
}

}  // namespace vrdma
