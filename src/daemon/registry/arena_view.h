// The daemon's mapping of a client's arena (shm_layout.h). The client can write the arena at
// any time and can even shrink the memfd under the mapping, so every access goes through a
// guard that turns SIGBUS into a failed access instead of a dead daemon, and every offset is
// validated against the mapped size.
#pragma once

#include <cstddef>
#include <cstdint>

namespace vrdma::daemon {

struct QpSnapshot {
  uint32_t state = 0;
  uint64_t tx_ops = 0, tx_bytes = 0, rx_ops = 0, rx_bytes = 0, errors = 0;
};

class ArenaView {
 public:
  ArenaView() = default;
  ~ArenaView() { unmap(); }
  ArenaView(const ArenaView&) = delete;
  ArenaView& operator=(const ArenaView&) = delete;

  // Maps `size` bytes of fd read/write shared and checks the header's magic and version.
  // Returns 0 or a positive errno (EINVAL for a bad or too small file).
  int map(int fd, uint64_t size);
  void unmap();
  bool mapped() const { return base_ != nullptr; }
  uint64_t size() const { return size_; }

  // Whether a QpShared fits at offset (and is aligned). Cheap; no access.
  bool qp_offset_ok(uint64_t offset) const;

  // Each returns false when the access faulted (the client shrank its memfd) or the offset
  // is invalid.
  bool mark_dead();
  bool mark_qp_gone(uint64_t offset);
  bool read_qp(uint64_t offset, QpSnapshot* out) const;

 private:
  unsigned char* base_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace vrdma::daemon
