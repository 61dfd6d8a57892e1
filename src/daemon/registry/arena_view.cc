#include "daemon/registry/arena_view.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include <atomic>

#include "shm/layout.h"
#include "shm/sigbus_guard.h"

namespace vrdma::daemon {

namespace {

template <typename T>
T* at(unsigned char* base, uint64_t offset) {
  return reinterpret_cast<T*>(base + offset);
}

using shm::guarded;

}  // namespace

int ArenaView::map(int fd, uint64_t size) {
  unmap();
  shm::install_sigbus_guard();
  if (size < sizeof(shm::ArenaHeader) || size > shm::kArenaSize) return EINVAL;
  struct stat st {};
  if (::fstat(fd, &st) < 0) return errno;
  if (!S_ISREG(st.st_mode) || static_cast<uint64_t>(st.st_size) < size) return EINVAL;
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return errno == ENOMEM ? ENOMEM : EINVAL;
  struct Ctx {
    const shm::ArenaHeader* h;
    uint32_t magic, version;
  } ctx{static_cast<const shm::ArenaHeader*>(p), 0, 0};
  bool ok = guarded(
      [](void* c) {
        auto* x = static_cast<Ctx*>(c);
        // Plain fields the client may still be writing: read them atomically.
        x->magic = __atomic_load_n(&x->h->magic, __ATOMIC_ACQUIRE);
        x->version = __atomic_load_n(&x->h->version, __ATOMIC_RELAXED);
      },
      &ctx);
  if (!ok || ctx.magic != shm::kArenaMagic || ctx.version != shm::kArenaVersion) {
    ::munmap(p, size);
    return EINVAL;
  }
  base_ = static_cast<unsigned char*>(p);
  size_ = size;
  return 0;
}

void ArenaView::unmap() {
  if (base_) ::munmap(base_, size_);
  base_ = nullptr;
  size_ = 0;
}

bool ArenaView::qp_offset_ok(uint64_t offset) const {
  return base_ && offset % alignof(shm::QpShared) == 0 &&
         shm::offset_ok(size_, offset, sizeof(shm::QpShared));
}

bool ArenaView::mark_dead() {
  if (!base_) return false;
  return guarded(
      [](void* b) {
        at<shm::ArenaHeader>(static_cast<unsigned char*>(b), 0)
            ->dead.store(1, std::memory_order_release);
      },
      base_);
}

bool ArenaView::mark_qp_gone(uint64_t offset) {
  if (!qp_offset_ok(offset)) return false;
  return guarded(
      [](void* q) {
        auto* qp = static_cast<shm::QpShared*>(q);
        qp->state.store(IBV_QPS_ERR, std::memory_order_release);
        qp->gone.store(1, std::memory_order_release);
      },
      at<shm::QpShared>(base_, offset));
}

bool ArenaView::read_qp(uint64_t offset, QpSnapshot* out) const {
  if (!qp_offset_ok(offset)) return false;
  struct Ctx {
    const shm::QpShared* qp;
    QpSnapshot snap;
  } ctx{at<const shm::QpShared>(base_, offset), {}};
  bool ok = guarded(
      [](void* c) {
        auto* x = static_cast<Ctx*>(c);
        const auto& k = x->qp->counters;
        x->snap.state = x->qp->state.load(std::memory_order_acquire);
        x->snap.tx_ops = k.tx_ops.load(std::memory_order_relaxed);
        x->snap.tx_bytes = k.tx_bytes.load(std::memory_order_relaxed);
        x->snap.rx_ops = k.rx_ops.load(std::memory_order_relaxed);
        x->snap.rx_bytes = k.rx_bytes.load(std::memory_order_relaxed);
        x->snap.errors = k.errors.load(std::memory_order_relaxed);
      },
      &ctx);
  if (ok) *out = ctx.snap;
  return ok;
}

}  // namespace vrdma::daemon
