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
  // The object is `owner`'s now (a shared XRC_RECV QP handed over): what peers check it by.
  bool set_owner(uint32_t owner);
  bool read_rx(uint64_t* ops, uint64_t* bytes) const;
  // Requests executed on the QP by operation class (shm::OpClass): send, write, read, atomic.
  bool read_rx_requests(uint64_t (&requests)[4]) const;

 private:
  unsigned char* base_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace vrdma::daemon
