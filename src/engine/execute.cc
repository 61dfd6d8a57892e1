// The one execution routine: carries out a send work request against the
// destination QP's shared rings and memory, as the responder would, and
// returns the completion status the requester gets.
#include <arpa/inet.h>
#include <string.h>
#include <unistd.h>

#include <atomic>

#include "engine/qp.h"

namespace vrdma {

namespace {

struct Seg {
  uint8_t* p;
  uint64_t len;
};

// Copies `total` bytes from one scatter list to another. The last byte is
// stored last, after a release fence, so a reader polling it sees all data.
void copy_segs(const Seg* dst, int /*nd*/, const Seg* src, int /*ns*/, uint64_t total) {
  if (total == 0) return;
  int di = 0, si = 0;
  uint64_t doff = 0, soff = 0, left = total;
  while (left) {
    while (dst[di].len == doff) ++di, doff = 0;
    while (src[si].len == soff) ++si, soff = 0;
    uint64_t n = dst[di].len - doff;
    if (src[si].len - soff < n) n = src[si].len - soff;
    if (left < n) n = left;
    if (n == left) {
      if (n > 1) memcpy(dst[di].p + doff, src[si].p + soff, n - 1);
      std::atomic_thread_fence(std::memory_order_release);
      reinterpret_cast<volatile uint8_t*>(dst[di].p + doff)[n - 1] = src[si].p[soff + n - 1];
      return;
    }
    memcpy(dst[di].p + doff, src[si].p + soff, n);
    doff += n;
    soff += n;
    left -= n;
  }
}

bool peer_qp_ready(const PeerQp& p) {
  // A QPN that changed means the slot was freed and reused: the QP is gone.
  if (p.peer->dead() || p.qp->gone.load(std::memory_order_relaxed) || p.qp->qpn != p.qpn)
    return false;
  uint32_t st = p.qp->state.load(std::memory_order_acquire);
  return st == IBV_QPS_RTR || st == IBV_QPS_RTS || st == IBV_QPS_SQD || st == IBV_QPS_SQE;
}

void notify(const PeerQp& p, bool solicited) {
  if (p.recv_cq_efd < 0) return;
  if (ring::cq_should_notify(p.recv_cq.cq, solicited)) {
    uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(p.recv_cq_efd, &one, sizeof(one));
  }
}

// Receive counters of the destination, kept by its senders. Plain
// load-and-store, not a locked add: exact with one sender (RC, UC); several
// senders racing on one UD QP or SRQ may lose an increment.
void count_rx(shm::QpShared& qp, uint64_t bytes) {
  auto& c = qp.counters;
  c.rx_ops.store(c.rx_ops.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  c.rx_bytes.store(c.rx_bytes.load(std::memory_order_relaxed) + bytes, std::memory_order_relaxed);
}

// The completion a receive gets for an incoming SEND or WRITE_WITH_IMM.
ibv_wc recv_wc(const ring::RecvWr& rwr, const PeerQp& p, uint32_t src_qpn, ibv_wc_opcode op,
               uint64_t len, const ibv_send_wr& wr) {
  ibv_wc wc{};
  wc.wr_id = rwr.wr_id;
  wc.opcode = op;
  wc.qp_num = p.qpn;
  wc.src_qp = src_qpn;
  wc.byte_len = static_cast<uint32_t>(len);
  if (wr.opcode == IBV_WR_SEND_WITH_IMM || wr.opcode == IBV_WR_RDMA_WRITE_WITH_IMM) {
    wc.wc_flags = IBV_WC_WITH_IMM;
    wc.imm_data = wr.imm_data;
  }
  return wc;
}

void deliver(const PeerQp& p, const ibv_wc& wc, bool solicited) {
  ring::cq_push(p.recv_cq, wc);
  notify(p, solicited);
  count_rx(*p.qp, wc.byte_len);
}

}  // namespace

const PeerQp* Qp::ud_peer(const ibv_send_wr& wr) {
  const Ah* ah = reinterpret_cast<const Ah*>(wr.wr.ud.ah);
  uint8_t gid[16] = {};
  uint32_t ip = 0;
  if (ah->attr.is_global) {
    memcpy(gid, ah->attr.grh.dgid.raw, 16);
    memcpy(&ip, gid + 12, 4);
  }
  uint64_t key = uint64_t(ip) << 32 | wr.wr.ud.remote_qpn;
  auto it = ud_peers_.find(key);
  if (it != ud_peers_.end()) return &it->second;
  PeerQp p;
  if (connect_peer(wr.wr.ud.remote_qpn, gid, p)) return nullptr;
  return &ud_peers_.emplace(key, std::move(p)).first->second;
}

const PeerQp* Qp::connected_peer() {
  if (peer_.valid()) return &peer_;
  if (!peer_wanted_) return nullptr;
  PeerQp p;
  if (connect_peer(attr_.dest_qp_num, dest_gid_, p)) return nullptr;
  peer_ = std::move(p);
  return &peer_;
}

Qp::Result Qp::execute(const ibv_send_wr& wr) {
  if (type_ == IBV_QPT_UD) return execute_ud(wr);
  Result res;
  const PeerQp* peer = connected_peer();
  if (!peer || !peer_qp_ready(*peer)) {
    // Nobody answers: UC drops silently; RC retries until its timeout.
    if (type_ == IBV_QPT_UC && peer) return res;
    res.block = Block::kTransport;
    return res;
  }

  // Gather the local side.
  Seg local[shm::kMaxSendSge];
  int nl = 0;
  uint64_t total = 0;
  bool inline_data = wr.send_flags & IBV_SEND_INLINE;
  bool to_local = wr.opcode == IBV_WR_RDMA_READ || wr.opcode == IBV_WR_ATOMIC_CMP_AND_SWP ||
                  wr.opcode == IBV_WR_ATOMIC_FETCH_AND_ADD;
  MemoryRegistry& mem = context().device().memory();
  for (int i = 0; i < wr.num_sge; ++i) {
    const ibv_sge& s = wr.sg_list[i];
    if (!inline_data) {
      const LocalMr* mr = mem.find(s.lkey);
      if (!mr || mr->pd != pd_->id() || s.addr < mr->iova || s.length > mr->length ||
          s.addr - mr->iova > mr->length - s.length ||
          (to_local && !(mr->access & IBV_ACCESS_LOCAL_WRITE))) {
        res.status = IBV_WC_LOC_PROT_ERR;
        return res;
      }
      local[nl++] = Seg{reinterpret_cast<uint8_t*>(mr->addr + (s.addr - mr->iova)), s.length};
    } else {
      local[nl++] = Seg{reinterpret_cast<uint8_t*>(s.addr), s.length};
    }
    total += s.length;
  }
  if (total > (1ull << 31)) {
    res.status = IBV_WC_LOC_LEN_ERR;
    return res;
  }
  Peer& pm = *peer->peer;
  // Remote memory for RDMA and atomics: both the destination QP and the MR must
  // grant the access.
  auto remote = [&](uint32_t access, uint32_t rkey, uint64_t addr, uint64_t len) -> uint8_t* {
    if (!(peer->qp->access.load(std::memory_order_relaxed) & access)) return nullptr;
    return pm.translate(rkey, addr, len, access);
  };
  bool imm = wr.opcode == IBV_WR_SEND_WITH_IMM || wr.opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
  bool solicited = wr.send_flags & IBV_SEND_SOLICITED;

  switch (wr.opcode) {
    case IBV_WR_SEND:
    case IBV_WR_SEND_WITH_IMM: {
      ring::RecvWr rwr;
      if (!peer->rq.rq || !ring::rq_pop(peer->rq, rwr)) {
        if (type_ == IBV_QPT_UC) return res;  // dropped
        res.block = Block::kRnr;
        return res;
      }
      ibv_wc wc = recv_wc(rwr, *peer, qpn_, IBV_WC_RECV, total, wr);
      Seg remote[shm::kMaxRecvSge];
      uint64_t room = 0;
      int nr = 0;
      for (uint32_t i = 0; i < rwr.num_sge; ++i) {
        const ibv_sge& s = rwr.sge[i];
        uint8_t* p =
            s.length ? pm.translate(s.lkey, s.addr, s.length, IBV_ACCESS_LOCAL_WRITE) : nullptr;
        if (s.length && !p) {
          wc.status = IBV_WC_LOC_PROT_ERR;
          deliver(*peer, wc, true);
          res.status = IBV_WC_REM_OP_ERR;
          return res;
        }
        remote[nr++] = Seg{p, s.length};
        room += s.length;
      }
      if (total > room) {
        wc.status = IBV_WC_LOC_LEN_ERR;
        deliver(*peer, wc, true);
        res.status = IBV_WC_REM_INV_REQ_ERR;
        return res;
      }
      copy_segs(remote, nr, local, nl, total);
      deliver(*peer, wc, solicited);
      res.byte_len = static_cast<uint32_t>(total);
      return res;
    }
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM: {
      ring::RecvWr rwr;
      if (imm && (!peer->rq.rq || !ring::rq_pop(peer->rq, rwr))) {
        if (type_ == IBV_QPT_UC) return res;
        res.block = Block::kRnr;
        return res;
      }
      if (total) {
        uint8_t* dst =
            remote(IBV_ACCESS_REMOTE_WRITE, wr.wr.rdma.rkey, wr.wr.rdma.remote_addr, total);
        if (!dst) {
          res.status = IBV_WC_REM_ACCESS_ERR;
          return res;
        }
        Seg d{dst, total};
        copy_segs(&d, 1, local, nl, total);
      }
      if (imm) {
        deliver(*peer, recv_wc(rwr, *peer, qpn_, IBV_WC_RECV_RDMA_WITH_IMM, total, wr), solicited);
      } else {
        count_rx(*peer->qp, total);
      }
      res.byte_len = static_cast<uint32_t>(total);
      return res;
    }
    case IBV_WR_RDMA_READ: {
      if (total) {
        uint8_t* src =
            remote(IBV_ACCESS_REMOTE_READ, wr.wr.rdma.rkey, wr.wr.rdma.remote_addr, total);
        if (!src) {
          res.status = IBV_WC_REM_ACCESS_ERR;
          return res;
        }
        Seg s{src, total};
        copy_segs(local, nl, &s, 1, total);
      }
      res.byte_len = static_cast<uint32_t>(total);
      return res;
    }
    case IBV_WR_ATOMIC_CMP_AND_SWP:
    case IBV_WR_ATOMIC_FETCH_AND_ADD: {
      if (total < 8 || nl < 1 || local[0].len < 8) {
        res.status = IBV_WC_LOC_LEN_ERR;
        return res;
      }
      uint64_t raddr = wr.wr.atomic.remote_addr;
      if (raddr & 7) {
        res.status = IBV_WC_REM_INV_REQ_ERR;
        return res;
      }
      uint8_t* p = remote(IBV_ACCESS_REMOTE_ATOMIC, wr.wr.atomic.rkey, raddr, 8);
      if (!p) {
        res.status = IBV_WC_REM_ACCESS_ERR;
        return res;
      }
      auto* target = reinterpret_cast<uint64_t*>(p);
      uint64_t old;
      if (wr.opcode == IBV_WR_ATOMIC_CMP_AND_SWP) {
        old = wr.wr.atomic.compare_add;
        __atomic_compare_exchange_n(target, &old, wr.wr.atomic.swap, false, __ATOMIC_SEQ_CST,
                                    __ATOMIC_SEQ_CST);
      } else {
        old = __atomic_fetch_add(target, wr.wr.atomic.compare_add, __ATOMIC_SEQ_CST);
      }
      memcpy(local[0].p, &old, 8);
      res.byte_len = 8;
      return res;
    }
    default:
      res.status = IBV_WC_LOC_QP_OP_ERR;
      return res;
  }
}

// UD: the destination comes with each request; messages that find no receive,
// a wrong Q_Key or a closed QP are dropped, as on a fabric.
Qp::Result Qp::execute_ud(const ibv_send_wr& wr) {
  Result res;
  const PeerQp* peer = ud_peer(wr);
  Seg local[shm::kMaxSendSge];
  int nl = 0;
  uint64_t total = 0;
  bool inline_data = wr.send_flags & IBV_SEND_INLINE;
  MemoryRegistry& mem = context().device().memory();
  for (int i = 0; i < wr.num_sge; ++i) {
    const ibv_sge& s = wr.sg_list[i];
    uint8_t* p = reinterpret_cast<uint8_t*>(s.addr);
    if (!inline_data) {
      const LocalMr* mr = mem.find(s.lkey);
      if (!mr || mr->pd != pd_->id() || s.addr < mr->iova || s.length > mr->length ||
          s.addr - mr->iova > mr->length - s.length) {
        res.status = IBV_WC_LOC_PROT_ERR;
        return res;
      }
      p = reinterpret_cast<uint8_t*>(mr->addr + (s.addr - mr->iova));
    }
    local[nl++] = Seg{p, s.length};
    total += s.length;
  }
  if (total > 4096) {
    res.status = IBV_WC_LOC_LEN_ERR;
    return res;
  }
  res.byte_len = static_cast<uint32_t>(total);
  if (!peer || !peer_qp_ready(*peer) || peer->type != IBV_QPT_UD || !peer->rq.rq) return res;
  uint32_t qkey = (wr.wr.ud.remote_qkey & 0x80000000u) ? attr_.qkey : wr.wr.ud.remote_qkey;
  if (qkey != peer->qp->qkey.load(std::memory_order_relaxed)) return res;
  ring::RecvWr rwr;
  if (!ring::rq_pop(peer->rq, rwr)) return res;
  ibv_wc wc = recv_wc(rwr, *peer, qpn_, IBV_WC_RECV, total + 40, wr);
  wc.wc_flags |= IBV_WC_GRH;
  // The first 40 bytes of the receive buffers take the GRH (RoCEv2 over IPv4:
  // 20 reserved bytes, then an IPv4 header with our and the peer's address).
  uint8_t grh[40] = {};
  const proto::HelloRep& me = context().device().info();
  uint8_t* ip = grh + 20;
  ip[0] = 0x45;
  uint16_t iplen = htons(static_cast<uint16_t>(total + 28));
  memcpy(ip + 2, &iplen, 2);
  ip[8] = 64;
  ip[9] = 17;
  memcpy(ip + 12, &me.ipv4, 4);
  const Ah* ah = reinterpret_cast<const Ah*>(wr.wr.ud.ah);
  if (ah->attr.is_global) memcpy(ip + 16, ah->attr.grh.dgid.raw + 12, 4);
  Seg remote[shm::kMaxRecvSge];
  uint64_t room = 0;
  int nr = 0;
  Peer& pm = *peer->peer;
  for (uint32_t i = 0; i < rwr.num_sge; ++i) {
    const ibv_sge& s = rwr.sge[i];
    uint8_t* p =
        s.length ? pm.translate(s.lkey, s.addr, s.length, IBV_ACCESS_LOCAL_WRITE) : nullptr;
    if (s.length && !p) {
      wc.status = IBV_WC_LOC_PROT_ERR;
      deliver(*peer, wc, true);
      return res;
    }
    remote[nr++] = Seg{p, s.length};
    room += s.length;
  }
  if (total + 40 > room) {
    wc.status = IBV_WC_LOC_LEN_ERR;
    deliver(*peer, wc, true);
    return res;
  }
  Seg src[shm::kMaxSendSge + 1];
  src[0] = Seg{grh, 40};
  for (int i = 0; i < nl; ++i) src[i + 1] = local[i];
  copy_segs(remote, nr, src, nl + 1, total + 40);
  deliver(*peer, wc, wr.send_flags & IBV_SEND_SOLICITED);
  return res;
}

}  // namespace vrdma
