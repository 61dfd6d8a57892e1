// Operations on the shared rings of shm_layout.h. Cells carry sequence
// numbers (a bounded multi-producer multi-consumer queue), so producers and
// consumers in different processes coordinate with atomics alone.
//
// Every function takes the ring's geometry from a private copy (RingView)
// taken and validated when the ring was attached, never from the shared header
// that a peer could rewrite.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>

#include "shm/layout.h"

namespace vrdma::shm {

struct CqView {
  shm::CqShared* cq = nullptr;
  uint32_t mask = 0;
};

struct RqView {
  shm::RecvQueue* rq = nullptr;
  uint32_t mask = 0;
  uint32_t max_sge = 0;
  uint32_t entry_size = 0;
  shm::RecvEntry* entry(uint64_t pos) const {
    return reinterpret_cast<shm::RecvEntry*>(rq->entries + (pos & mask) * uint64_t(entry_size));
  }
};

inline size_t cq_bytes(uint32_t capacity) {
  return sizeof(shm::CqShared) + size_t(capacity) * sizeof(shm::Cqe);
}
inline size_t rq_bytes(uint32_t capacity, uint32_t max_sge) {
  return sizeof(shm::RecvQueue) + size_t(capacity) * shm::recv_entry_size(max_sge);
}

inline uint32_t pow2_at_least(uint32_t n) {
  uint32_t c = 1;
  while (c < n) c <<= 1;
  return c;
}

inline void cq_init(shm::CqShared* cq, uint32_t capacity, uint32_t channel_fd_id) {
  cq->capacity = capacity;
  cq->channel_fd_id = channel_fd_id;
  for (uint32_t i = 0; i < capacity; ++i) cq->entries[i].seq.store(i, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
}

inline void rq_init(shm::RecvQueue* rq, uint32_t capacity, uint32_t max_sge, bool srq) {
  rq->capacity = capacity;
  rq->max_sge = max_sge;
  rq->entry_size = shm::recv_entry_size(max_sge);
  rq->is_srq = srq;
  RqView v{rq, capacity - 1, max_sge, rq->entry_size};
  for (uint32_t i = 0; i < capacity; ++i) v.entry(i)->seq.store(i, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
}

// Producer side of a CQ. Returns false when the queue is full (overflow).
inline bool cq_push(const CqView& v, const ibv_wc& wc) {
  shm::CqShared* cq = v.cq;
  uint64_t pos = cq->tail.load(std::memory_order_relaxed);
  for (;;) {
    shm::Cqe& cell = cq->entries[pos & v.mask];
    uint64_t seq = cell.seq.load(std::memory_order_acquire);
    int64_t diff = static_cast<int64_t>(seq - pos);
    if (diff == 0) {
      if (cq->tail.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
        cell.wc = wc;
        cell.seq.store(pos + 1, std::memory_order_release);
        return true;
      }
    } else if (diff < 0) {
      cq->overflow.store(1, std::memory_order_relaxed);
      return false;
    } else {
      pos = cq->tail.load(std::memory_order_relaxed);
    }
  }
}

// Consumer side: whether a completion is waiting, without taking it.
inline bool cq_ready(const CqView& v) {
  uint64_t pos = v.cq->head.load(std::memory_order_relaxed);
  return v.cq->entries[pos & v.mask].seq.load(std::memory_order_acquire) == pos + 1;
}

// Consumer side (the owner only). Returns the number of completions taken.
inline int cq_poll(const CqView& v, int max, ibv_wc* out) {
  shm::CqShared* cq = v.cq;
  uint64_t pos = cq->head.load(std::memory_order_relaxed);
  int n = 0;
  while (n < max) {
    shm::Cqe& cell = cq->entries[pos & v.mask];
    if (cell.seq.load(std::memory_order_acquire) != pos + 1) break;
    out[n++] = cell.wc;
    cell.seq.store(pos + v.mask + 1, std::memory_order_release);
    ++pos;
  }
  if (n) cq->head.store(pos, std::memory_order_relaxed);
  return n;
}

// After a push: decides whether the owner asked for an event. The full fence
// pairs with the one in cq_arm so that either the producer sees the arming or
// the owner's next poll sees the completion.
inline bool cq_should_notify(shm::CqShared* cq, bool solicited) {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  uint32_t armed = cq->armed.load(std::memory_order_relaxed);
  if (armed == 0 || (armed == 2 && !solicited)) return false;
  if (!cq->armed.compare_exchange_strong(armed, 0)) return false;
  cq->events.fetch_add(1, std::memory_order_relaxed);
  return true;
}

inline void cq_arm(shm::CqShared* cq, bool solicited_only) {
  cq->armed.store(solicited_only ? 2 : 1, std::memory_order_seq_cst);
}

// Owner posts a receive. Returns false when the queue is full.
inline bool rq_push(const RqView& v, uint64_t wr_id, const ibv_sge* sge, uint32_t num_sge) {
  shm::RecvQueue* rq = v.rq;
  uint64_t pos = rq->tail.load(std::memory_order_relaxed);
  for (;;) {
    shm::RecvEntry* cell = v.entry(pos);
    uint64_t seq = cell->seq.load(std::memory_order_acquire);
    int64_t diff = static_cast<int64_t>(seq - pos);
    if (diff == 0) {
      if (rq->tail.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
        cell->wr_id = wr_id;
        cell->num_sge = num_sge;
        if (num_sge) memcpy(cell->sge, sge, num_sge * sizeof(ibv_sge));
        cell->seq.store(pos + 1, std::memory_order_release);
        return true;
      }
    } else if (diff < 0) {
      return false;
    } else {
      pos = rq->tail.load(std::memory_order_relaxed);
    }
  }
}

struct RecvWr {
  uint64_t wr_id;
  uint32_t num_sge;
  ibv_sge sge[shm::kMaxRecvSge];
};

// Any consumer takes the oldest receive. Returns false when none is posted.
// num_sge is clamped to the geometry the consumer validated.
inline bool rq_pop(const RqView& v, RecvWr& out) {
  shm::RecvQueue* rq = v.rq;
  uint64_t pos = rq->head.load(std::memory_order_relaxed);
  for (;;) {
    shm::RecvEntry* cell = v.entry(pos);
    uint64_t seq = cell->seq.load(std::memory_order_acquire);
    int64_t diff = static_cast<int64_t>(seq - (pos + 1));
    if (diff == 0) {
      if (rq->head.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
        out.wr_id = cell->wr_id;
        uint32_t n = cell->num_sge;
        out.num_sge = n <= v.max_sge ? n : v.max_sge;
        memcpy(out.sge, cell->sge, out.num_sge * sizeof(ibv_sge));
        cell->seq.store(pos + v.mask + 1, std::memory_order_release);
        return true;
      }
    } else if (diff < 0) {
      return false;
    } else {
      pos = rq->head.load(std::memory_order_relaxed);
    }
  }
}

inline uint64_t rq_depth(const RqView& v) {
  return v.rq->tail.load(std::memory_order_relaxed) - v.rq->head.load(std::memory_order_relaxed);
}

}  // namespace vrdma::shm
