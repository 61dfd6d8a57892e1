// The daemon's mapping of a client's arena (shm/layout.h), and of its QP objects. The client
// can write them at any time. Only files sealed against shrinking and growing are mapped, at
// the size they have, so an access cannot fault; every access still goes through a guard that
// would turn SIGBUS into a failed access instead of a dead daemon, and every offset and count
// read from the file is validated against the mapped size.
#pragma once

#include <cstddef>
#include <cstdint>

#include "shm/layout.h"

namespace vrdma::daemon {

struct QpSnapshot {
  uint32_t state = 0;
  uint64_t tx_ops = 0, tx_bytes = 0, errors = 0, dropped = 0;
  uint64_t rnr_retries = 0, transport_retries = 0;
  uint64_t recv_ok = 0, recv_len_err = 0, recv_prot_err = 0;
  uint64_t class_ops[shm::kOpClasses] = {}, class_bytes[shm::kOpClasses] = {};
  uint64_t completions[shm::kWcStatusSlots] = {};  // send side, by ibv_wc_status
  uint32_t send_cq_offset = 0, recv_cq_offset = 0;
};

class ArenaView {
 public:
  ArenaView() = default;
  ~ArenaView() { unmap(); }
  ArenaView(const ArenaView&) = delete;
  ArenaView& operator=(const ArenaView&) = delete;

  // Maps fd whole (it must be sealed against shrinking and growing, and hold at least `size`
  // bytes) read/write shared and checks the header's magic and version. Returns 0 or a positive
  // errno (EPERM: not sealed; EINVAL: a bad or too small file).
  int map(int fd, uint64_t size);
  void unmap();
  bool mapped() const { return base_ != nullptr; }
  uint64_t size() const { return size_; }

  // Whether a QpShared fits at offset (and is aligned). Cheap; no access.
  bool qp_offset_ok(uint64_t offset) const;

  // Each returns false when the access faulted (the client shrank its memfd) or the offset
  // is invalid.
  bool mark_dead();
  bool bump_mcast_gen();  // the owner's tenant's multicast memberships changed
  // Whether the CQ at `offset` (a CqShared) overflowed; false also when it cannot be read.
  bool cq_overflowed(uint64_t offset) const;
  // The owner's word on how it keeps other threads' writes while pages move (a
  // shm::PageMoveGuard; kGuardUnknown when it cannot be read or names none).
  uint32_t page_move_guard() const;
  bool mark_qp_gone(uint64_t offset);
  bool read_qp(uint64_t offset, QpSnapshot* out) const;

  // The descriptor of the MR in slot `index` if it holds `key` (copied out consistently).
  bool read_mr(uint32_t index, uint32_t key, shm::MrEntry* out) const;
  // Whether a receive outstanding on the QP whose QpShared is at `qp_offset` (in its own queue or
  // its SRQ's) points into the MR `key`. Reads at most a bounded number of entries.
  bool receive_points_into(uint64_t qp_offset, uint32_t key) const;

 private:
  unsigned char* base_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace vrdma::daemon
