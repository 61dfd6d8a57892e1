#include "daemon/registry/arena_view.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include <atomic>

#include "shm/layout.h"
#include "shm/rings.h"
#include "shm/shared_file.h"
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
  if (size < sizeof(shm::ArenaHeader) || size > shm::kMaxArenaSize) return EINVAL;
  void* p = nullptr;
  uint64_t file_size = 0;
  if (int e = shm::map_sealed(fd, PROT_READ | PROT_WRITE, shm::kMaxArenaSize, p, file_size))
    return e == EPERM || e == ENOMEM ? e : EINVAL;
  if (file_size < size) {
    ::munmap(p, file_size);
    return EINVAL;
  }
  size = file_size;
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

bool ArenaView::bump_mcast_gen() {
  if (!base_) return false;
  return guarded(
      [](void* b) {
        at<shm::ArenaHeader>(static_cast<unsigned char*>(b), 0)
            ->mcast_gen.fetch_add(1, std::memory_order_release);
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

uint32_t ArenaView::page_move_guard() const {
  if (!base_) return shm::kGuardUnknown;
  struct Ctx {
    const shm::ArenaHeader* h;
    uint32_t guard;
  } ctx{at<const shm::ArenaHeader>(base_, 0), shm::kGuardUnknown};
  bool ok = guarded(
      [](void* c) {
        auto* x = static_cast<Ctx*>(c);
        x->guard = x->h->page_move_guard.load(std::memory_order_relaxed);
      },
      &ctx);
  return ok && ctx.guard <= shm::kGuardThreads ? ctx.guard : shm::kGuardUnknown;
}

bool ArenaView::cq_overflowed(uint64_t offset) const {
  if (!base_ || offset == 0 || offset % alignof(shm::CqShared) != 0 ||
      !shm::offset_ok(size_, offset, sizeof(shm::CqShared)))
    return false;
  struct Ctx {
    const shm::CqShared* cq;
    uint32_t overflow;
  } ctx{at<const shm::CqShared>(base_, offset), 0};
  bool ok = guarded(
      [](void* c) {
        auto* x = static_cast<Ctx*>(c);
        x->overflow = x->cq->overflow.load(std::memory_order_relaxed);
      },
      &ctx);
  return ok && ctx.overflow != 0;
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
        x->snap.errors = k.errors.load(std::memory_order_relaxed);
        x->snap.dropped = k.dropped.load(std::memory_order_relaxed);
        x->snap.send_cq_offset = x->qp->send_cq_offset;
        x->snap.recv_cq_offset = x->qp->recv_cq_offset;
        x->snap.rnr_retries = k.rnr_retries.load(std::memory_order_relaxed);
        x->snap.transport_retries = k.transport_retries.load(std::memory_order_relaxed);
        x->snap.recv_ok = k.recv_ok.load(std::memory_order_relaxed);
        x->snap.recv_len_err = k.recv_len_err.load(std::memory_order_relaxed);
        x->snap.recv_prot_err = k.recv_prot_err.load(std::memory_order_relaxed);
        for (uint32_t i = 0; i < shm::kOpClasses; ++i) {
          x->snap.class_ops[i] = k.class_ops[i].load(std::memory_order_relaxed);
          x->snap.class_bytes[i] = k.class_bytes[i].load(std::memory_order_relaxed);
        }
        for (uint32_t i = 0; i < shm::kWcStatusSlots; ++i)
          x->snap.completions[i] = k.completions[i].load(std::memory_order_relaxed);
      },
      &ctx);
  if (ok) *out = ctx.snap;
  return ok;
}

bool ArenaView::read_mr(uint32_t index, uint32_t key, shm::MrEntry* out) const {
  if (!base_ || index == 0 || index >= shm::kMrSlots) return false;
  struct Ctx {
    const unsigned char* base;
    uint64_t size;
    uint32_t index, key;
    shm::MrEntry* out;
    bool ok;
  } ctx{base_, size_, index, key, out, false};
  bool ran = guarded(
      [](void* c) {
        auto* x = static_cast<Ctx*>(c);
        const auto* h = reinterpret_cast<const shm::ArenaHeader*>(x->base);
        uint32_t table = __atomic_load_n(&h->mr_table_offset, __ATOMIC_RELAXED);
        uint32_t slots = __atomic_load_n(&h->mr_slots, __ATOMIC_RELAXED);
        if (slots != shm::kMrSlots ||
            !shm::offset_ok(x->size, table, uint64_t(slots) * sizeof(shm::MrEntry)) ||
            table % alignof(shm::MrEntry))
          return;
        const auto* e = reinterpret_cast<const shm::MrEntry*>(x->base + table) + x->index;
        // Copy, then check the key and generation did not change meanwhile.
        uint64_t kg = e->key_gen.load(std::memory_order_acquire);
        if (static_cast<uint32_t>(kg) != x->key) return;
        shm::MrEntry& o = *x->out;
        o.access = e->access;
        o.nseg = e->nseg;
        o.iova = e->iova;
        o.length = e->length;
        o.va = e->va;
        o.map_start = e->map_start;
        o.map_length = e->map_length;
        for (uint32_t i = 0; i < shm::kMaxMrSegments; ++i) o.seg[i] = e->seg[i];
        std::atomic_thread_fence(std::memory_order_acquire);
        if (e->key_gen.load(std::memory_order_relaxed) != kg) return;
        o.key_gen.store(kg, std::memory_order_relaxed);
        x->ok = true;
      },
      &ctx);
  return ran && ctx.ok;
}

bool ArenaView::receive_points_into(uint64_t qp_offset, uint32_t key) const {
  if (!qp_offset_ok(qp_offset)) return false;
  struct Ctx {
    const unsigned char* base;
    uint64_t size, qp_offset;
    uint32_t key;
    bool found;
  } ctx{base_, size_, qp_offset, key, false};
  bool ran = guarded(
      [](void* c) {
        auto* x = static_cast<Ctx*>(c);
        const auto* qp = reinterpret_cast<const shm::QpShared*>(x->base + x->qp_offset);
        uint32_t off = __atomic_load_n(&qp->recv_table_offset, __ATOMIC_RELAXED);
        if (!shm::offset_ok(x->size, off, sizeof(shm::RecvTable)) || off % shm::kCacheLine) return;
        const auto* t = reinterpret_cast<const shm::RecvTable*>(x->base + off);
        uint32_t cap = __atomic_load_n(&t->capacity, __ATOMIC_RELAXED);
        uint32_t max_sge = __atomic_load_n(&t->max_sge, __ATOMIC_RELAXED);
        uint32_t slot_size = __atomic_load_n(&t->slot_size, __ATOMIC_RELAXED);
        if (!shm::is_pow2(cap) || cap > 16384 || max_sge > shm::kMaxRecvSge ||
            slot_size != shm::recv_slot_size(max_sge) ||
            !shm::offset_ok(x->size, off, shm::recv_table_bytes(cap, max_sge)))
          return;
        for (uint32_t i = 0; i < cap; ++i) {
          const auto* s = reinterpret_cast<const shm::RecvSlot*>(t->slots + uint64_t(i) * slot_size);
          if (s->tag.load(std::memory_order_acquire) == 0) continue;
          uint32_t n = __atomic_load_n(&s->num_sge, __ATOMIC_RELAXED);
          if (n > max_sge) n = max_sge;
          for (uint32_t j = 0; j < n; ++j) {
            if (__atomic_load_n(&s->sge[j].lkey, __ATOMIC_RELAXED) == x->key) {
              x->found = true;
              return;
            }
          }
        }
      },
      &ctx);
  return ran && ctx.found;
}

}  // namespace vrdma::daemon
