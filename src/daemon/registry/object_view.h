// The daemon's mapping of one of a client's QP objects (shm/layout.h): to mark the QP gone when
// its owner dies and to read the receive counters senders keep. Mapped only when sealed, at the
// file's size, header checked; every access guarded.
#pragma once

#include <cstdint>

namespace vrdma::daemon {

class ObjectView {
 public:
  ObjectView() = default;
  ~ObjectView() { unmap(); }
  ObjectView(const ObjectView&) = delete;
  ObjectView& operator=(const ObjectView&) = delete;
  ObjectView(ObjectView&& o) noexcept;
  ObjectView& operator=(ObjectView&& o) noexcept;

  // 0, or a positive errno (EPERM: not sealed; EINVAL: not a QP object of `owner`).
  int map(int fd, uint32_t owner);
  void unmap();
  bool mapped() const { return base_ != nullptr; }

  bool mark_gone();
  bool read_rx(uint64_t* ops, uint64_t* bytes) const;

 private:
  unsigned char* base_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace vrdma::daemon
