// rpoll and rselect over any mix of rsockets and ordinary descriptors. rsockets are checked
// (their completions taken), then polled briefly; then the thread sleeps in one poll() on the
// ordinary descriptors and on what stands behind each rsocket (completion and event channels,
// accept queue) plus its own wake-up eventfd, which other threads taking a socket's
// completions write. Events that an application does not see (credits, control messages) send
// it back to sleep.
#include <errno.h>
#include <limits.h>
#include <sys/select.h>

#include <vector>

#include "../export.h"
#include "socket.h"

namespace vrdma::rsock {

namespace {

constexpr int64_t kSpinNs = 20000;

struct Span {
  int first = 0, count = 0;  // the socket's descriptors in the kernel poll set
};

// Per thread, reused: no allocation once grown.
thread_local std::vector<Socket*> t_socks;
thread_local std::vector<pollfd> t_kfds;
thread_local std::vector<nfds_t> t_owner;
thread_local std::vector<Span> t_spans;
thread_local std::vector<Waiter> t_waiters;

// Readiness of the rsockets (after their completions) and, with `ordinary`, of the other
// descriptors (one poll() without timeout). Returns the number of entries with events.
int check(pollfd* fds, nfds_t n, bool ordinary) {
  auto& k = t_kfds;
  auto& owner = t_owner;
  k.clear();
  owner.clear();
  for (nfds_t i = 0; i < n; ++i) {
    if (Socket* s = t_socks[i]) {
      std::lock_guard lock(s->mu);
      fds[i].revents = poll_events(*s, fds[i].events);
    } else if (ordinary) {
      k.push_back(pollfd{fds[i].fd, fds[i].events, 0});
      owner.push_back(i);
    }
  }
  if (!k.empty()) {
    if (::poll(k.data(), k.size(), 0) < 0) return -1;
    for (size_t j = 0; j < k.size(); ++j) fds[owner[j]].revents = k[j].revents;
  }
  int cnt = 0;
  for (nfds_t i = 0; i < n; ++i) cnt += fds[i].revents != 0;
  return cnt;
}

void unregister(Socket& s, Waiter& w) {
  if (w.prev)
    w.prev->next = w.next;
  else
    s.waiters = w.next;
  if (w.next) w.next->prev = w.prev;
  w.next = w.prev = nullptr;
}

// One sleep over everything. Returns -1 (errno set) on a poll() error, else 0.
int sleep_all(pollfd* fds, nfds_t n, int timeout_ms, bool& ready) {
  auto& k = t_kfds;
  auto& owner = t_owner;
  auto& spans = t_spans;
  auto& ws = t_waiters;
  k.clear();
  owner.clear();
  spans.assign(n, Span{});
  ws.assign(n, Waiter{-1, nullptr, nullptr});
  int wake = thread_wake_fd();
  ready = false;
  for (nfds_t i = 0; i < n && !ready; ++i) {
    Socket* s = t_socks[i];
    if (!s) {
      k.push_back(pollfd{fds[i].fd, fds[i].events, 0});
      owner.push_back(i);
      continue;
    }
    std::lock_guard lock(s->mu);
    prepare_sleep(*s);
    if (poll_events(*s, fds[i].events)) {
      ready = true;
      break;
    }
    pollfd tmp[4];
    int m = wait_fds(*s, tmp);
    spans[i] = Span{int(k.size()), m};
    for (int j = 0; j < m; ++j) {
      k.push_back(tmp[j]);
      owner.push_back(i);
    }
    if (wake >= 0) {
      ws[i] = Waiter{wake, s->waiters, nullptr};
      if (s->waiters) s->waiters->prev = &ws[i];
      s->waiters = &ws[i];
    }
  }
  int r = 0, err = 0;
  if (!ready) {
    if (wake >= 0) k.push_back(pollfd{wake, POLLIN, 0});
    r = ::poll(k.data(), k.size(), timeout_ms);
    err = errno;
    if (wake >= 0 && r > 0 && k.back().revents) drain(wake);
  }
  for (nfds_t i = 0; i < n; ++i) {
    Socket* s = t_socks[i];
    if (!s) continue;
    std::lock_guard lock(s->mu);
    if (ws[i].fd >= 0) unregister(*s, ws[i]);
    if (r > 0 && spans[i].count) after_wake(*s, &k[spans[i].first], spans[i].count);
  }
  if (r < 0) {
    errno = err;
    return -1;
  }
  for (size_t j = 0; j < owner.size() && r > 0; ++j)
    if (!t_socks[owner[j]]) fds[owner[j]].revents = k[j].revents;
  return 0;
}

}  // namespace

}  // namespace vrdma::rsock

using namespace vrdma::rsock;

extern "C" {

VRDMA_EXPORT int rpoll(struct pollfd* fds, nfds_t nfds, int timeout) {
  if (nfds && !fds) return fail(EFAULT);
  auto& socks = t_socks;
  socks.assign(nfds, nullptr);
  bool any = false;
  for (nfds_t i = 0; i < nfds; ++i) {
    fds[i].revents = 0;
    socks[i] = fds[i].fd >= 0 ? lookup(fds[i].fd) : nullptr;
    any |= socks[i] != nullptr;
  }
  if (!any) return ::poll(fds, nfds, timeout);
  int64_t start = now_ns();
  int64_t deadline = timeout < 0 ? -1 : start + int64_t(timeout) * 1000000;
  int cnt = check(fds, nfds, true);
  if (cnt || timeout == 0) return cnt;
  while (now_ns() - start < kSpinNs) {
    if (check(fds, nfds, false) > 0) return check(fds, nfds, true);
    cpu_relax();
  }
  for (;;) {
    int left = -1;
    if (deadline >= 0) {
      int64_t now = now_ns();
      if (now >= deadline) return 0;
      left = int((deadline - now + 999999) / 1000000);
    }
    bool ready = false;
    if (sleep_all(fds, nfds, left, ready) < 0) return -1;
    if (ready) return check(fds, nfds, true);
    cnt = check(fds, nfds, false);
    if (cnt) return cnt;
  }
}

VRDMA_EXPORT int rselect(int nfds, fd_set* readfds, fd_set* writefds, fd_set* exceptfds,
                         struct timeval* timeout) {
  if (nfds < 0 || nfds > FD_SETSIZE) return fail(EINVAL);
  int ms = -1;
  if (timeout) {
    if (timeout->tv_sec < 0 || timeout->tv_usec < 0) return fail(EINVAL);
    long long v = timeout->tv_sec * 1000LL + (timeout->tv_usec + 999) / 1000;
    ms = v > INT_MAX ? INT_MAX : int(v);
  }
  thread_local std::vector<pollfd> p;
  p.clear();
  for (int fd = 0; fd < nfds; ++fd) {
    short ev = 0;
    if (readfds && FD_ISSET(fd, readfds)) ev |= POLLIN;
    if (writefds && FD_ISSET(fd, writefds)) ev |= POLLOUT;
    if (exceptfds && FD_ISSET(fd, exceptfds)) ev |= POLLPRI;
    if (ev) p.push_back(pollfd{fd, ev, 0});
  }
  int rc = rpoll(p.data(), p.size(), ms);
  if (rc < 0) return -1;
  for (const pollfd& e : p)
    if (e.revents & POLLNVAL) return fail(EBADF);
  if (readfds) FD_ZERO(readfds);
  if (writefds) FD_ZERO(writefds);
  if (exceptfds) FD_ZERO(exceptfds);
  int cnt = 0;
  for (const pollfd& e : p) {
    if ((e.events & POLLIN) && (e.revents & (POLLIN | POLLHUP | POLLERR))) {
      FD_SET(e.fd, readfds);
      ++cnt;
    }
    if ((e.events & POLLOUT) && (e.revents & (POLLOUT | POLLERR))) {
      FD_SET(e.fd, writefds);
      ++cnt;
    }
    if ((e.events & POLLPRI) && (e.revents & POLLPRI)) {
      FD_SET(e.fd, exceptfds);
      ++cnt;
    }
  }
  return cnt;
}

}  // extern "C"
