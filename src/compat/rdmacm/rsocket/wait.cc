// Waiting on a socket: arming its CQ, sleeping in poll() on its completion and event channels
// and on the eventfd of the sleeping thread, taking what woke it, and waking the other threads
// asleep on the same socket when one of them took completions they may be waiting for.
#include <errno.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "socket.h"

namespace vrdma::rsock {

namespace {

constexpr uint32_t kAckBatch = 16;  // completion events acknowledged together

struct ThreadFd {
  int fd = -1;
  bool tried = false;
  ~ThreadFd() {
    if (fd >= 0) ::close(fd);
  }
};
thread_local ThreadFd t_wake;

}  // namespace

int64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

void drain(int fd) {
  uint64_t v;
  [[maybe_unused]] ssize_t n = ::read(fd, &v, sizeof(v));
}

int thread_wake_fd() {
  if (!t_wake.tried) {
    t_wake.tried = true;
    t_wake.fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  }
  return t_wake.fd;
}

void kick_waiters(Socket& s, const Waiter* self) {
  for (Waiter* w = s.waiters; w; w = w->next) {
    if (w == self) continue;
    uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(w->fd, &one, sizeof(one));
  }
}

void prepare_sleep(Socket& s) {
  if (s.state != State::kConnected || !s.cq) return;
  if (!s.cq_armed) {
    ibv_req_notify_cq(s.cq, 0);
    s.cq_armed = true;
  }
  progress(s);
}

int wait_fds(const Socket& s, pollfd* out) {
  switch (s.state) {
    case State::kConnected:
      out[0] = pollfd{s.cc->fd, POLLIN, 0};
      out[1] = pollfd{s.ch->fd, POLLIN, 0};
      return 2;
    case State::kConnecting:
      out[0] = pollfd{s.ch->fd, POLLIN, 0};
      return 1;
    case State::kListening:
      out[0] = pollfd{accept_wait_fd(s), POLLIN, 0};
      return 1;
    default:
      return 0;
  }
}

void after_wake(Socket& s, const pollfd* fds, int n) {
  for (int i = 0; i < n; ++i) {
    if (!fds[i].revents || s.state != State::kConnected) continue;
    if (fds[i].fd == s.cc->fd) {
      ibv_cq* cq;
      void* ctx;
      if (ibv_get_cq_event(s.cc, &cq, &ctx) == 0) {
        s.cq_armed = false;
        if (++s.unacked >= kAckBatch) {
          ibv_ack_cq_events(s.cq, s.unacked);
          s.unacked = 0;
        }
      }
    } else if (fds[i].fd == s.ch->fd) {
      process_cm(s);
    }
  }
  progress(s);
}

int sleep_once(Socket& s, std::unique_lock<std::mutex>& lk, int timeout_ms) {
  pollfd pf[4];
  int n = wait_fds(s, pf);
  Waiter w{thread_wake_fd(), nullptr, nullptr};
  int total = n;
  if (w.fd >= 0) {
    pf[total++] = pollfd{w.fd, POLLIN, 0};
    w.next = s.waiters;
    if (s.waiters) s.waiters->prev = &w;
    s.waiters = &w;
  }
  lk.unlock();
  int r = ::poll(pf, total, timeout_ms);
  int err = r < 0 ? errno : 0;
  lk.lock();
  if (w.fd >= 0) {
    if (w.prev)
      w.prev->next = w.next;
    else
      s.waiters = w.next;
    if (w.next) w.next->prev = w.prev;
    if (pf[n].revents) drain(w.fd);
  }
  if (r > 0) after_wake(s, pf, n);
  return err;
}

}  // namespace vrdma::rsock
