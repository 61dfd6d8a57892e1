#include "engine/thread_stop.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace vrdma {

namespace {

// Nothing here allocates: the threads are listed and examined with system calls into buffers on
// the stack, since another thread may be frozen inside malloc.

constexpr int kMaxThreads = 4096;  // threads held at most (more: the rest are not held)
constexpr int kMaxExempt = 64;
constexpr unsigned kPfIoWorker = 0x10;         // PF_IO_WORKER in /proc/<tid>/stat's flags
constexpr int64_t kAnswerNs = 1'000'000'000;   // how long the threads have to answer
constexpr int64_t kBlockedWaitNs = 5'000'000;  // how long one that blocks the signal has

// What the handler reads: shared by the one stop under way and every thread's handler.
struct Shared {
  std::atomic<uint32_t> gen{0};   // odd while a stop is on
  std::atomic<uint32_t> acks{0};  // answers so far (the stopper waits on it)
  std::atomic<int> count{0};      // entries of tids in use
  std::atomic<pid_t> tids[kMaxThreads];
  std::atomic<uint8_t> answered[kMaxThreads];
};
Shared g_shared;
std::atomic<pid_t> g_exempt[kMaxExempt];
std::atomic<int> g_signal{0};
std::mutex g_stop_mu;  // one stop at a time

long futex(std::atomic<uint32_t>* word, int op, uint32_t val, const timespec* ts = nullptr) {
  return ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, val, ts, nullptr, 0);
}

pid_t current_tid() {
  return static_cast<pid_t>(::syscall(SYS_gettid));
}

void on_signal(int, siginfo_t* si, void*) {
  // Only the stopper's tgkill: anything else sending this signal is ignored.
  if (si->si_code != SI_TKILL || si->si_pid != ::getpid()) return;
  const int saved = errno;
  Shared& s = g_shared;
  const uint32_t gen = s.gen.load(std::memory_order_acquire);
  if (gen & 1) {
    const pid_t me = current_tid();
    const int n = s.count.load(std::memory_order_acquire);
    for (int i = 0; i < n; ++i) {
      if (s.tids[i].load(std::memory_order_relaxed) != me) continue;
      // Everything this thread wrote is visible to the stopper once it sees the answer.
      s.answered[i].store(1, std::memory_order_release);
      s.acks.fetch_add(1, std::memory_order_release);
      futex(&s.acks, FUTEX_WAKE_PRIVATE, 1);
      while (s.gen.load(std::memory_order_acquire) == gen) futex(&s.gen, FUTEX_WAIT_PRIVATE, gen);
      break;
    }
  }
  errno = saved;
}

bool ours(int sig) {
  struct sigaction old {};
  return ::sigaction(sig, nullptr, &old) == 0 && (old.sa_flags & SA_SIGINFO) &&
         old.sa_sigaction == on_signal;
}

// The handler on a real-time signal the program leaves alone (from SIGRTMAX - 1 down): the one
// already chosen while it is still ours, else another. 0: none free.
int handler_signal() {
  int sig = g_signal.load(std::memory_order_relaxed);
  if (sig && ours(sig)) return sig;
  for (sig = SIGRTMAX - 1; sig >= SIGRTMIN + 2; --sig) {
    struct sigaction old {};
    if (::sigaction(sig, nullptr, &old) != 0) continue;
    if (!(old.sa_flags & SA_SIGINFO) && old.sa_handler != SIG_DFL) continue;
    if ((old.sa_flags & SA_SIGINFO) && old.sa_sigaction != on_signal) continue;
    struct sigaction sa {};
    sa.sa_sigaction = on_signal;
    sa.sa_flags = SA_SIGINFO | SA_RESTART | SA_ONSTACK;
    sigfillset(&sa.sa_mask);  // no other handler runs on a held thread
    if (::sigaction(sig, &sa, nullptr) != 0) continue;
    g_signal.store(sig, std::memory_order_relaxed);
    return sig;
  }
  return 0;
}

// Reads a small /proc file into buf (NUL-terminated); false when it cannot.
bool read_small(const char* path, char* buf, size_t size) {
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  size_t n = 0;
  for (;;) {
    ssize_t r = ::read(fd, buf + n, size - 1 - n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    n += static_cast<size_t>(r);
    if (n == size - 1) break;
  }
  ::close(fd);
  buf[n] = '\0';
  return n > 0;
}

// "/proc/self/task/<tid>/<leaf>" into out.
void task_path(pid_t tid, const char* leaf, char* out, size_t size) {
  char digits[16];
  int d = 0;
  for (unsigned v = static_cast<unsigned>(tid); v || d == 0; v /= 10) digits[d++] = '0' + v % 10;
  size_t n = 0;
  auto put = [&](const char* s) {
    while (*s && n + 1 < size) out[n++] = *s++;
  };
  put("/proc/self/task/");
  while (d > 0 && n + 1 < size) out[n++] = digits[--d];
  put("/");
  put(leaf);
  out[n] = '\0';
}

enum class Kind { kStop, kBlocked, kSkip, kCannot };

// Whether the thread can take the signal: kSkip for one that has exited or is an io_uring
// worker (neither runs user code), kCannot for one stopped by a debugger, kBlocked for one
// that blocks the signal for now, kStop otherwise.
Kind examine(pid_t tid, int sig) {
  char path[64], buf[2048];
  task_path(tid, "stat", path, sizeof(path));
  if (!read_small(path, buf, sizeof(buf))) return Kind::kSkip;  // gone
  // pid (comm) state ppid pgrp session tty_nr tpgid flags ...: the fields after the last ')'.
  const char* p = std::strrchr(buf, ')');
  if (!p || p[1] != ' ') return Kind::kCannot;
  const char state = p[2];
  if (state == 'Z' || state == 'X' || state == 'x') return Kind::kSkip;
  if (state == 'T' || state == 't') return Kind::kCannot;
  p += 2;
  for (int field = 3; field < 9 && p; ++field) {
    p = std::strchr(p, ' ');
    if (p) ++p;
  }
  if (p && (std::strtoul(p, nullptr, 10) & kPfIoWorker)) return Kind::kSkip;
  task_path(tid, "status", path, sizeof(path));
  if (!read_small(path, buf, sizeof(buf))) return Kind::kSkip;
  const char* blk = std::strstr(buf, "\nSigBlk:");
  if (!blk) return Kind::kCannot;
  const uint64_t mask = std::strtoull(blk + 8, nullptr, 16);
  return (mask >> (sig - 1)) & 1 ? Kind::kBlocked : Kind::kStop;
}

// The stopper's own record of the listed threads (one stop at a time, under g_stop_mu):
// when to stop waiting for each.
int64_t g_give_up[kMaxThreads];
bool g_blocking[kMaxThreads];
// Threads that blocked the signal for longer than kBlockedWaitNs at a past stop: while they
// still block it they are not waited for again.
constexpr int kMaxBlockers = 16;
pid_t g_blockers[kMaxBlockers];
int g_next_blocker = 0;

bool known_blocker(pid_t tid) {
  for (pid_t b : g_blockers)
    if (b == tid) return true;
  return false;
}

bool exempt(pid_t tid) {
  for (auto& e : g_exempt)
    if (e.load(std::memory_order_relaxed) == tid) return true;
  return false;
}

bool listed(pid_t tid, int n) {
  for (int i = 0; i < n; ++i)
    if (g_shared.tids[i].load(std::memory_order_relaxed) == tid) return true;
  return false;
}

int64_t now_ns() {
  timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1'000'000'000LL + ts.tv_nsec;
}

struct linux_dirent64 {
  uint64_t d_ino;
  int64_t d_off;
  unsigned short d_reclen;
  unsigned char d_type;
  char d_name[];
};

// Signals every thread of the process not yet listed (but `self`, `spared` and the exempt).
// Returns how many it added, or -1 when the threads cannot be listed; clears `held` for a
// thread that cannot be stopped.
int signal_new_threads(int sig, pid_t self, pid_t spared, int64_t deadline, bool& held) {
  Shared& s = g_shared;
  int dir = ::open("/proc/self/task", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return -1;
  alignas(8) char buf[4096];
  int added = 0;
  for (;;) {
    long n = ::syscall(SYS_getdents64, dir, buf, sizeof(buf));
    if (n <= 0) break;
    for (long off = 0; off < n;) {
      auto* d = reinterpret_cast<linux_dirent64*>(buf + off);
      off += d->d_reclen;
      if (d->d_name[0] < '0' || d->d_name[0] > '9') continue;
      const auto tid = static_cast<pid_t>(std::strtol(d->d_name, nullptr, 10));
      const int count = s.count.load(std::memory_order_relaxed);
      if (tid == self || tid == spared || exempt(tid) || listed(tid, count)) continue;
      const Kind k = examine(tid, sig);
      if (k == Kind::kSkip) continue;
      if (k == Kind::kCannot || count == kMaxThreads ||
          (k == Kind::kBlocked && known_blocker(tid))) {
        held = false;
        continue;
      }
      const int64_t now = now_ns();
      g_give_up[count] = k == Kind::kBlocked ? std::min(now + kBlockedWaitNs, deadline) : deadline;
      g_blocking[count] = k == Kind::kBlocked;
      s.tids[count].store(tid, std::memory_order_relaxed);
      s.answered[count].store(0, std::memory_order_relaxed);
      s.count.store(count + 1, std::memory_order_release);
      if (::syscall(SYS_tgkill, ::getpid(), tid, sig) != 0)
        s.answered[count].store(1, std::memory_order_relaxed);  // gone meanwhile
      ++added;
    }
  }
  ::close(dir);
  return added;
}

// Waits until every listed thread answered, is gone or was given up on (which clears `held`).
void wait_answers(bool& held) {
  Shared& s = g_shared;
  const pid_t pid = ::getpid();
  for (;;) {
    const uint32_t seen = s.acks.load(std::memory_order_acquire);
    const int64_t now = now_ns();
    int64_t next = INT64_MAX;
    const int n = s.count.load(std::memory_order_relaxed);
    for (int i = 0; i < n; ++i) {
      if (s.answered[i].load(std::memory_order_acquire)) continue;
      const pid_t tid = s.tids[i].load(std::memory_order_relaxed);
      if (::syscall(SYS_tgkill, pid, tid, 0) != 0) {
        s.answered[i].store(1, std::memory_order_relaxed);  // exited before answering
        continue;
      }
      if (now >= g_give_up[i]) {
        // Not held. Its signal stays pending: when its handler runs, this stop is over (or
        // the thread is not listed in the next one) and it returns at once.
        held = false;
        s.answered[i].store(1, std::memory_order_relaxed);
        if (g_blocking[i]) {
          g_blockers[g_next_blocker] = tid;
          g_next_blocker = (g_next_blocker + 1) % kMaxBlockers;
        }
        continue;
      }
      next = std::min(next, g_give_up[i]);
    }
    if (next == INT64_MAX) return;
    const int64_t left = std::min<int64_t>(next - now, 1'000'000);
    const timespec wait{0, static_cast<long>(left)};
    futex(&s.acks, FUTEX_WAIT_PRIVATE, seen, &wait);
  }
}

}  // namespace

int ThreadStop::signal_number() {
  return g_signal.load(std::memory_order_relaxed);
}

bool ThreadStop::stop(pid_t spared) {
  release();
  g_stop_mu.lock();
  const int sig = handler_signal();
  if (!sig) {
    g_stop_mu.unlock();
    return false;
  }
  Shared& s = g_shared;
  s.count.store(0, std::memory_order_relaxed);
  s.acks.store(0, std::memory_order_relaxed);
  s.gen.fetch_add(1, std::memory_order_acq_rel);  // odd: handlers hold
  active_ = true;
  held_ = true;
  const pid_t self = current_tid();
  const int64_t deadline = now_ns() + kAnswerNs;
  // Threads started meanwhile by threads not yet held are found by the next listing; once a
  // listing finds none, every thread is held (a held thread starts none).
  for (int round = 0; round < 16; ++round) {
    const int added = signal_new_threads(sig, self, spared, deadline, held_);
    if (added < 0) held_ = false;
    if (added <= 0) break;
    wait_answers(held_);
  }
  return true;
}

void ThreadStop::release() {
  if (!active_) return;
  g_shared.gen.fetch_add(1, std::memory_order_acq_rel);  // even: handlers return
  futex(&g_shared.gen, FUTEX_WAKE_PRIVATE, INT_MAX);
  active_ = false;
  g_stop_mu.unlock();
}

ThreadStop::Exempt::Exempt() {
  const pid_t tid = current_tid();
  for (auto& e : g_exempt) {
    pid_t free = 0;
    if (e.compare_exchange_strong(free, tid)) {
      slot_ = &e;
      return;
    }
  }
}

ThreadStop::Exempt::~Exempt() {
  if (slot_) static_cast<std::atomic<pid_t>*>(slot_)->store(0, std::memory_order_relaxed);
}

}  // namespace vrdma
