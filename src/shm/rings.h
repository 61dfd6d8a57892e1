// Operations on the shared rings of layout.h. Cells carry sequence numbers (a bounded
// multi-producer multi-consumer queue), so producers and consumers in different processes
// coordinate with atomics alone.
//
// Every function takes the ring's geometry from a private copy (the *View structs) taken and
// validated when the ring was attached, never from the shared header that a peer could
// rewrite. Positions a process owns alone (the owner's producer position of a receive queue,
// its consumer position of a completion ring) are private too. Every loop is bounded: a
// sequence number a peer wrote ahead of where it can be, or garbage, ends in a failed
// operation (kCorrupt), never in a spin.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>

#include "shm/layout.h"

namespace vrdma::shm {

// How many times a producer or consumer re-reads a shared position that other processes move
// before it gives up. Honest contention moves the position each time; only a position that a
// peer holds still at a value the cells contradict can exhaust it.
inline constexpr uint32_t kRingSpins = 1u << 16;

enum class RingResult : uint8_t { kOk, kEmpty, kFull, kCorrupt };

struct CqView {
  CqShared* cq = nullptr;
  uint32_t mask = 0;
};

struct RqView {
  RecvQueue* rq = nullptr;
  uint32_t mask = 0;
  uint32_t max_sge = 0;
  uint32_t entry_size = 0;
  RecvEntry* entry(uint64_t pos) const {
    return reinterpret_cast<RecvEntry*>(rq->entries + (pos & mask) * uint64_t(entry_size));
  }
};

struct RingView {
  RecvRing* ring = nullptr;
  uint32_t mask = 0;
};

inline size_t cq_bytes(uint32_t capacity) {
  return sizeof(CqShared) + size_t(capacity) * sizeof(Cqe);
}
inline size_t rq_bytes(uint32_t capacity, uint32_t max_sge) {
  return sizeof(RecvQueue) + size_t(capacity) * recv_entry_size(max_sge);
}
inline size_t ring_bytes(uint32_t capacity) {
  return sizeof(RecvRing) + size_t(capacity) * sizeof(RecvCqe);
}
inline size_t recv_table_bytes(uint32_t capacity, uint32_t max_sge) {
  return sizeof(RecvTable) + size_t(capacity) * recv_slot_size(max_sge);
}

inline uint32_t pow2_at_least(uint32_t n) {
  uint32_t c = 1;
  while (c < n) c <<= 1;
  return c;
}

inline bool is_pow2(uint32_t n) { return n && !(n & (n - 1)); }

// ---- the private completion ring of a CQ (producers: the owner, vrdmad) -----------------

// A ring of `capacity` cells of which `open` (a power of two, at most `capacity`; 0: all) may
// hold completions at once: a producer finds the ring full once `open` completions wait. The
// owner can open more cells later (cq_open), up to `capacity`, without moving the ring.
inline void cq_init(CqShared* cq, uint32_t capacity, uint32_t channel_fd_id, uint32_t open = 0) {
  if (open == 0 || open > capacity) open = capacity;
  cq->capacity = capacity;
  cq->channel_fd_id = channel_fd_id;
  // A cell not open yet holds a sequence below any position a producer can bring to it.
  for (uint32_t i = 0; i < capacity; ++i)
    cq->entries[i].seq.store(i < open ? i : 0, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
}

// Consumer side: `open` cells were open, `more` are to be (open + more <= capacity), with the
// consumer at `head`. The positions head+open ... head+open+more-1 become available.
inline void cq_open(const CqView& v, uint64_t head, uint32_t open, uint32_t more) {
  for (uint64_t q = head + open; q < head + open + more; ++q)
    v.cq->entries[q & v.mask].seq.store(q, std::memory_order_release);
}

// Producer side. kFull sets `overflow`.
inline RingResult cq_push(const CqView& v, const ibv_wc& wc) {
  CqShared* cq = v.cq;
  uint64_t pos = cq->tail.load(std::memory_order_relaxed);
  for (uint32_t spin = 0; spin < kRingSpins; ++spin) {
    Cqe& cell = cq->entries[pos & v.mask];
    uint64_t seq = cell.seq.load(std::memory_order_acquire);
    int64_t diff = static_cast<int64_t>(seq - pos);
    if (diff == 0) {
      if (cq->tail.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
        cell.wc = wc;
        cell.seq.store(pos + 1, std::memory_order_release);
        return RingResult::kOk;
      }
    } else if (diff < 0) {
      cq->overflow.store(1, std::memory_order_relaxed);
      return RingResult::kFull;
    } else {
      pos = cq->tail.load(std::memory_order_relaxed);
    }
  }
  return RingResult::kCorrupt;
}

// A completion the owner removed before polling it (its QP was reset): QPNs have 24 bits.
inline constexpr uint32_t kRemovedQpn = 0xFFFFFFFFu;

// Consumer side: marks every completion of QP `qpn` that waits from `head` on as removed.
inline void cq_remove_qp(const CqView& v, uint64_t head, uint32_t qpn) {
  uint64_t tail = v.cq->tail.load(std::memory_order_acquire);
  for (uint64_t pos = head; pos != tail; ++pos) {
    Cqe& cell = v.cq->entries[pos & v.mask];
    if (cell.seq.load(std::memory_order_acquire) == pos + 1 && cell.wc.qp_num == qpn)
      cell.wc.qp_num = kRemovedQpn;
  }
}

// Consumer side (the owner only, `head` its private position): whether a completion waits.
inline bool cq_ready(const CqView& v, uint64_t head) {
  return v.cq->entries[head & v.mask].seq.load(std::memory_order_acquire) == head + 1;
}

// Takes up to `max` completions. Returns how many. Each completion taken opens the position
// `open` cells ahead (`open` as in cq_init; 0: the whole ring).
inline int cq_poll(const CqView& v, uint64_t& head, int max, ibv_wc* out, uint32_t open = 0) {
  CqShared* cq = v.cq;
  const uint64_t ahead = open ? open : uint64_t(v.mask) + 1;
  int n = 0;
  while (n < max) {
    Cqe& cell = cq->entries[head & v.mask];
    if (cell.seq.load(std::memory_order_acquire) != head + 1) break;
    if (cell.wc.qp_num != kRemovedQpn) out[n++] = cell.wc;
    cq->entries[(head + ahead) & v.mask].seq.store(head + ahead, std::memory_order_release);
    ++head;
  }
  if (n) cq->head.store(head, std::memory_order_relaxed);
  return n;
}

// After a push: decides whether the owner asked for an event. The full fence pairs with the
// one in the arming so that either the producer sees the arming or the owner's next poll sees
// the completion.
inline bool should_notify(std::atomic<uint32_t>& armed_word, bool solicited) {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  uint32_t armed = armed_word.load(std::memory_order_relaxed);
  if (armed == 0 || (armed == 2 && !solicited)) return false;
  return armed_word.compare_exchange_strong(armed, 0);
}
inline bool cq_should_notify(CqShared* cq, bool solicited) {
  return should_notify(cq->armed, solicited);
}

inline void arm_word(std::atomic<uint32_t>& armed_word, bool solicited_only) {
  armed_word.store(solicited_only ? 2 : 1, std::memory_order_seq_cst);
}

// ---- receive queues (producer: the owner; consumers: the senders) ----------------------

inline void rq_init(RecvQueue* rq, uint32_t capacity, uint32_t max_sge) {
  rq->capacity = capacity;
  rq->max_sge = max_sge;
  rq->entry_size = recv_entry_size(max_sge);
  RqView v{rq, capacity - 1, max_sge, rq->entry_size};
  for (uint32_t i = 0; i < capacity; ++i) v.entry(i)->seq.store(i, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
}

// The owner posts at its private position `tail` (advanced on success). false when the cell is
// not free yet: its last consumer has not released it, which an honest sender always has done
// before the owner saw the receive complete.
inline bool rq_push(const RqView& v, uint64_t& tail, const ibv_sge* sge, uint32_t num_sge) {
  RecvEntry* cell = v.entry(tail);
  if (cell->seq.load(std::memory_order_acquire) != tail) return false;
  cell->num_sge = num_sge;
  if (num_sge) memcpy(cell->sge, sge, num_sge * sizeof(ibv_sge));
  cell->seq.store(tail + 1, std::memory_order_release);
  ++tail;
  v.rq->tail.store(tail, std::memory_order_relaxed);
  return true;
}

struct RecvWr {
  uint64_t index;  // position in the queue: what the completion names
  uint32_t num_sge;
  ibv_sge sge[kMaxRecvSge];
};

// Any consumer takes the oldest receive. num_sge is clamped to the geometry the consumer
// validated.
inline RingResult rq_take(const RqView& v, RecvWr& out) {
  RecvQueue* rq = v.rq;
  uint64_t pos = rq->head.load(std::memory_order_relaxed);
  for (uint32_t spin = 0; spin < kRingSpins; ++spin) {
    RecvEntry* cell = v.entry(pos);
    uint64_t seq = cell->seq.load(std::memory_order_acquire);
    int64_t diff = static_cast<int64_t>(seq - (pos + 1));
    if (diff == 0) {
      if (rq->head.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
        out.index = pos;
        uint32_t n = cell->num_sge;
        out.num_sge = n <= v.max_sge ? n : v.max_sge;
        memcpy(out.sge, cell->sge, out.num_sge * sizeof(ibv_sge));
        cell->seq.store(pos + v.mask + 1, std::memory_order_release);
        return RingResult::kOk;
      }
    } else if (diff < 0) {
      return RingResult::kEmpty;
    } else {
      pos = rq->head.load(std::memory_order_relaxed);
    }
  }
  return RingResult::kCorrupt;
}

// ---- a QP's ring of receive completions (producers: senders; consumer: the owner) --------

inline void ring_init(RecvRing* r, uint32_t capacity) {
  r->capacity = capacity;
  for (uint32_t i = 0; i < capacity; ++i) r->entries[i].seq.store(i, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
}

struct RecvReport {
  uint64_t index = 0;
  uint32_t byte_len = 0;
  uint32_t imm_data = 0;
  uint32_t src_qp = 0;
  uint32_t dst_qp = 0;
  uint8_t opcode = kRecvSend;
  uint8_t status = kRecvOk;
  uint8_t flags = 0;
};

inline RingResult ring_push(const RingView& v, const RecvReport& r) {
  RecvRing* ring = v.ring;
  uint64_t pos = ring->tail.load(std::memory_order_relaxed);
  for (uint32_t spin = 0; spin < kRingSpins; ++spin) {
    RecvCqe& cell = ring->entries[pos & v.mask];
    uint64_t seq = cell.seq.load(std::memory_order_acquire);
    int64_t diff = static_cast<int64_t>(seq - pos);
    if (diff == 0) {
      if (ring->tail.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
        cell.index = r.index;
        cell.byte_len = r.byte_len;
        cell.imm_data = r.imm_data;
        cell.src_qp = r.src_qp;
        cell.dst_qp = r.dst_qp;
        cell.opcode = r.opcode;
        cell.status = r.status;
        cell.flags = r.flags;
        cell.seq.store(pos + 1, std::memory_order_release);
        return RingResult::kOk;
      }
    } else if (diff < 0) {
      return RingResult::kFull;
    } else {
      pos = ring->tail.load(std::memory_order_relaxed);
    }
  }
  return RingResult::kCorrupt;
}

inline bool ring_ready(const RingView& v, uint64_t head) {
  return v.ring->entries[head & v.mask].seq.load(std::memory_order_acquire) == head + 1;
}

// The owner takes the next report at its private position `head` (advanced on success). The
// fields are copied out once; the caller validates the copy.
inline bool ring_take(const RingView& v, uint64_t& head, RecvReport& out) {
  RecvCqe& cell = v.ring->entries[head & v.mask];
  if (cell.seq.load(std::memory_order_acquire) != head + 1) return false;
  out.index = cell.index;
  out.byte_len = cell.byte_len;
  out.imm_data = cell.imm_data;
  out.src_qp = cell.src_qp;
  out.dst_qp = cell.dst_qp;
  out.opcode = cell.opcode;
  out.status = cell.status;
  out.flags = cell.flags;
  cell.seq.store(head + v.mask + 1, std::memory_order_release);
  ++head;
  return true;
}

}  // namespace vrdma::shm
