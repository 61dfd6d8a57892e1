// The requester side of the router: work requests of local QPs whose destination is on
// another host, from their SendQueue to a link, and their completions.
#include <string.h>
#include <unistd.h>

#include <algorithm>
#include <climits>

#include "common/address.h"
#include "common/log.h"
#include "daemon/router/router_state.h"

namespace vrdma::daemon {

namespace {

constexpr int64_t kPingIntervalNs = 50'000'000;
constexpr int64_t kMinSilenceNs = 150'000'000;  // never declare a link dead sooner

using shm::carries_data;
using shm::is_atomic;

}  // namespace

int Router::attach_outbound(const PendingConnect& pc, std::unique_ptr<Outbound>* out) {
  auto o = std::make_unique<Outbound>();
  o->qpn = pc.qpn;
  o->info = pc.qp;
  o->dst_qpn = pc.dst_qpn;
  o->cls = pc.cls;
  o->lane = pc.lane;
  auto p = peer(pc.qp.owner);
  if (!p) return EIO;
  o->peer = p;
  uint8_t* base = p->base();
  uint64_t size = p->size();
  if (!shm::offset_ok(size, pc.qp.arena_offset, sizeof(shm::QpShared))) return EPROTO;
  o->qp = reinterpret_cast<shm::QpShared*>(base + pc.qp.arena_offset);
  uint32_t sq_off = o->qp->sq_offset, cq_off = o->qp->send_cq_offset;
  if (!shm::offset_ok(size, sq_off, sizeof(shm::SendQueue)) ||
      shm::attach_cq(p, cq_off, o->cq, o->cq_efd) != 0)
    return EPROTO;
  o->sq = reinterpret_cast<shm::SendQueue*>(base + sq_off);
  uint32_t cap = o->sq->capacity, esz = o->sq->entry_size;
  uint32_t max_sge = o->sq->max_sge, max_inline = o->sq->max_inline;
  if (cap == 0 || (cap & (cap - 1)) || cap > (1u << 20) || max_sge > shm::kMaxSendSge ||
      max_inline > 4096 || esz != shm::route_wqe_size(max_sge, max_inline) ||
      !shm::offset_ok(size, sq_off, sizeof(shm::SendQueue) + uint64_t(cap) * esz))
    return EPROTO;
  o->sq_mask = cap - 1;
  o->esz = esz;
  o->max_sge = max_sge;
  o->max_inline = max_inline;
  // Continue where the QP is now: anything it posted before goes out in order, numbered from
  // 0 in this connection.
  o->sent = o->done = o->base = o->sq->done.load(std::memory_order_acquire);
  *out = std::move(o);
  return 0;
}

bool Router::read_wqe(const Outbound& o, uint64_t pos, Wqe& w) const {
  const auto* e =
      reinterpret_cast<const shm::RouteWqe*>(o.sq->entries + (pos & o.sq_mask) * uint64_t(o.esz));
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
  w.xrc_srqn = o.info.type == IBV_QPT_XRC_SEND ? e->xrc_srqn : 0;
  w.inline_data = reinterpret_cast<const uint8_t*>(e->sge + o.max_sge);
  if (w.num_sge > o.max_sge || w.inline_len > o.max_inline) return false;
  memcpy(w.sge, e->sge, sizeof(ibv_sge) * w.num_sge);
  return shm::opcode_allowed(o.info.type, w.opcode) &&
         !(shm::returns_data(w.opcode) && w.inline_len);
}

void Router::complete(Outbound& o, const Wqe& w, ibv_wc_status st, uint32_t byte_len) {
  shm::count_send_completion(o.qp->counters, w.opcode, st, byte_len);
  // The slot is free before the completion is visible: an application that posts again as soon
  // as it sees the completion finds room.
  ++o.done;
  o.sq->done.store(o.done, std::memory_order_release);
  if (st != IBV_WC_SUCCESS || o.qp->sq_sig_all || (w.send_flags & IBV_SEND_SIGNALED)) {
    ibv_wc wc{};
    wc.wr_id = w.wr_id;
    wc.status = st;
    wc.opcode = shm::completion_opcode(w.opcode);
    wc.qp_num = o.qpn;
    if (w.opcode == IBV_WR_RDMA_READ || is_atomic(w.opcode)) wc.byte_len = byte_len;
    shm::cq_push(o.cq, wc);
    if (o.cq_efd >= 0 && shm::cq_should_notify(o.cq.cq, false)) {
      uint64_t one = 1;
      [[maybe_unused]] ssize_t n = ::write(o.cq_efd, &one, sizeof(one));
    }
  }
}

bool Router::tail_of(Outbound& o, uint64_t* tail) {
  // The owner writes the tail: it may be anything. Between what was completed and a full
  // queue, or the QP fails.
  uint64_t t = o.sq->tail.load(std::memory_order_acquire);
  if (o.sane_tail(t) && t >= o.sent) {
    *tail = t;
    return true;
  }
  if (!o.failed) {
    LOG_WARN("router: QP 0x%x of client %u: send queue tail %llu is impossible (done %llu, %u "
             "entries): the QP fails",
             o.qpn, o.info.owner, static_cast<unsigned long long>(t),
             static_cast<unsigned long long>(o.done), o.sq_mask + 1);
    abort_qp(o, IBV_WC_LOC_QP_OP_ERR, true);
  }
  return false;
}

void Router::abort_qp(Outbound& o, ibv_wc_status first, bool tell_owner, proto::FatalReason why) {
  if (o.failed) return;
  o.failed = true;
  o.qp->state.store(IBV_QPS_ERR, std::memory_order_release);
  // Everything posted completes in error: what was sent first with `first`, the rest flushed
  // (later passes of pump() flush what is posted afterwards). Never past a full queue.
  uint64_t t = o.sq->tail.load(std::memory_order_acquire);
  uint64_t tail = o.sane_tail(t) ? t : o.sent;
  bool had_outstanding = o.done < o.sent;
  while (o.done < tail) {
    Wqe w;
    read_wqe(o, o.done, w);
    ibv_wc_status st = had_outstanding ? first : IBV_WC_WR_FLUSH_ERR;
    had_outstanding = false;
    complete(o, w, st, 0);
  }
  o.sent = o.done;
  if (first != IBV_WC_WR_FLUSH_ERR)
    LOG_INFO("router: QP 0x%x to QP 0x%x failed: completion status %d", o.qpn, o.dst_qpn,
             static_cast<int>(first));
  if (tell_owner) hooks_.qp_fatal(o.info.owner, o.qpn, why);
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

// Sends one request. Returns false when it has to wait (no room on the link).
// The request's payload where it lies: its inline data, or its SGEs in the client's memory
// (written into by READ and atomic responses). False when it cannot go: an SGE deregistered
// since it was posted is a local protection error, in order (the QP fails).
bool Router::gather(Outbound& o, const Wqe& w, shm::Seg* data, int& nseg, uint64_t& total) {
  if (w.inline_len) {
    data[nseg++] = shm::Seg{const_cast<uint8_t*>(w.inline_data), w.inline_len};
    total = w.inline_len;
    return true;
  }
  uint32_t access = carries_data(w.opcode) ? 0 : IBV_ACCESS_LOCAL_WRITE;
  for (uint32_t i = 0; i < w.num_sge; ++i) {
    const ibv_sge& s = w.sge[i];
    uint8_t* p = s.length ? o.peer->translate(0, 0, s.lkey, s.addr, s.length, access) : nullptr;
    if (s.length && !p) {
      if (o.done != o.sent) return false;
      complete(o, w, IBV_WC_LOC_PROT_ERR, 0);
      ++o.sent;
      abort_qp(o, IBV_WC_WR_FLUSH_ERR, true);
      return false;
    }
    data[nseg++] = shm::Seg{p, s.length};
    total += s.length;
  }
  return true;
}

bool Router::link_full(const Link& link) const {
  return !link.has_room(1) || link.unwritten_bytes() >= lim_.link_window_bytes;
}

bool Router::waits_for_room(const Outbound& o) {
  if (o.info.type == IBV_QPT_UD) return false;  // a datagram's link is its destination's
  const Link* link = find_link(o.link_id);
  return link && link->tx_blocked && link_full(*link);
}

bool Router::send_wqe(Outbound& o, const Wqe& w, int64_t now) {
  const bool ud = o.info.type == IBV_QPT_UD;
  if (ud && gid_is_multicast(w.dgid)) return send_multicast(o, w, now);
  Link* link = ud ? ud_link(o, w.dgid) : find_link(o.link_id);
  if (!link) {
    if (ud) {  // nobody there: the datagram is lost
      complete(o, w, IBV_WC_SUCCESS, 0);
      ++o.sent;
      return true;
    }
    abort_qp(o, IBV_WC_RETRY_EXC_ERR, true);
    return false;
  }
  if (o.info.type == IBV_QPT_XRC_SEND && w.xrc_srqn == 0) {
    // No SRQ is number 0: as the destination would answer, once everything before it completed.
    if (o.done != o.sent) return false;
    complete(o, w, IBV_WC_REM_INV_REQ_ERR, 0);
    ++o.sent;
    abort_qp(o, IBV_WC_WR_FLUSH_ERR, true);
    return false;
  }
  if (link_full(*link)) return false;
  wire::Request r{};
  r.src_qpn = o.qpn;
  r.dst_qpn = ud ? w.ud_qpn : o.dst_qpn;
  r.seq = o.sent - o.base;
  r.opcode = w.opcode;
  // The destination's type: an XRC_SEND QP reaches an XRC_RECV QP, and names the SRQ.
  r.qp_type = o.info.type == IBV_QPT_XRC_SEND ? uint32_t(IBV_QPT_XRC_RECV) : o.info.type;
  r.xrc_srqn = w.xrc_srqn;
  r.imm_data = w.imm_data;
  r.rkey = w.rkey;
  r.remote_addr = w.remote_addr;
  r.compare_add = w.compare_add;
  r.swap = w.swap;
  r.qkey = w.ud_qkey;
  r.src_ipv4 = o.info.ipv4;
  if (ud) gid_to_ipv4(w.dgid, &r.dst_ipv4);
  r.solicited = (w.send_flags & IBV_SEND_SOLICITED) != 0;
  // (The owner writes the tail: only a hint rides on it.)
  if (o.sq->tail.load(std::memory_order_relaxed) - o.sent > 1) r.flags |= wire::kMoreQueued;
  r.rnr_retry = static_cast<uint8_t>(o.qp->rnr_retry.load(std::memory_order_relaxed) & 7);
  r.timeout = static_cast<uint8_t>(o.qp->timeout.load(std::memory_order_relaxed) & 31);
  r.retry_cnt = static_cast<uint8_t>(o.qp->retry_cnt.load(std::memory_order_relaxed) & 7);

  shm::Seg data[shm::kMaxSendSge];
  int nseg = 0;
  uint64_t total = 0;
  if (!gather(o, w, data, nseg, total)) return false;
  r.length = is_atomic(w.opcode) ? 8 : total;
  bool sent;
  if (carries_data(w.opcode)) {
    sent = link->send(wire::Type::kRequest, &r, sizeof(r), data, nseg, total, ud);
  } else {
    sent = link->send(wire::Type::kRequest, &r, sizeof(r));
  }
  if (!sent) return false;
  o.sent_bytes += total;
  if (ud) {
    complete(o, w, IBV_WC_SUCCESS, static_cast<uint32_t>(total));
    ++o.sent;
    return true;
  }
  if (o.done == o.sent) o.oldest_ns = now;
  ++o.sent;
  return true;
}

bool Router::pump(Outbound& o, int64_t now, uint32_t max_wqes) {
  if (o.qp->gone.load(std::memory_order_relaxed)) return false;
  uint32_t st = o.qp->state.load(std::memory_order_acquire);
  o.last_state = st;
  if (st == IBV_QPS_RESET) {
    // A reset drops the queue; the QP may be connected again later. Numbering goes on where
    // it was, so that the connection's sequence has no gap.
    uint64_t t = o.sq->tail.load(std::memory_order_acquire);
    if (o.done != t && t >= o.sent) {
      o.base += t - o.sent;
      o.done = o.sent = t;
      o.sq->done.store(t, std::memory_order_release);
    }
    o.failed = false;
    return false;
  }
  bool work = false;
  if (st == IBV_QPS_ERR && !o.failed) {
    abort_qp(o, IBV_WC_WR_FLUSH_ERR, false);
    work = true;
  }
  uint64_t tail;
  if (!tail_of(o, &tail)) return work;
  // At most max_wqes entries (the QoS scheduler's choice), whatever the owner wrote.
  const uint64_t end = std::min<uint64_t>(tail, o.sent + max_wqes);
  if (o.failed) {
    const uint64_t flush_end = std::min<uint64_t>(tail, o.done + lim_.wqes_per_pump);
    while (o.done < flush_end) {
      Wqe w;
      read_wqe(o, o.done, w);
      complete(o, w, IBV_WC_WR_FLUSH_ERR, 0);
      work = true;
    }
    o.sent = o.done;
    return work;
  }
  while (o.sent < end) {
    Wqe w;
    bool ok = read_wqe(o, o.sent, w);
    if (!ok || w.status != IBV_WC_SUCCESS) {
      // A request the owner found bad: it fails once everything before it completed.
      if (o.done != o.sent) break;
      complete(o, w, ok ? static_cast<ibv_wc_status>(w.status) : IBV_WC_LOC_QP_OP_ERR, 0);
      ++o.sent;
      abort_qp(o, IBV_WC_WR_FLUSH_ERR, true);
      return true;
    }
    if (!send_wqe(o, w, now)) break;
    work = true;
    if (o.failed) break;
  }
  return work;
}

void Router::on_response(Link& link, const wire::Response& r, uint32_t payload, PayloadDest& dest) {
  auto it = outbound_.find(r.src_qpn);
  if (it == outbound_.end()) return;
  Outbound& o = *it->second;
  if (o.failed || o.done == o.sent || r.seq != o.done - o.base || o.link_id != link.id()) return;
  Wqe w;
  if (!read_wqe(o, o.done, w)) return;
  auto st = static_cast<ibv_wc_status>(r.status);
  if (st == IBV_WC_SUCCESS && w.opcode == IBV_WR_RDMA_READ && payload) {
    RxFrame& f = frame(link.id());
    f.kind = RxFrame::Kind::kReadData;
    f.qpn = o.qpn;
    f.seq = r.seq;
    f.byte_len = r.byte_len;
    f.status = IBV_WC_SUCCESS;
    uint64_t room = 0;
    f.pl.nsegs = 0;
    for (uint32_t i = 0; i < w.num_sge; ++i) {
      const ibv_sge& s = w.sge[i];
      uint8_t* p =
          s.length ? o.peer->translate(0, 0, s.lkey, s.addr, s.length, IBV_ACCESS_LOCAL_WRITE) : nullptr;
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
    uint8_t* p = w.num_sge ? o.peer->translate(0, 0, s.lkey, s.addr, 8, IBV_ACCESS_LOCAL_WRITE) : nullptr;
    if (!p) {
      st = IBV_WC_LOC_PROT_ERR;
    } else {
      memcpy(p, &r.atomic_old, 8);
    }
  }
  uint32_t len = static_cast<uint32_t>(r.byte_len);
  complete(o, w, st, len);
  if (st != IBV_WC_SUCCESS) {
    abort_qp(o, IBV_WC_WR_FLUSH_ERR, true);
    return;
  }
  o.oldest_ns = now_;
}

void Router::check_timeouts(int64_t now) {
  std::vector<uint32_t> silent;
  // QPs with outstanding requests are on the work list.
  for (Outbound* op = work_head_; op; op = op->work_next) {
    Outbound& o = *op;
    if (o.failed || o.done == o.sent || o.info.type == IBV_QPT_UD) continue;
    Link* l = find_link(o.link_id);
    if (!l || !l->open()) continue;
    if (now - l->last_ping_ns > kPingIntervalNs && l->has_room()) {
      wire::Ping p{static_cast<uint64_t>(now)};
      l->send(wire::Type::kPing, &p, sizeof(p));
      l->last_ping_ns = now;
    }
    uint32_t t = o.qp->timeout.load(std::memory_order_relaxed) & 31;
    if (t == 0) continue;  // infinite
    int64_t bound = shm::ack_timeout_ns(t) * (int64_t(o.qp->retry_cnt.load() & 7) + 1);
    bound = std::max(bound, kMinSilenceNs);
    if (now - o.oldest_ns > bound && l->silent(now, bound)) {
      LOG_WARN("router: QP 0x%x: no answer from host %u for %lld ms (timeout %u, retry_cnt %u)",
               o.qpn, l->host_id, static_cast<long long>((now - l->last_rx_ns) / 1000000), t,
               o.qp->retry_cnt.load() & 7);
      silent.push_back(l->id());
    }
  }
  for (uint32_t id : silent)
    if (Link* l = find_link(id)) close_link(*l, "peer silent");
}

}  // namespace vrdma::daemon
