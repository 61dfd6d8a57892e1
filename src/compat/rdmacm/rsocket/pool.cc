// Endpoint resources of closed sockets, kept for the next ones: the registered ring and send
// buffer, the CQ and its completion channel (the QP is not kept). A peer process keeps what it
// mapped of this process's registrations and completion channels for as long as this process
// lives, so a new registration per connection would grow every long-lived peer by a mapping
// and descriptors per connection; reusing them keeps that bounded by the sockets open at once
// (plus this pool). Reuse is safe: the old QP is destroyed first, so nothing of the old
// connection can still write into the buffers or complete into the CQ.
#include <sys/mman.h>

#include <mutex>
#include <vector>

#include "socket.h"

namespace vrdma::rsock {

namespace {

constexpr size_t kMaxIdle = 32;
constexpr uint64_t kMaxIdleBytes = 64ull << 20;

struct Idle {
  ibv_context* ctx;
  uint32_t ring, sbuf_size, cqe;
  ibv_comp_channel* cc;
  ibv_cq* cq;
  uint8_t* rbuf;
  ibv_mr* rmr;
  uint8_t* sbuf;
  ibv_mr* smr;
};

struct Pool {
  std::mutex mu;
  std::vector<Idle> idle;
  uint64_t bytes = 0;
};

Pool& pool() {
  static Pool* p = new Pool();  // lives as long as the process, as the device does
  return *p;
}

void free_idle(const Idle& e) {
  ibv_dereg_mr(e.rmr);
  ibv_dereg_mr(e.smr);
  munmap(e.rbuf, e.ring);
  munmap(e.sbuf, e.sbuf_size);
  ibv_destroy_cq(e.cq);
  ibv_destroy_comp_channel(e.cc);
}

}  // namespace

bool pool_take(Socket& s, uint32_t cqe) {
  Pool& p = pool();
  std::lock_guard lock(p.mu);
  for (size_t i = 0; i < p.idle.size(); ++i) {
    const Idle& e = p.idle[i];
    if (e.ctx != s.id->verbs || e.ring != s.ring || e.sbuf_size != s.sbuf_size || e.cqe != cqe)
      continue;
    s.cc = e.cc;
    s.cq = e.cq;
    s.rbuf = e.rbuf;
    s.rmr = e.rmr;
    s.sbuf = e.sbuf;
    s.smr = e.smr;
    p.bytes -= uint64_t(e.ring) + e.sbuf_size;
    p.idle[i] = p.idle.back();
    p.idle.pop_back();
    return true;
  }
  return false;
}

void pool_give(Socket& s) {
  if (!s.cq || !s.cc || !s.rmr || !s.smr) return;
  // Empty the CQ and take every completion event, so that the next socket starts clean.
  ibv_wc wc[16];
  while (ibv_poll_cq(s.cq, 16, wc) > 0) {
  }
  ibv_cq* cq;
  void* ctx;
  while (ibv_get_cq_event(s.cc, &cq, &ctx) == 0) ++s.unacked;
  if (s.unacked) ibv_ack_cq_events(s.cq, s.unacked);
  s.unacked = 0;
  Idle e{s.cq->context, s.ring, s.sbuf_size, cq_entries(s), s.cc,
         s.cq,          s.rbuf, s.rmr,       s.sbuf,        s.smr};
  s.cc = nullptr;
  s.cq = nullptr;
  s.rbuf = s.sbuf = nullptr;
  s.rmr = s.smr = nullptr;
  Pool& p = pool();
  std::unique_lock lock(p.mu);
  uint64_t bytes = uint64_t(e.ring) + e.sbuf_size;
  if (p.idle.size() >= kMaxIdle || p.bytes + bytes > kMaxIdleBytes) {
    lock.unlock();
    free_idle(e);
    return;
  }
  p.idle.push_back(e);
  p.bytes += bytes;
}

}  // namespace vrdma::rsock
