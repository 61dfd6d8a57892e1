// rsocket, rbind, rshutdown, rclose, rgetsockname, rgetpeername.
#include <errno.h>
#include <fcntl.h>
#include <sched.h>

#include "../export.h"
#include "socket.h"

namespace vrdma::rsock {

namespace {

constexpr int kCloseWaitMs = 2000;  // bounded: a peer that takes nothing cannot hold rclose

// Posts a control message, waiting (bounded) for a send slot. 0 or errno.
int post_ctrl_wait(Socket& s, std::unique_lock<std::mutex>& lk, Op op) {
  if (s.err) return s.err;
  if (post_ctrl(s, op, 0) == 0) return 0;
  int w = wait_until(
      s, lk, false, [](Socket& x) { return x.err || sq_free(x) > 0; }, kCloseWaitMs);
  if (w) return w;
  if (s.err) return s.err;
  return post_ctrl(s, op, 0);
}

// Tells the peer what this side's shutdown means for it: kFin (no more data from here) or
// kClose (nor will this side read).
int send_shutdown(Socket& s, std::unique_lock<std::mutex>& lk) {
  if (s.state != State::kConnected || s.err || s.close_sent) return 0;
  Op op;
  if (s.wr_shut && s.rd_shut) {
    op = Op::kClose;
  } else if (s.wr_shut && !s.fin_sent) {
    op = Op::kFin;
  } else {
    return 0;
  }
  flush_iomaps(s);
  int e = post_ctrl_wait(s, lk, op);
  if (e) return e;
  s.fin_sent = true;
  s.close_sent = op == Op::kClose;
  return 0;
}

}  // namespace

}  // namespace vrdma::rsock

using namespace vrdma::rsock;

extern "C" {

VRDMA_EXPORT int rsocket(int domain, int type, int protocol) {
  int flags = type & (SOCK_NONBLOCK | SOCK_CLOEXEC);
  type &= ~flags;
  if (domain != AF_INET && domain != AF_INET6) return fail(EAFNOSUPPORT);
  // Datagram rsockets are not implemented: SOCK_DGRAM fails here (see README).
  if (type != SOCK_STREAM) return fail(ESOCKTNOSUPPORT);
  if (protocol && protocol != IPPROTO_TCP) return fail(EPROTONOSUPPORT);
  int err = 0;
  Socket* s = new_socket(domain, err);
  if (!s) return fail(err);
  if (flags & SOCK_NONBLOCK) s->fl |= O_NONBLOCK;
  if (int e = insert(s)) {
    destroy_socket(s);
    return fail(e);
  }
  return s->fd;
}

VRDMA_EXPORT int rbind(int socket, const struct sockaddr* addr, socklen_t addrlen) {
  Socket* s = lookup(socket);
  if (!s) return fail(EBADF);
  std::lock_guard lock(s->mu);
  if (s->state != State::kInit) return fail(EINVAL);
  sockaddr_in a;
  if (int e = to_v4(addr, addrlen, s->domain, a)) return fail(e);
  if (rdma_bind_addr(s->id, reinterpret_cast<sockaddr*>(&a))) return fail(errno);
  s->local = s->id->route.addr.src_sin;
  s->state = State::kBound;
  return 0;
}

VRDMA_EXPORT int rshutdown(int socket, int how) {
  Socket* s = lookup(socket);
  if (!s) return fail(EBADF);
  if (how != SHUT_RD && how != SHUT_WR && how != SHUT_RDWR) return fail(EINVAL);
  std::unique_lock lk(s->mu);
  if (s->state == State::kConnecting) drive_connect(*s);
  if (s->state != State::kConnected) return fail(ENOTCONN);
  if (how != SHUT_WR) s->rd_shut = true;
  if (how != SHUT_RD) s->wr_shut = true;
  int e = send_shutdown(*s, lk);
  if (s->waiters) kick_waiters(*s, nullptr);
  return e ? fail(e) : 0;
}

VRDMA_EXPORT int rclose(int socket) {
  Socket* s = lookup(socket);
  if (!s) return fail(EBADF);
  remove(s);
  if (s->state == State::kListening) stop_listening(*s);
  {
    std::unique_lock lk(s->mu);
    progress(*s);
    if (s->state == State::kConnected && !s->err && !s->peer_closed) {
      // Everything sent reaches the peer before the connection goes (unless the peer goes
      // first: then nobody reads it).
      s->rd_shut = s->wr_shut = true;
      if (send_shutdown(*s, lk) == 0)
        wait_until(
            *s, lk, false,
            [](Socket& x) { return x.err || x.peer_closed || x.sq_done == x.sq_posted; },
            kCloseWaitMs);
    }
    s->closing = true;
    if (s->waiters) kick_waiters(*s, nullptr);
    // Threads asleep on the socket leave before it goes (bounded).
    int64_t until = now_ns() + int64_t(kCloseWaitMs) * 1000000;
    while (s->waiters && now_ns() < until) {
      lk.unlock();
      sched_yield();
      lk.lock();
    }
    if (s->id && s->id->qp) rdma_disconnect(s->id);
  }
  destroy_socket(s);
  return 0;
}

VRDMA_EXPORT int rgetsockname(int socket, struct sockaddr* addr, socklen_t* addrlen) {
  Socket* s = lookup(socket);
  if (!s) return fail(EBADF);
  if (!addrlen || (!addr && *addrlen)) return fail(EFAULT);
  std::lock_guard lock(s->mu);
  from_v4(*s, s->local, addr, addrlen);
  return 0;
}

VRDMA_EXPORT int rgetpeername(int socket, struct sockaddr* addr, socklen_t* addrlen) {
  Socket* s = lookup(socket);
  if (!s) return fail(EBADF);
  if (!addrlen || (!addr && *addrlen)) return fail(EFAULT);
  std::lock_guard lock(s->mu);
  if (s->state != State::kConnected) return fail(ENOTCONN);
  from_v4(*s, s->peer, addr, addrlen);
  return 0;
}

}  // extern "C"
