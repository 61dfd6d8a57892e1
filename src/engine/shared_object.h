// The owner's side of a QP or SRQ object (shm/layout.h): one sealed memfd that holds what the
// peers reaching this QP need and nothing else, handed to vrdmad (PutFd), which grants it only
// over an agreed connection.
#pragma once

#include <cstdint>

#include "shm/layout.h"
#include "shm/rings.h"

namespace vrdma {

class Control;

class SharedObject {
 public:
  SharedObject() = default;
  ~SharedObject();
  SharedObject(const SharedObject&) = delete;
  SharedObject& operator=(const SharedObject&) = delete;

  // A QP object: attributes, a ring of `ring_cap` receive completions and, unless `srq_fd_id`
  // names the SRQ whose queue the QP uses, a receive queue of `rq_cap` x `max_sge`. With
  // `notify`, an eventfd that senders write when the owner armed the ring. 0 or an errno.
  int create_qp(Control& control, uint32_t owner, uint32_t ring_cap, uint32_t rq_cap,
                uint32_t max_sge, uint32_t srq_fd_id, bool notify);
  // An SRQ object: a receive queue of `rq_cap` x `max_sge`.
  int create_srq(Control& control, uint32_t owner, uint32_t rq_cap, uint32_t max_sge);

  // Unmapped and forgotten without a word to its readers or vrdmad: the object lives on,
  // another process's (a shared XRC_RECV QP handed over).
  void disown();

  uint32_t fd_id() const { return fd_id_; }
  shm::QpObject* qp() const { return reinterpret_cast<shm::QpObject*>(base_); }
  shm::RqView rq() const { return rq_; }
  shm::RingView ring() const { return ring_; }
  int notify_fd() const { return notify_fd_; }
  uint32_t notify_fd_id() const { return notify_fd_id_; }

 private:
  int create(Control& control, uint32_t owner, shm::ObjectKind kind, uint32_t ring_cap,
             uint32_t rq_cap, uint32_t max_sge, uint32_t srq_fd_id, bool notify);

  Control* control_ = nullptr;
  int fd_ = -1;
  uint32_t fd_id_ = 0;
  uint8_t* base_ = nullptr;
  uint64_t size_ = 0;
  shm::RqView rq_;
  shm::RingView ring_;
  int notify_fd_ = -1;
  uint32_t notify_fd_id_ = 0;
};

}  // namespace vrdma
