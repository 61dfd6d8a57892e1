#include "daemon/arena.h"

#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include <atomic>
#include <mutex>

#include "engine/shm_layout.h"

namespace vrdma::daemon {

namespace {

thread_local sigjmp_buf* t_guard = nullptr;
struct sigaction g_previous_bus {};

void on_sigbus(int sig, siginfo_t* info, void* ctx) {
  if (sigjmp_buf* jb = t_guard) siglongjmp(*jb, 1);
  // Not ours: behave as if we were never installed.
  if (g_previous_bus.sa_flags & SA_SIGINFO) {
    if (g_previous_bus.sa_sigaction) return g_previous_bus.sa_sigaction(sig, info, ctx);
  } else if (g_previous_bus.sa_handler != SIG_DFL && g_previous_bus.sa_handler != SIG_IGN &&
             g_previous_bus.sa_handler != nullptr) {
    return g_previous_bus.sa_handler(sig);
  }
  signal(sig, SIG_DFL);
  raise(sig);
}

// Runs fn(ctx); returns false if it raised SIGBUS. fn must not allocate or hold locks:
// a fault unwinds it with siglongjmp.
bool guarded(void (*fn)(void*), void* ctx) {
  sigjmp_buf jb;
  sigjmp_buf* volatile previous = t_guard;
  if (sigsetjmp(jb, 1) != 0) {
    t_guard = previous;
    return false;
  }
  t_guard = &jb;
  fn(ctx);
  t_guard = previous;
  return true;
}

template <typename T>
T* at(unsigned char* base, uint64_t offset) {
  return reinterpret_cast<T*>(base + offset);
}

}  // namespace

void install_sigbus_guard() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa {};
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGBUS, &sa, &g_previous_bus);
  });
}

int ArenaMap::map(int fd, uint64_t size) {
  unmap();
  install_sigbus_guard();
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

void ArenaMap::unmap() {
  if (base_) ::munmap(base_, size_);
  base_ = nullptr;
  size_ = 0;
}

bool ArenaMap::qp_offset_ok(uint64_t offset) const {
  return base_ && offset % alignof(shm::QpShared) == 0 &&
         shm::offset_ok(size_, offset, sizeof(shm::QpShared));
}

bool ArenaMap::mark_dead() {
  if (!base_) return false;
  return guarded(
      [](void* b) {
        at<shm::ArenaHeader>(static_cast<unsigned char*>(b), 0)
            ->dead.store(1, std::memory_order_release);
      },
      base_);
}

bool ArenaMap::mark_qp_gone(uint64_t offset) {
  if (!qp_offset_ok(offset)) return false;
  return guarded(
      [](void* q) {
        auto* qp = static_cast<shm::QpShared*>(q);
        qp->state.store(IBV_QPS_ERR, std::memory_order_release);
        qp->gone.store(1, std::memory_order_release);
      },
      at<shm::QpShared>(base_, offset));
}

bool ArenaMap::read_qp(uint64_t offset, QpSnapshot* out) const {
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
