// The table from descriptor to rsocket: two levels of arrays indexed by the descriptor, read
// without a lock (one acquire load per level), changed under a mutex. Pages are never freed.
#include <errno.h>

#include <atomic>
#include <mutex>
#include <new>

#include "socket.h"

namespace vrdma::rsock {

namespace {

constexpr int kPageBits = 10;
constexpr int kPageSize = 1 << kPageBits;
constexpr int kPages = 1 << 12;  // descriptors below 4 Mi

struct Page {
  std::atomic<Socket*> slot[kPageSize];
};

std::atomic<Page*> g_pages[kPages];
std::mutex g_mu;

}  // namespace

Socket* lookup(int fd) {
  if (fd < 0 || fd >= kPages * kPageSize) return nullptr;
  Page* p = g_pages[fd >> kPageBits].load(std::memory_order_acquire);
  return p ? p->slot[fd & (kPageSize - 1)].load(std::memory_order_acquire) : nullptr;
}

int insert(Socket* s) {
  int fd = s->fd;
  if (fd < 0 || fd >= kPages * kPageSize) return EMFILE;
  std::lock_guard lock(g_mu);
  std::atomic<Page*>& top = g_pages[fd >> kPageBits];
  Page* p = top.load(std::memory_order_relaxed);
  if (!p) {
    p = new (std::nothrow) Page();
    if (!p) return ENOMEM;
    top.store(p, std::memory_order_release);
  }
  p->slot[fd & (kPageSize - 1)].store(s, std::memory_order_release);
  return 0;
}

void remove(Socket* s) {
  int fd = s->fd;
  if (fd < 0 || fd >= kPages * kPageSize) return;
  std::lock_guard lock(g_mu);
  Page* p = g_pages[fd >> kPageBits].load(std::memory_order_relaxed);
  if (p && p->slot[fd & (kPageSize - 1)].load(std::memory_order_relaxed) == s)
    p->slot[fd & (kPageSize - 1)].store(nullptr, std::memory_order_release);
}

}  // namespace vrdma::rsock
