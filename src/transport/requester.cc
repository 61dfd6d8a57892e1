// The requester: a QP's work requests from its SendQueue to a link, and their completions
// (requester.h).
#include "transport/requester.h"

#include <string.h>
#include <unistd.h>

#include <algorithm>

#include "common/address.h"
#include "common/log.h"
#include "shm/settle.h"
#include "shm/work_request.h"

namespace vrdma::transport {

namespace {
using shm::carries_data;
using shm::is_atomic;
}  // namespace

bool RequesterEnv::send_special(SendQp&, const Wqe&, int64_t, bool* handled) {
  *handled = false;
  return true;
}

int Requester::attach(SendQp& q, uint32_t qp_offset) {
  uint8_t* base = q.peer->base();
  uint64_t size = q.peer->size();
  if (!shm::offset_ok(size, qp_offset, sizeof(shm::QpShared))) return EPROTO;
  q.qp = reinterpret_cast<shm::QpShared*>(base + qp_offset);
  uint32_t sq_off = q.qp->sq_offset, cq_off = q.qp->send_cq_offset;
  if (!shm::offset_ok(size, sq_off, sizeof(shm::SendQueue)) ||
      shm::attach_cq(q.peer, cq_off, q.cq, q.cq_efd) != 0)
    return EPROTO;
  q.sq = reinterpret_cast<shm::SendQueue*>(base + sq_off);
  uint32_t cap = q.sq->capacity, esz = q.sq->entry_size;
  uint32_t max_sge = q.sq->max_sge, max_inline = q.sq->max_inline;
  if (cap == 0 || (cap & (cap - 1)) || cap > (1u << 20) || max_sge > shm::kMaxSendSge ||
      max_inline > 4096 || esz != shm::route_wqe_size(max_sge, max_inline) ||
      !shm::offset_ok(size, sq_off, sizeof(shm::SendQueue) + uint64_t(cap) * esz))
    return EPROTO;
  q.sq_mask = cap - 1;
  q.esz = esz;
  q.max_sge = max_sge;
  q.max_inline = max_inline;
  // Continue where the QP is now: anything it posted before goes out in order, numbered from
  // 0 in this connection.
  q.sent = q.done = q.base = q.sq->done.load(std::memory_order_acquire);
  return 0;
}

bool Requester::read_wqe(const SendQp& q, uint64_t pos, Wqe& w) const {
  const auto* e =
      reinterpret_cast<const shm::RouteWqe*>(q.sq->entries + (pos & q.sq_mask) * uint64_t(q.esz));
  w.wr_id = e->wr_id;
  w.opcode = e->opcode;
  w.send_flags = e->send_flags;
  w.imm_data = e->imm_data;
  w.num_sge = e->num_sge;
  w.rkey = e->rkey;
  w.status = e->status <= uint32_t(IBV_WC_GENERAL_ERR) ? e->status : uint32_t(IBV_WC_LOC_QP_OP_ERR);
  w.remote_addr = e->remote_addr;
  w.compare_add = e->compare_add;
  w.swap = e->swap;
  w.ud_qpn = e->ud_qpn;
  w.ud_qkey = e->ud_qkey;
  memcpy(w.dgid, e->dgid, 16);
  w.inline_len = e->inline_len;
  w.xrc_srqn = q.type == IBV_QPT_XRC_SEND ? e->xrc_srqn : 0;
  w.inline_data = reinterpret_cast<const uint8_t*>(e->sge + q.max_sge);
  if (w.num_sge > q.max_sge || w.inline_len > q.max_inline) return false;
  memcpy(w.sge, e->sge, sizeof(ibv_sge) * w.num_sge);
  return shm::opcode_allowed(q.type, w.opcode) && !(shm::returns_data(w.opcode) && w.inline_len);
}

void Requester::complete(SendQp& q, const Wqe& w, ibv_wc_status st, uint32_t byte_len) {
  shm::count_send_completion(q.qp->counters, w.opcode, st, byte_len);
  // The slot is free before the completion is visible: an application that posts again as soon
  // as it sees the completion finds room.
  ++q.done;
  q.sq->done.store(q.done, std::memory_order_release);
  if (st != IBV_WC_SUCCESS || q.qp->sq_sig_all || (w.send_flags & IBV_SEND_SIGNALED)) {
    ibv_wc wc{};
    wc.wr_id = w.wr_id;
    wc.status = st;
    wc.opcode = shm::completion_opcode(w.opcode);
    wc.qp_num = q.qpn;
    if (w.opcode == IBV_WR_RDMA_READ || is_atomic(w.opcode)) wc.byte_len = byte_len;
    shm::cq_push(q.cq, wc);
    if (q.cq_efd >= 0 && shm::cq_should_notify(q.cq.cq, false)) {
      uint64_t one = 1;
      [[maybe_unused]] ssize_t n = ::write(q.cq_efd, &one, sizeof(one));
    }
  }
}

bool Requester::tail_of(SendQp& q, uint64_t* tail) {
  // The owner writes the tail: it may be anything. Between what was completed and a full
  // queue, or the QP fails.
  uint64_t t = q.sq->tail.load(std::memory_order_acquire);
  if (q.sane_tail(t) && t >= q.sent) {
    *tail = t;
    return true;
  }
  if (!q.failed) {
    LOG_WARN("QP 0x%x of client %u: send queue tail %llu is impossible (done %llu, %u entries): "
             "the QP fails",
             q.qpn, q.owner, static_cast<unsigned long long>(t),
             static_cast<unsigned long long>(q.done), q.sq_mask + 1);
    abort(q, IBV_WC_LOC_QP_OP_ERR, true);
  }
  return false;
}

void Requester::abort(SendQp& q, ibv_wc_status first, bool tell_owner, proto::FatalReason why) {
  if (q.failed) return;
  q.failed = true;
  q.qp->state.store(IBV_QPS_ERR, std::memory_order_release);
  // Everything posted completes in error: what was sent first with `first`, the rest flushed
  // (later passes of pump() flush what is posted afterwards). Never past a full queue.
  uint64_t t = q.sq->tail.load(std::memory_order_acquire);
  uint64_t tail = q.sane_tail(t) ? t : q.sent;
  bool had_outstanding = q.done < q.sent;
  while (q.done < tail) {
    Wqe w;
    read_wqe(q, q.done, w);
    ibv_wc_status st = had_outstanding ? first : IBV_WC_WR_FLUSH_ERR;
    had_outstanding = false;
    complete(q, w, st, 0);
  }
  q.sent = q.done;
  if (first != IBV_WC_WR_FLUSH_ERR)
    LOG_INFO("QP 0x%x to QP 0x%x failed: completion status %d", q.qpn, q.dst_qpn,
             static_cast<int>(first));
  if (tell_owner) env_.failed(q, why);
}

bool Requester::gather(SendQp& q, const Wqe& w, shm::Seg* data, int& nseg, uint64_t& total) {
  if (w.inline_len) {
    data[nseg++] = shm::Seg{const_cast<uint8_t*>(w.inline_data), w.inline_len};
    total = w.inline_len;
    return true;
  }
  uint32_t access = carries_data(w.opcode) ? 0 : IBV_ACCESS_LOCAL_WRITE;
  for (uint32_t i = 0; i < w.num_sge; ++i) {
    const ibv_sge& s = w.sge[i];
    uint8_t* p = s.length ? q.peer->translate(0, 0, s.lkey, s.addr, s.length, access) : nullptr;
    if (s.length && !p) {
      if (q.done != q.sent) return false;
      complete(q, w, IBV_WC_LOC_PROT_ERR, 0);
      ++q.sent;
      abort(q, IBV_WC_WR_FLUSH_ERR, true);
      return false;
    }
    data[nseg++] = shm::Seg{p, s.length};
    total += s.length;
  }
  return true;
}

// Sends one request. Returns false when it has to wait (no room on the link).
bool Requester::send_wqe(SendQp& q, const Wqe& w, int64_t now) {
  bool handled = false;
  const bool special_ok = env_.send_special(q, w, now, &handled);
  if (handled) return special_ok;
  const bool ud = q.type == IBV_QPT_UD;
  Link* link = env_.link_for(q, w);
  if (!link) {
    if (ud) {  // nobody there: the datagram is lost
      complete(q, w, IBV_WC_SUCCESS, 0);
      ++q.sent;
      return true;
    }
    abort(q, IBV_WC_RETRY_EXC_ERR, true);
    return false;
  }
  if (q.type == IBV_QPT_XRC_SEND && w.xrc_srqn == 0) {
    // No SRQ is number 0: as the destination would answer, once everything before it completed.
    if (q.done != q.sent) return false;
    complete(q, w, IBV_WC_REM_INV_REQ_ERR, 0);
    ++q.sent;
    abort(q, IBV_WC_WR_FLUSH_ERR, true);
    return false;
  }
  if (env_.link_full(*link)) return false;
  wire::Request r{};
  r.src_qpn = q.qpn;
  r.dst_qpn = ud ? w.ud_qpn : q.dst_qpn;
  r.seq = q.sent - q.base;
  r.opcode = w.opcode;
  // The destination's type: an XRC_SEND QP reaches an XRC_RECV QP, and names the SRQ.
  r.qp_type = q.type == IBV_QPT_XRC_SEND ? uint32_t(IBV_QPT_XRC_RECV) : q.type;
  r.xrc_srqn = w.xrc_srqn;
  r.imm_data = w.imm_data;
  r.rkey = w.rkey;
  r.remote_addr = w.remote_addr;
  r.compare_add = w.compare_add;
  r.swap = w.swap;
  r.qkey = w.ud_qkey;
  r.src_ipv4 = q.ipv4;
  if (ud) gid_to_ipv4(w.dgid, &r.dst_ipv4);
  r.solicited = (w.send_flags & IBV_SEND_SOLICITED) != 0;
  // (The owner writes the tail: only a hint rides on it.)
  if (q.sq->tail.load(std::memory_order_relaxed) - q.sent > 1) r.flags |= wire::kMoreQueued;
  r.rnr_retry = static_cast<uint8_t>(q.qp->rnr_retry.load(std::memory_order_relaxed) & 7);
  r.timeout = static_cast<uint8_t>(q.qp->timeout.load(std::memory_order_relaxed) & 31);
  r.retry_cnt = static_cast<uint8_t>(q.qp->retry_cnt.load(std::memory_order_relaxed) & 7);

  shm::Seg data[shm::kMaxSendSge];
  int nseg = 0;
  uint64_t total = 0;
  if (!gather(q, w, data, nseg, total)) return false;
  r.length = is_atomic(w.opcode) ? 8 : total;
  bool sent;
  if (carries_data(w.opcode)) {
    sent = link->send(wire::Type::kRequest, &r, sizeof(r), data, nseg, total, ud);
  } else {
    sent = link->send(wire::Type::kRequest, &r, sizeof(r));
  }
  if (!sent) return false;
  q.sent_bytes += total;
  if (ud) {
    complete(q, w, IBV_WC_SUCCESS, static_cast<uint32_t>(total));
    ++q.sent;
    return true;
  }
  if (q.done == q.sent) q.oldest_ns = now;
  ++q.sent;
  return true;
}

bool Requester::pump(SendQp& q, int64_t now, uint32_t max_wqes) {
  if (q.qp->gone.load(std::memory_order_relaxed)) return false;
  uint32_t st = q.qp->state.load(std::memory_order_acquire);
  q.last_state = st;
  if (st == IBV_QPS_RESET) {
    // A reset drops the queue; the QP may be connected again later. Numbering goes on where
    // it was, so that the connection's sequence has no gap.
    uint64_t t = q.sq->tail.load(std::memory_order_acquire);
    if (q.done != t && t >= q.sent) {
      q.base += t - q.sent;
      q.done = q.sent = t;
      q.sq->done.store(t, std::memory_order_release);
    }
    q.failed = false;
    return false;
  }
  bool work = false;
  if (st == IBV_QPS_ERR && !q.failed) {
    abort(q, IBV_WC_WR_FLUSH_ERR, false);
    work = true;
  }
  uint64_t tail;
  if (!tail_of(q, &tail)) return work;
  // At most max_wqes entries (the user's choice), whatever the owner wrote.
  const uint64_t end = std::min<uint64_t>(tail, q.sent + max_wqes);
  if (q.failed) {
    const uint64_t flush_end = std::min<uint64_t>(tail, q.done + flush_batch_);
    while (q.done < flush_end) {
      Wqe w;
      read_wqe(q, q.done, w);
      complete(q, w, IBV_WC_WR_FLUSH_ERR, 0);
      work = true;
    }
    q.sent = q.done;
    return work;
  }
  while (q.sent < end) {
    Wqe w;
    bool ok = read_wqe(q, q.sent, w);
    if (!ok || w.status != IBV_WC_SUCCESS) {
      // A request the owner found bad: it fails once everything before it completed.
      if (q.done != q.sent) break;
      complete(q, w, ok ? static_cast<ibv_wc_status>(w.status) : IBV_WC_LOC_QP_OP_ERR, 0);
      ++q.sent;
      abort(q, IBV_WC_WR_FLUSH_ERR, true);
      return true;
    }
    if (!send_wqe(q, w, now)) break;
    work = true;
    if (q.failed) break;
  }
  return work;
}

void Requester::on_response(Link& link, const wire::Response& r, uint32_t payload,
                            PayloadDest& dest, int64_t now) {
  SendQp* qp = env_.find(r.src_qpn);
  if (!qp) return;
  SendQp& q = *qp;
  if (q.failed || q.done == q.sent || q.link_id != link.id()) return;
  if (r.seq != q.done - q.base) {
    // A stream's responses come in order: an answer to a later request than the oldest one
    // says the oldest was lost on the way, which its QP learns as a fabric's requester would.
    // (Late answers to requests from before a reset are behind it, and ignored.)
    if (r.seq > q.done - q.base && r.seq < q.sent - q.base) abort(q, IBV_WC_RETRY_EXC_ERR, true);
    return;
  }
  Wqe w;
  if (!read_wqe(q, q.done, w)) return;
  auto st = static_cast<ibv_wc_status>(r.status);
  uint64_t byte_len = r.byte_len;
  if (st == IBV_WC_SUCCESS && shm::returns_data(w.opcode)) {
    // A READ that succeeded brings all it asked for, as its payload; an atomic, 8 bytes in the
    // body. Any other answer is a bad response (the QP fails): a completion never reports a
    // length the other end made up, nor success without the data.
    uint64_t want = 8, data = 0;
    if (w.opcode == IBV_WR_RDMA_READ) {
      want = 0;
      for (uint32_t i = 0; i < w.num_sge; ++i) want += w.sge[i].length;
      data = want;
    }
    if (r.byte_len != want || payload != data) {
      st = IBV_WC_BAD_RESP_ERR;
      byte_len = 0;
    }
  }
  if (st == IBV_WC_SUCCESS && w.opcode == IBV_WR_RDMA_READ && payload) {
    Rx& f = rx_[link.id()];
    f.active = true;
    f.qpn = q.qpn;
    f.seq = r.seq;
    f.byte_len = r.byte_len;
    f.status = IBV_WC_SUCCESS;
    uint64_t room = 0;
    f.pl.nsegs = 0;
    for (uint32_t i = 0; i < w.num_sge; ++i) {
      const ibv_sge& s = w.sge[i];
      uint8_t* p = s.length ? q.peer->translate(0, 0, s.lkey, s.addr, s.length,
                                                IBV_ACCESS_LOCAL_WRITE)
                            : nullptr;
      if (s.length && !p) {
        f.status = IBV_WC_LOC_PROT_ERR;
        return;  // discard the data
      }
      dest.segs[dest.nsegs++] = shm::Seg{p, s.length};
      // Kept to place it again if the pages move meanwhile (settle).
      f.pl.src[f.pl.nsegs] = shm::Placement::Source{s.lkey, IBV_ACCESS_LOCAL_WRITE, s.addr};
      f.pl.segs[f.pl.nsegs++] = shm::Seg{p, s.length};
      room += s.length;
    }
    if (room < payload) {
      f.status = IBV_WC_LOC_LEN_ERR;
      dest.nsegs = 0;
      return;
    }
    dest.kind = PayloadDest::Kind::kPlace;
    return;
  }
  if (st == IBV_WC_SUCCESS && is_atomic(w.opcode)) {
    const ibv_sge& s = w.sge[0];
    uint8_t* p = w.num_sge ? q.peer->translate(0, 0, s.lkey, s.addr, 8, IBV_ACCESS_LOCAL_WRITE)
                           : nullptr;
    if (!p) {
      st = IBV_WC_LOC_PROT_ERR;
    } else {
      memcpy(p, &r.atomic_old, 8);
    }
  }
  uint32_t len = static_cast<uint32_t>(byte_len);
  complete(q, w, st, len);
  if (st != IBV_WC_SUCCESS) {
    abort(q, IBV_WC_WR_FLUSH_ERR, true);
    return;
  }
  q.oldest_ns = now;
}

bool Requester::on_payload(Link& link, int64_t now) {
  auto it = rx_.find(link.id());
  if (it == rx_.end() || !it->second.active) return false;
  Rx& f = it->second;
  f.active = false;
  SendQp* qp = env_.find(f.qpn);
  if (!qp) return true;
  SendQp& q = *qp;
  if (q.failed || q.done - q.base != f.seq || q.done == q.sent) return true;
  Wqe w;
  if (!read_wqe(q, q.done, w)) return true;
  if (f.status == IBV_WC_SUCCESS) shm::settle(*q.peer, 0, 0, f.pl, f.byte_len);
  complete(q, w, f.status, static_cast<uint32_t>(f.byte_len));
  if (f.status != IBV_WC_SUCCESS) {
    abort(q, IBV_WC_WR_FLUSH_ERR, true);
  } else {
    q.oldest_ns = now;
  }
  return true;
}

bool Requester::placing() const {
  for (auto& [id, f] : rx_)
    if (f.active) return true;
  return false;
}

bool Requester::check_silence(SendQp& q, Link& l, int64_t now) {
  if (now - l.last_ping_ns > kPingIntervalNs && l.has_room()) {
    wire::Ping p{static_cast<uint64_t>(now)};
    l.send(wire::Type::kPing, &p, sizeof(p));
    l.last_ping_ns = now;
  }
  uint32_t t = q.qp->timeout.load(std::memory_order_relaxed) & 31;
  if (t == 0) return false;  // infinite
  int64_t bound = shm::ack_timeout_ns(t) * (int64_t(q.qp->retry_cnt.load() & 7) + 1);
  bound = std::max(bound, kMinSilenceNs);
  return now - q.oldest_ns > bound && l.silent(now, bound);
}

}  // namespace vrdma::transport
