#include "engine/posted_recvs.h"

#include <errno.h>
#include <string.h>

namespace vrdma {

void PostedRecvs::init(shm::RqView rq, shm::RecvTable* table) {
  rq_ = rq;
  table_ = table;
  mask_ = rq.mask;
  max_sge_ = rq.max_sge;
  table->capacity = mask_ + 1;
  table->max_sge = max_sge_;
  table->slot_size = shm::recv_slot_size(max_sge_);
  slot_size_ = table->slot_size;
  tail_ = 0;
}

int PostedRecvs::post(const ibv_recv_wr& wr) {
  if (wr.num_sge < 0 || static_cast<uint32_t>(wr.num_sge) > max_sge_) return EINVAL;
  shm::RecvSlot* s = slot(tail_);
  // The receive posted here a ring ago has not completed yet: the queue is full.
  if (s->tag.load(std::memory_order_acquire) != 0) return ENOMEM;
  uint64_t length = 0;
  for (int i = 0; i < wr.num_sge; ++i) length += wr.sg_list[i].length;
  s->wr_id = wr.wr_id;
  s->num_sge = static_cast<uint32_t>(wr.num_sge);
  s->length = length > UINT32_MAX ? UINT32_MAX : static_cast<uint32_t>(length);
  if (wr.num_sge) memcpy(s->sge, wr.sg_list, sizeof(ibv_sge) * wr.num_sge);
  uint64_t pos = tail_;
  s->tag.store(pos + 1, std::memory_order_release);
  if (!shm::rq_push(rq_, tail_, wr.sg_list, static_cast<uint32_t>(wr.num_sge))) {
    // A sender still holds the cell (it never released it): refuse rather than overwrite it.
    s->tag.store(0, std::memory_order_release);
    return ENOMEM;
  }
  return 0;
}

bool PostedRecvs::complete(uint64_t index, uint64_t& wr_id, uint32_t& length) {
  if (!table_ || index == UINT64_MAX) return false;  // tag 0 is a free slot
  shm::RecvSlot* s = slot(index);
  uint64_t want = index + 1;
  if (s->tag.load(std::memory_order_acquire) != want) return false;
  uint64_t id = s->wr_id;
  uint32_t len = s->length;
  if (!s->tag.compare_exchange_strong(want, 0, std::memory_order_acq_rel)) return false;
  wr_id = id;
  length = len;
  return true;
}

void PostedRecvs::reset(shm::RqView rq) {
  if (!table_) return;
  for (uint32_t i = 0; i <= mask_; ++i) slot(i)->tag.store(0, std::memory_order_relaxed);
  rq_ = rq;
  tail_ = 0;
}

}  // namespace vrdma
