// The owner's side of one receive queue (a QP's own or an SRQ's): the shared ring senders take
// receives from (scatter lists only) and the private table of what was posted (wr_id, length,
// scatter list), indexed by ring position. A receive completion a sender reports names a
// position; complete() accepts it only for a receive that is outstanding at that position and
// hands back its wr_id, so a forged or repeated report changes nothing.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>

#include "shm/rings.h"

namespace vrdma {

class PostedRecvs {
 public:
  // `rq` is in the shared object, `table` in the arena (private), both of capacity mask + 1.
  void init(shm::RqView rq, shm::RecvTable* table);
  bool ready() const { return table_ != nullptr; }
  uint32_t capacity() const { return mask_ + 1; }
  uint32_t max_sge() const { return max_sge_; }

  // Posts one receive. 0, EINVAL (too many SGEs) or ENOMEM (no free slot).
  int post(const ibv_recv_wr& wr);

  // A sender reported the receive at `index` complete: true, its wr_id and length when it was
  // outstanding (the slot is then free again), false for anything else.
  bool complete(uint64_t index, uint64_t& wr_id, uint32_t& length);

  // Every outstanding receive, oldest first, is taken back and given to f(wr_id): the queue
  // went to the error state. Receives still in the shared ring are taken out first so that no
  // sender consumes them afterwards.
  template <typename F>
  void flush(F&& f) {
    if (!table_) return;
    shm::RecvWr r;
    for (uint32_t i = 0; i <= mask_ && shm::rq_take(rq_, r) == shm::RingResult::kOk; ++i) {
    }
    for (uint64_t pos = tail_ > mask_ ? tail_ - mask_ - 1 : 0; pos < tail_; ++pos) {
      shm::RecvSlot* s = slot(pos);
      uint64_t want = pos + 1;
      uint64_t wr_id = s->wr_id;
      if (s->tag.compare_exchange_strong(want, 0, std::memory_order_acq_rel)) f(wr_id);
    }
  }

  // Forgets every receive (a reset); the caller gives the queue a new shared ring.
  void reset(shm::RqView rq);

 private:
  shm::RecvSlot* slot(uint64_t pos) const {
    return reinterpret_cast<shm::RecvSlot*>(table_->slots + (pos & mask_) * uint64_t(slot_size_));
  }

  shm::RqView rq_;
  shm::RecvTable* table_ = nullptr;
  uint32_t mask_ = 0, max_sge_ = 0, slot_size_ = 0;
  uint64_t tail_ = 0;  // the owner's producer position (never read from shared memory)
};

}  // namespace vrdma
