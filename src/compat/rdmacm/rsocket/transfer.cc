// The data path of a connected rsocket (wire.h has the protocol): taking completions (data,
// credits, control messages, errors), posting writes and control messages, returning ring
// space, and what a socket is ready for.
//
// Steady state makes no system call: sends and completions go through the verbs rings;
// only a thread that has nothing to do arms the CQ and sleeps in poll() (wait.cc).
#include <errno.h>
#include <string.h>

#include "socket.h"

namespace vrdma::rsock {

namespace {

constexpr uint64_t kSqMask = 0xffffffffull;
constexpr uint64_t kSbufMask = 0x7fffffffull;  // the send buffer is below 2 GiB

// The full counter whose low bits are `low`, at or below `cur`.
uint64_t unwrap(uint64_t cur, uint64_t low, uint64_t mask) {
  return cur - ((cur - low) & mask);
}

void set_error(Socket& s, int e) {
  if (!s.err) s.err = e;
}

uint32_t signal_every(const Socket& s) {
  uint32_t n = s.sq_size / 4;
  return n < 1 ? 1 : n > 16 ? 16 : n;
}

uint64_t ring_free(const Socket& s) {
  return s.peer_ring - (s.tx_tail - s.tx_credited);
}

// Releases the head message (and IO mapping records behind it): its ring space is free.
void pop_head(Socket& s) {
  uint64_t mask = s.rmsg.size() - 1;
  s.rx_freed += s.rmsg[s.rm_head & mask].adv;
  ++s.rm_head;
  s.head_used = 0;
  while (s.rm_head != s.rm_tail && s.rmsg[s.rm_head & mask].len == 0) {
    s.rx_freed += s.rmsg[s.rm_head & mask].adv;
    ++s.rm_head;
  }
}

void apply_iomap(Socket& s, const IomapEntry& e) {
  if (e.index >= s.peer_maps.size()) {
    set_error(s, EPROTO);
    return;
  }
  PeerMap& m = s.peer_maps[e.index];
  m.offset = e.offset;
  m.addr = e.addr;
  m.length = e.length;
  m.rkey = e.rkey;
}

// A message written into our ring: queue it for the reader.
void ring_message(Socket& s, const ibv_wc& wc, Op op) {
  uint64_t mask = s.rmsg.size() - 1;
  uint32_t pos = static_cast<uint32_t>(s.rx_pos & (s.ring - 1));
  uint32_t to_end = s.ring - pos;
  uint32_t len = wc.byte_len;
  bool iomap = op == Op::kIomap;
  if (len == 0 || len > to_end || (iomap && len != sizeof(IomapEntry)) ||
      s.rm_tail - s.rm_head >= s.rmsg.size()) {
    set_error(s, EPROTO);  // the peer broke the protocol
    return;
  }
  uint32_t adv = advance(len, s.slot, to_end);
  if (iomap) {
    IomapEntry e;
    memcpy(&e, s.rbuf + pos, sizeof(e));
    apply_iomap(s, e);
    len = 0;
  }
  s.rmsg[s.rm_tail & mask] = RxMsg{pos, len, adv};
  ++s.rm_tail;
  s.rx_pos += adv;
  if (iomap && s.rm_tail - s.rm_head == 1) pop_head(s);  // nothing unread before it
}

void on_recv(Socket& s, const ibv_wc& wc) {
  if (wc.status != IBV_WC_SUCCESS) {
    set_error(s, ECONNRESET);
    return;
  }
  ++s.reposts;
  if (!(wc.wc_flags & IBV_WC_WITH_IMM)) {
    set_error(s, EPROTO);
    return;
  }
  Op op = imm_op(wc.imm_data);
  uint32_t value = imm_value(wc.imm_data);
  switch (op) {
    case Op::kData:
    case Op::kIomap:
      ring_message(s, wc, op);
      break;
    case Op::kCredit:
      if (value > s.tx_tail - s.tx_credited) {
        set_error(s, EPROTO);
        break;
      }
      s.tx_credited += value;
      break;
    case Op::kClose:
      s.peer_closed = true;
      [[fallthrough]];
    case Op::kFin:
      s.peer_fin = true;
      break;
    default:
      set_error(s, EPROTO);
  }
}

void on_send(Socket& s, const ibv_wc& wc) {
  s.sq_done = unwrap(s.sq_posted, wc.wr_id & kSqMask, kSqMask);
  s.sb_done = unwrap(s.sb_head, (wc.wr_id >> 32) & kSbufMask, kSbufMask);
  if (wc.status != IBV_WC_SUCCESS) set_error(s, ECONNRESET);
}

void post_receives(Socket& s) {
  uint32_t n = s.reposts;
  if (!n || s.err || !s.qp) return;
  ibv_recv_wr* last = &s.recv_wrs[n - 1];
  ibv_recv_wr* keep = last->next;
  last->next = nullptr;
  ibv_recv_wr* bad = nullptr;
  int e = ibv_post_recv(s.qp, s.recv_wrs.data(), &bad);
  last->next = keep;
  if (e) {
    set_error(s, e);
    return;
  }
  s.reposts = 0;
}

// Posts one work request; counts it and decides whether it is signaled.
int post(Socket& s, ibv_send_wr& wr, bool signal) {
  if (signal || s.unsignaled + 1 >= signal_every(s)) wr.send_flags |= IBV_SEND_SIGNALED;
  uint64_t seq = s.sq_posted + 1;
  wr.wr_id = (s.sb_head & kSbufMask) << 32 | (seq & kSqMask);
  ibv_send_wr* bad = nullptr;
  if (int e = ibv_post_send(s.qp, &wr, &bad)) return e;
  s.sq_posted = seq;
  s.unsignaled = (wr.send_flags & IBV_SEND_SIGNALED) ? 0 : s.unsignaled + 1;
  return 0;
}

}  // namespace

uint32_t sq_free(const Socket& s) {
  return s.sq_size - static_cast<uint32_t>(s.sq_posted - s.sq_done);
}

uint32_t sbuf_free(const Socket& s) {
  return s.sbuf_size - static_cast<uint32_t>(s.sb_head - s.sb_done);
}

void progress(Socket& s) {
  if (!s.cq) return;
  ibv_wc wc[32];
  int got = 0;
  for (;;) {
    int n = ibv_poll_cq(s.cq, 32, wc);
    if (n <= 0) break;
    got += n;
    for (int i = 0; i < n; ++i) {
      if (wc[i].wr_id & kRecvId) {
        on_recv(s, wc[i]);
      } else {
        on_send(s, wc[i]);
      }
    }
    if (n < 32) break;
  }
  if (!got && !s.credit_due) return;
  post_receives(s);
  if (s.credit_due) return_credit(s);
  if (s.waiters) kick_waiters(s, nullptr);
}

void peer_left(Socket& s, rdma_cm_event_type t) {
  if (t != RDMA_CM_EVENT_DISCONNECTED && t != RDMA_CM_EVENT_DEVICE_REMOVAL) return;
  // What the peer sent before it left is in the CQ already.
  progress(s);
  if (t == RDMA_CM_EVENT_DISCONNECTED && s.peer_fin) {
    s.peer_closed = true;
  } else {
    set_error(s, ECONNRESET);
  }
  if (s.waiters) kick_waiters(s, nullptr);
}

void process_cm(Socket& s) {
  rdma_cm_event* ev = nullptr;
  while (rdma_get_cm_event(s.ch, &ev) == 0) {
    rdma_cm_event_type t = ev->event;
    rdma_ack_cm_event(ev);
    peer_left(s, t);
  }
}

bool readable(const Socket& s) {
  return s.rm_head != s.rm_tail || s.peer_fin || s.rd_shut || s.err;
}

bool writable(Socket& s) {
  if (s.err || s.wr_shut || s.peer_closed) return true;  // the call fails at once
  if (sq_free(s) <= kCtrlSends) return false;
  if (sbuf_free(s) < (s.sbuf_size < kSendLowat ? s.sbuf_size : kSendLowat)) return false;
  uint32_t to_end = s.peer_ring - static_cast<uint32_t>(s.tx_tail & (s.peer_ring - 1));
  uint32_t need = s.peer_slot < to_end ? s.peer_slot : to_end;
  return ring_free(s) >= need;
}

short poll_events(Socket& s, short events) {
  short rev = 0;
  switch (s.state) {
    case State::kListening:
      return (events & POLLIN) && accept_ready(s) ? POLLIN : 0;
    case State::kConnecting:
      if (drive_connect(s) == EINPROGRESS) return 0;
      if (s.state != State::kConnected) return (events & (POLLIN | POLLOUT)) | POLLERR;
      break;
    case State::kFailed:
      return (events & (POLLIN | POLLOUT)) | POLLERR;
    case State::kInit:
    case State::kBound:
      return (events & POLLOUT) | POLLHUP;
    case State::kConnected:
      break;
  }
  progress(s);
  if ((events & POLLIN) && readable(s)) rev |= POLLIN;
  if ((events & POLLRDHUP) && s.peer_fin) rev |= POLLRDHUP;
  if ((events & POLLOUT) && writable(s)) rev |= POLLOUT;
  // As TCP: hang-up once neither direction carries data any more (the peer's end of file
  // alone is POLLIN, with POLLRDHUP), or a reset.
  if (s.err) rev |= POLLERR | POLLHUP;
  if (s.peer_fin && s.wr_shut) rev |= POLLHUP;
  return rev;
}

int post_ctrl(Socket& s, Op op, uint32_t value) {
  if (!s.qp || sq_free(s) == 0) return EAGAIN;
  ibv_send_wr wr{};
  wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  wr.imm_data = make_imm(op, value);
  wr.wr.rdma.remote_addr = s.peer_ring_addr;
  wr.wr.rdma.rkey = s.peer_rkey;
  return post(s, wr, op == Op::kClose);
}

int post_write(Socket& s, Op op, const void* buf, uint32_t len, uint64_t raddr, uint32_t rkey,
               bool imm) {
  ibv_send_wr wr{};
  ibv_sge sge[2];
  bool inl = len <= s.opt.inline_size || op == Op::kIomap;
  if (inl) {
    sge[0] = ibv_sge{reinterpret_cast<uintptr_t>(buf), len, 0};
    wr.num_sge = 1;
    wr.send_flags = IBV_SEND_INLINE;
  } else {
    // Into the send buffer, which wraps: one or two pieces.
    uint32_t at = static_cast<uint32_t>(s.sb_head % s.sbuf_size);
    uint32_t first = s.sbuf_size - at < len ? s.sbuf_size - at : len;
    memcpy(s.sbuf + at, buf, first);
    sge[0] = ibv_sge{reinterpret_cast<uintptr_t>(s.sbuf + at), first, s.smr->lkey};
    wr.num_sge = 1;
    if (first < len) {
      memcpy(s.sbuf, static_cast<const uint8_t*>(buf) + first, len - first);
      sge[1] = ibv_sge{reinterpret_cast<uintptr_t>(s.sbuf), len - first, s.smr->lkey};
      wr.num_sge = 2;
    }
    s.sb_head += len;
  }
  wr.sg_list = sge;
  wr.opcode = imm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
  wr.imm_data = make_imm(op, len);
  wr.wr.rdma.remote_addr = raddr;
  wr.wr.rdma.rkey = rkey;
  int e = post(s, wr, !inl);
  if (e && !inl) s.sb_head -= len;
  return e;
}

uint32_t send_message(Socket& s, Op op, const void* buf, uint32_t len) {
  if (sq_free(s) <= kCtrlSends) return 0;
  uint32_t pos = static_cast<uint32_t>(s.tx_tail & (s.peer_ring - 1));
  uint32_t to_end = s.peer_ring - pos;
  uint64_t free = ring_free(s);
  if (len > to_end) len = to_end;
  if (len > kMaxPiece) len = kMaxPiece;
  if (len > free) len = static_cast<uint32_t>(free);
  if (op == Op::kData && len > s.opt.inline_size) {
    uint32_t sb = sbuf_free(s);
    if (len > sb) len = sb > s.opt.inline_size ? sb : s.opt.inline_size;
  }
  if (len == 0) return 0;
  uint32_t adv = advance(len, s.peer_slot, to_end);
  if (adv > free) return 0;
  if (int e = post_write(s, op, buf, len, s.peer_ring_addr + pos, s.peer_rkey, true)) {
    set_error(s, e);
    return 0;
  }
  s.tx_tail += adv;
  return len;
}

void consume(Socket& s, uint32_t bytes) {
  uint64_t mask = s.rmsg.size() - 1;
  while (bytes && s.rm_head != s.rm_tail) {
    RxMsg& m = s.rmsg[s.rm_head & mask];
    uint32_t left = m.len - s.head_used;
    if (bytes < left) {
      s.head_used += bytes;
      return;
    }
    bytes -= left;
    pop_head(s);
  }
}

void return_credit(Socket& s) {
  uint64_t n = s.rx_freed - s.rx_reported;
  if (!n || s.err || s.peer_fin || s.close_sent) {
    s.credit_due = false;
    return;
  }
  if (post_ctrl(s, Op::kCredit, static_cast<uint32_t>(n)) == 0) {
    s.rx_reported += n;
    s.credit_due = false;
  } else {
    s.credit_due = true;  // when a send slot is free again
  }
}

void flush_iomaps(Socket& s) {
  while (!s.iomap_out.empty() && !s.err) {
    const IomapEntry& e = s.iomap_out.front();
    if (send_message(s, Op::kIomap, &e, sizeof(e)) != sizeof(e)) return;
    s.iomap_out.pop_front();
  }
}

}  // namespace vrdma::rsock
