#include "engine/shared_object.h"

#include <errno.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include "engine/control.h"
#include "engine/memory.h"
#include "shm/shared_file.h"

namespace vrdma {

namespace {
uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) & ~(a - 1); }
}  // namespace

SharedObject::~SharedObject() {
  if (base_) {
    // Whoever still maps it sees a QP that is gone.
    if (ring_.ring) qp()->attrs.gone.store(1, std::memory_order_release);
    ::munmap(base_, size_);
  }
  if (control_ && fd_id_) {
    proto::DropFdReq req{fd_id_};
    control_->call(proto::Op::kDropFd, req);
  }
  if (control_ && notify_fd_id_) {
    proto::DropFdReq req{notify_fd_id_};
    control_->call(proto::Op::kDropFd, req);
  }
  if (fd_ >= 0) ::close(fd_);
  if (notify_fd_ >= 0) ::close(notify_fd_);
}

int SharedObject::create_qp(Control& control, uint32_t owner, uint32_t ring_cap, uint32_t rq_cap,
                            uint32_t max_sge, uint32_t srq_fd_id, bool notify) {
  return create(control, owner, shm::ObjectKind::kQp, ring_cap, srq_fd_id ? 0 : rq_cap, max_sge,
                srq_fd_id, notify);
}

void SharedObject::disown() {
  if (base_) ::munmap(base_, size_);
  base_ = nullptr;
  ring_ = shm::RingView{};
  fd_id_ = 0;
}

int SharedObject::create_srq(Control& control, uint32_t owner, uint32_t rq_cap,
                             uint32_t max_sge) {
  return create(control, owner, shm::ObjectKind::kSrq, 0, rq_cap, max_sge, 0, false);
}

int SharedObject::create(Control& control, uint32_t owner, shm::ObjectKind kind,
                         uint32_t ring_cap, uint32_t rq_cap, uint32_t max_sge, uint32_t srq_fd_id,
                         bool notify) {
  control_ = &control;
  uint64_t off = sizeof(shm::QpObject);
  uint32_t ring_off = 0, rq_off = 0;
  if (ring_cap) {
    ring_off = static_cast<uint32_t>(off);
    off = align_up(off + shm::ring_bytes(ring_cap), shm::kCacheLine);
  }
  if (rq_cap) {
    rq_off = static_cast<uint32_t>(off);
    off = align_up(off + shm::rq_bytes(rq_cap, max_sge), shm::kCacheLine);
  }
  size_ = align_up(off, shm::kPage);
  if (size_ > shm::kMaxObjectSize) return ENOMEM;
  if (int e = shm::create_sealed(kind == shm::ObjectKind::kQp ? "vrdma-qp" : "vrdma-srq", size_,
                                 false, fd_))
    return e;
  void* p = ::mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
  if (p == MAP_FAILED) return errno;
  base_ = static_cast<uint8_t*>(p);
  auto* o = qp();
  o->hdr.magic = shm::kObjectMagic;
  o->hdr.version = shm::kArenaVersion;
  o->hdr.kind = static_cast<uint32_t>(kind);
  o->hdr.owner_client = owner;
  o->hdr.size = size_;
  o->hdr.rq_offset = rq_off;
  o->hdr.srq_fd_id = srq_fd_id;
  o->hdr.ring_offset = ring_off;
  if (ring_cap) {
    auto* ring = reinterpret_cast<shm::RecvRing*>(base_ + ring_off);
    shm::ring_init(ring, ring_cap);
    ring_ = shm::RingView{ring, ring_cap - 1};
  }
  if (rq_cap) {
    auto* rq = reinterpret_cast<shm::RecvQueue*>(base_ + rq_off);
    shm::rq_init(rq, rq_cap, max_sge);
    rq_ = shm::RqView{rq, rq_cap - 1, max_sge, rq->entry_size};
  }
  if (notify) {
    notify_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (notify_fd_ < 0) return errno;
    notify_fd_id_ = allocate_fd_id();
    proto::PutFdReq req{notify_fd_id_, static_cast<uint32_t>(proto::FdKind::kEvent), 0, 0, 0};
    if (int e = control.call(proto::Op::kPutFd, req, nullptr, &notify_fd_, 1)) {
      notify_fd_id_ = 0;
      return e;
    }
    o->hdr.notify_fd_id = notify_fd_id_;
  }
  std::atomic_thread_fence(std::memory_order_release);
  uint32_t id = allocate_fd_id();
  auto fkind = kind == shm::ObjectKind::kQp ? proto::FdKind::kQpObject : proto::FdKind::kSrqObject;
  proto::PutFdReq req{id, static_cast<uint32_t>(fkind), size_, 0, 0};
  if (int e = control.call(proto::Op::kPutFd, req, nullptr, &fd_, 1)) return e;
  fd_id_ = id;
  return 0;
}

}  // namespace vrdma
