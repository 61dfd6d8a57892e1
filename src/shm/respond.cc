#include "shm/respond.h"

#include <arpa/inet.h>
#include <string.h>
#include <unistd.h>

#include <atomic>

#include "common/clock.h"
#include "shm/rings.h"
#include "shm/settle.h"
#include "shm/work_request.h"

namespace vrdma::shm {

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
  // A QPN that changed means the object was reused: the QP is gone.
  const QpAttrs& a = *p.attrs;
  if (p.peer->dead() || a.gone.load(std::memory_order_relaxed) || a.qpn != p.qpn) return false;
  uint32_t st = a.state.load(std::memory_order_acquire);
  return st == IBV_QPS_RTR || st == IBV_QPS_RTS || st == IBV_QPS_SQD || st == IBV_QPS_SQE;
}

namespace {

void notify(const PeerQp& p, bool solicited) {
  if (p.notify_efd < 0) return;
  if (should_notify(p.ring.ring->armed, solicited)) {
    uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(p.notify_efd, &one, sizeof(one));
  }
}

// Receive counters of the destination, kept by its senders. Plain load-and-store, not a
// locked add: exact with one sender (RC, UC); several senders racing on one UD QP or SRQ may
// lose an increment.
void count_rx(const PeerQp& p, uint64_t bytes, uint32_t op_class) {
  QpObject& o = *p.obj;
  bump(o.rx_ops);
  bump(o.rx_bytes, bytes);
  bump(o.rx_requests[op_class]);
}

bool deliver(const PeerQp& p, const RecvReport& r, bool solicited) {
  if (ring_push(p.ring, r) != RingResult::kOk) return false;
  notify(p, solicited);
  count_rx(p, r.byte_len, r.opcode == kRecvWriteImm ? kOpWrite : kOpSend);
  return true;
}

// The completion a receive gets: its index, never a wr_id.
void recv_report(Placement& out, const PeerQp& dst, const RecvWr& rwr, const Incoming& in,
                 uint8_t op, uint64_t len) {
  RecvReport& r = out.report;
  r = RecvReport{};
  r.index = rwr.index;
  r.opcode = op;
  r.src_qp = in.src_qpn;
  r.dst_qp = dst.qpn;
  r.byte_len = static_cast<uint32_t>(len);
  if (has_immediate(in.opcode)) {
    r.flags = kRecvImm;
    r.imm_data = in.imm_data;
  } else if (in.opcode == IBV_WR_SEND_WITH_INV) {
    r.flags = kRecvInv;
    r.imm_data = in.imm_data;  // the rkey to invalidate
  }
  out.recv_completion = true;
  out.solicited = in.solicited;
}

// A translation that fails while the owner moves pages (a registration next to the MR splits or
// replaces its backing) may be that instant's, not the MR's: it is tried again once the move is
// over (and after each of a few moves in a row), within one bounded wait.
uint8_t* translate_settled(const PeerQp& p, uint32_t key, uint64_t addr, uint64_t len,
                           uint32_t access) {
  constexpr int kRounds = 8;  // moves one after another: each round waits for one to end
  uint32_t before = p.peer->moves();
  int64_t deadline = 0;
  for (int round = 0;; ++round) {
    if (uint8_t* q = p.peer->translate(p.via_qpn, p.pd, key, addr, len, access)) return q;
    if (round == kRounds || !moved_since(*p.peer, before)) return nullptr;  // the MR refuses it
    if (!deadline) deadline = now_ns() + kMoveWaitNs;
    const int64_t m = wait_for_moves(*p.peer, deadline);
    if (m < 0) return nullptr;
    before = static_cast<uint32_t>(m);
  }
}

// Translates a receive's scatter list. On failure the receive completes with an error at once
// and `out.status` tells the requester.
bool scatter(Placement& out, const PeerQp& p, const RecvWr& rwr, uint64_t need,
             ibv_wc_status len_status) {
  uint64_t room = 0;
  out.nsegs = 0;
  for (uint32_t i = 0; i < rwr.num_sge; ++i) {
    const ibv_sge& s = rwr.sge[i];
    uint8_t* ptr =
        s.length ? translate_settled(p, s.lkey, s.addr, s.length, IBV_ACCESS_LOCAL_WRITE) : nullptr;
    if (s.length && !ptr) {
      out.report.status = kRecvProtErr;
      deliver(p, out.report, true);
      out.recv_completion = false;
      out.status = IBV_WC_REM_OP_ERR;
      return false;
    }
    out.src[out.nsegs] = Placement::Source{s.lkey, IBV_ACCESS_LOCAL_WRITE, s.addr};
    out.segs[out.nsegs++] = Seg{ptr, s.length};
    room += s.length;
  }
  if (need > room) {
    out.report.status = kRecvLenErr;
    deliver(p, out.report, true);
    out.recv_completion = false;
    out.status = len_status;
    return false;
  }
  return true;
}

// UD: the first 40 bytes of the receive take the GRH (RoCEv2 over IPv4: 20 reserved bytes,
// then an IPv4 header with the sender's and the receiver's addresses). Writes it and drops it
// from the front of the scatter list.
void put_grh(Placement& out, const Incoming& in) {
  uint8_t grh[40] = {};
  uint8_t* ip = grh + 20;
  ip[0] = 0x45;
  uint16_t iplen = htons(static_cast<uint16_t>(in.length + 28));
  memcpy(ip + 2, &iplen, 2);
  ip[8] = 64;
  ip[9] = 17;
  memcpy(ip + 12, &in.src_ipv4, 4);
  memcpy(ip + 16, &in.dst_ipv4, 4);
  // The header checksum, as the received header carried it.
  uint32_t sum = 0;
  for (int i = 0; i < 20; i += 2) sum += static_cast<uint32_t>(ip[i]) << 8 | ip[i + 1];
  while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
  uint16_t csum = htons(static_cast<uint16_t>(~sum));
  memcpy(ip + 10, &csum, 2);
  Seg src{grh, 40};
  // Plain copy: the payload that follows ends the message.
  uint64_t left = 40;
  int i = 0;
  while (left) {
    uint64_t n = out.segs[i].len < left ? out.segs[i].len : left;
    memcpy(out.segs[i].p, src.p + (40 - left), n);
    out.segs[i].p += n;
    out.segs[i].len -= n;
    left -= n;
    if (out.segs[i].len == 0) ++i;
  }
  if (i) {
    for (int j = i; j < out.nsegs; ++j) out.segs[j - i] = out.segs[j];
    out.nsegs -= i;
  }
}

void admit_ud(const PeerQp& dst, const Incoming& in, Placement& out) {
  if (!peer_qp_ready(dst) || dst.type != IBV_QPT_UD || !dst.rq.rq ||
      in.qkey != dst.attrs->qkey.load(std::memory_order_relaxed)) {
    out.admission = Admission::kDrop;
    return;
  }
  RecvWr rwr;
  if (rq_take(dst.rq, rwr) != RingResult::kOk) {
    out.admission = Admission::kDrop;
    return;
  }
  recv_report(out, dst, rwr, in, kRecvSend, in.length + 40);
  out.report.flags |= kRecvGrh;
  if (!scatter(out, dst, rwr, in.length + 40, IBV_WC_SUCCESS)) {
    out.admission = Admission::kDrop;  // the receiver saw its error; the sender never hears
    out.status = IBV_WC_SUCCESS;
    return;
  }
  put_grh(out, in);
}

// Remote memory for RDMA and atomics: both the destination QP and the MR must grant it.
uint8_t* remote_memory(const PeerQp& dst, const Incoming& in, uint32_t access, uint64_t len) {
  if (!(dst.attrs->access.load(std::memory_order_relaxed) & access)) return nullptr;
  return translate_settled(dst, in.rkey, in.remote_addr, len, access);
}

// Takes the receive a SEND or WRITE_WITH_IMM consumes; none posted is RNR (RC) or a drop (UC).
// A receive queue whose indices a peer corrupted fails the request (the QP goes to error).
bool take_receive(const PeerQp& dst, const Incoming& in, RecvWr& rwr, Placement& out) {
  RingResult r = dst.rq.rq ? rq_take(dst.rq, rwr) : RingResult::kEmpty;
  if (r == RingResult::kOk) return true;
  if (r == RingResult::kCorrupt) {
    out.status = IBV_WC_REM_OP_ERR;
    if (in.qp_type == IBV_QPT_UC) out.admission = Admission::kDrop;
    return false;
  }
  out.admission = in.qp_type == IBV_QPT_UC ? Admission::kDrop : Admission::kRnr;
  return false;
}

void admit_send(const PeerQp& dst, const Incoming& in, Placement& out) {
  RecvWr rwr;
  if (!take_receive(dst, in, rwr, out)) return;
  recv_report(out, dst, rwr, in, kRecvSend, in.length);
  scatter(out, dst, rwr, in.length, IBV_WC_REM_INV_REQ_ERR);
}

void admit_write(const PeerQp& dst, const Incoming& in, Placement& out) {
  // The memory first: a request the MR refuses consumes no receive.
  if (in.length) {
    uint8_t* p = remote_memory(dst, in, IBV_ACCESS_REMOTE_WRITE, in.length);
    if (!p) {
      out.status = IBV_WC_REM_ACCESS_ERR;
      return;
    }
    out.segs[0] = Seg{p, in.length};
    out.src[0] = Placement::Source{in.rkey, IBV_ACCESS_REMOTE_WRITE, in.remote_addr};
    out.nsegs = 1;
  }
  if (in.opcode == IBV_WR_RDMA_WRITE_WITH_IMM) {
    RecvWr rwr;
    if (!take_receive(dst, in, rwr, out)) return;
    recv_report(out, dst, rwr, in, kRecvWriteImm, in.length);
  } else {
    out.count_rx = true;
  }
}

void admit_read(const PeerQp& dst, const Incoming& in, Placement& out) {
  if (!in.length) return;
  uint8_t* p = remote_memory(dst, in, IBV_ACCESS_REMOTE_READ, in.length);
  if (!p) {
    out.status = IBV_WC_REM_ACCESS_ERR;
    return;
  }
  out.segs[0] = Seg{p, in.length};
  out.nsegs = 1;
  bump(dst.obj->rx_requests[kOpRead]);
}

void admit_atomic(const PeerQp& dst, const Incoming& in, Placement& out) {
  if (in.remote_addr & 7) {
    out.status = IBV_WC_REM_INV_REQ_ERR;
    return;
  }
  uint8_t* p = remote_memory(dst, in, IBV_ACCESS_REMOTE_ATOMIC, 8);
  if (!p) {
    out.status = IBV_WC_REM_ACCESS_ERR;
    return;
  }
  auto* target = reinterpret_cast<uint64_t*>(p);
  uint64_t old;
  if (in.opcode == IBV_WR_ATOMIC_CMP_AND_SWP) {
    old = in.compare_add;
    __atomic_compare_exchange_n(target, &old, in.swap, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  } else {
    old = __atomic_fetch_add(target, in.compare_add, __ATOMIC_SEQ_CST);
  }
  out.atomic_old = old;
  bump(dst.obj->rx_requests[kOpAtomic]);
}

}  // namespace

void admit_request(const PeerQp& dst, const Incoming& in, Placement& out) {
  out = Placement{};
  if (in.qp_type == IBV_QPT_UD) return admit_ud(dst, in, out);
  if (!peer_qp_ready(dst)) {
    out.admission = in.qp_type == IBV_QPT_UC ? Admission::kDrop : Admission::kNotReady;
    return;
  }
  switch (in.opcode) {
    case IBV_WR_SEND:
    case IBV_WR_SEND_WITH_IMM:
    case IBV_WR_SEND_WITH_INV:
      return admit_send(dst, in, out);
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
      return admit_write(dst, in, out);
    case IBV_WR_RDMA_READ:
      return admit_read(dst, in, out);
    case IBV_WR_ATOMIC_CMP_AND_SWP:
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
      return admit_atomic(dst, in, out);
    default:
      out.status = IBV_WC_REM_INV_REQ_ERR;
      return;
  }
}

bool commit_request(const PeerQp& dst, const Placement& p, uint64_t length) {
  if (p.recv_completion) return deliver(dst, p.report, p.solicited);
  if (p.count_rx) count_rx(dst, length, kOpWrite);
  return true;
}

}  // namespace vrdma::shm
