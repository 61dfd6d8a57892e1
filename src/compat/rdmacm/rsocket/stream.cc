// The byte stream: rsend, rwrite, rsendmsg, ... and rrecv, rread, rrecvmsg, ... over the
// data path of transfer.cc. Blocking calls move everything (sends) or wait for the first byte
// (receives, MSG_WAITALL: for all of it); non-blocking ones move what they can or fail with
// EAGAIN. A peer that shut down gives end of file after its data; sending to it fails with
// EPIPE; a broken connection fails with ECONNRESET.
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <string.h>

#include "../export.h"
#include "socket.h"

namespace vrdma::rsock {

namespace {

constexpr int kSendFlags = MSG_DONTWAIT | MSG_NOSIGNAL | MSG_MORE | MSG_WAITALL | MSG_EOR;
constexpr int kRecvFlags = MSG_DONTWAIT | MSG_PEEK | MSG_WAITALL | MSG_NOSIGNAL | MSG_CMSG_CLOEXEC;

// Total length of an iovec array, or -1 (EINVAL) if it is not usable.
ssize_t iov_total(const iovec* iov, int n) {
  if (n < 0 || n > IOV_MAX || (n && !iov)) return -1;
  size_t total = 0;
  for (int i = 0; i < n; ++i) {
    if (iov[i].iov_len && !iov[i].iov_base) return -1;
    if (iov[i].iov_len > SSIZE_MAX - total) return -1;
    total += iov[i].iov_len;
  }
  return static_cast<ssize_t>(total);
}

// A connection attempt under way finishes first; blocking sockets wait for it.
int await_connected(Socket& s, std::unique_lock<std::mutex>& lk, bool nonblock) {
  if (s.state == State::kConnecting) {
    int r = drive_connect(s);
    if (r == EINPROGRESS && !nonblock) {
      if (wait_until(s, lk, false, [](Socket& x) { return drive_connect(x) != EINPROGRESS; }) ==
          EINTR)
        return EINTR;
      r = drive_connect(s);
    }
    if (r) return r == EINPROGRESS ? EAGAIN : r;
  }
  return s.state == State::kConnected ? 0 : ENOTCONN;
}

// Copies unread bytes into the iovec from byte `skip` on; consumes them unless peeking.
size_t take(Socket& s, const iovec* iov, int n, size_t skip, bool peek) {
  int vi = 0;
  while (vi < n && skip >= iov[vi].iov_len) skip -= iov[vi++].iov_len;
  size_t voff = skip, copied = 0;
  uint64_t mask = s.rmsg.size() - 1;
  uint64_t h = s.rm_head;
  uint32_t used = s.head_used;
  while (vi < n && h != s.rm_tail) {
    const RxMsg& m = s.rmsg[h & mask];
    if (m.len == used) {  // an IO mapping record, or a message read to its end
      ++h;
      used = 0;
      continue;
    }
    size_t c = m.len - used;
    if (c > iov[vi].iov_len - voff) c = iov[vi].iov_len - voff;
    memcpy(static_cast<uint8_t*>(iov[vi].iov_base) + voff, s.rbuf + m.off + used, c);
    copied += c;
    used += static_cast<uint32_t>(c);
    voff += c;
    if (voff == iov[vi].iov_len) {
      ++vi;
      voff = 0;
    }
  }
  if (!peek) {
    consume(s, static_cast<uint32_t>(copied));
    if (s.rx_freed - s.rx_reported >= s.ring / 4) return_credit(s);
  }
  return copied;
}

}  // namespace

ssize_t send_iov(int fd, const iovec* iov, int n, int flags) {
  Socket* s = lookup(fd);
  if (!s) return fail(EBADF);
  if (flags & MSG_OOB) return fail(EOPNOTSUPP);
  if (flags & ~kSendFlags) return fail(EINVAL);
  ssize_t total = iov_total(iov, n);
  if (total < 0) return fail(EINVAL);
  std::unique_lock lk(s->mu);
  bool nonblock = (s->fl & O_NONBLOCK) || (flags & MSG_DONTWAIT);
  if (int e = await_connected(*s, lk, nonblock)) return fail(e);
  flush_iomaps(*s);
  size_t sent = 0;
  int vi = 0;
  size_t voff = 0;
  while (sent < size_t(total)) {
    if (vi < n && voff == iov[vi].iov_len) {
      ++vi;
      voff = 0;
      continue;
    }
    int e = s->err ? s->err : (s->wr_shut || s->peer_closed) ? EPIPE : 0;
    if (e) {
      if (sent) break;
      return fail(e);
    }
    uint32_t want =
        iov[vi].iov_len - voff > kMaxPiece ? kMaxPiece : uint32_t(iov[vi].iov_len - voff);
    uint32_t got =
        send_message(*s, Op::kData, static_cast<const uint8_t*>(iov[vi].iov_base) + voff, want);
    if (got) {
      sent += got;
      voff += got;
      continue;
    }
    if (sent && nonblock) break;
    if (int w = wait_until(*s, lk, nonblock, writable)) {
      if (sent) break;
      return fail(w);
    }
  }
  return static_cast<ssize_t>(sent);
}

ssize_t recv_iov(int fd, const iovec* iov, int n, int flags) {
  Socket* s = lookup(fd);
  if (!s) return fail(EBADF);
  if (flags & MSG_OOB) return fail(EOPNOTSUPP);
  if (flags & ~kRecvFlags) return fail(EINVAL);
  ssize_t total = iov_total(iov, n);
  if (total < 0) return fail(EINVAL);
  std::unique_lock lk(s->mu);
  bool nonblock = (s->fl & O_NONBLOCK) || (flags & MSG_DONTWAIT);
  bool peek = flags & MSG_PEEK;
  if (int e = await_connected(*s, lk, nonblock)) return fail(e);
  if (total == 0 || s->rd_shut) return 0;
  size_t got = 0;
  for (;;) {
    progress(*s);
    got += take(*s, iov, n, peek ? 0 : got, peek);
    if (got == size_t(total) || (got && (!(flags & MSG_WAITALL) || peek))) break;
    if (s->rm_head == s->rm_tail && (s->peer_fin || s->err)) break;  // nothing more comes
    if (int w = wait_until(*s, lk, nonblock, readable)) {
      if (got) break;
      return fail(w);
    }
    if (peek) got = 0;
  }
  if (!got && s->err && !s->peer_fin) return fail(s->err);
  return static_cast<ssize_t>(got);
}

}  // namespace vrdma::rsock

using namespace vrdma::rsock;

extern "C" {

VRDMA_EXPORT ssize_t rsend(int socket, const void* buf, size_t len, int flags) {
  iovec v{const_cast<void*>(buf), len};
  return send_iov(socket, &v, 1, flags);
}

VRDMA_EXPORT ssize_t rsendto(int socket, const void* buf, size_t len, int flags,
                             const struct sockaddr* /*dest_addr*/, socklen_t /*addrlen*/) {
  // A connected stream ignores the destination, as TCP does.
  return rsend(socket, buf, len, flags);
}

VRDMA_EXPORT ssize_t rsendmsg(int socket, const struct msghdr* msg, int flags) {
  if (!msg) return fail(EFAULT);
  if (msg->msg_control && msg->msg_controllen) return fail(EOPNOTSUPP);
  return send_iov(socket, msg->msg_iov, static_cast<int>(msg->msg_iovlen), flags);
}

VRDMA_EXPORT ssize_t rwrite(int socket, const void* buf, size_t count) {
  return rsend(socket, buf, count, 0);
}

VRDMA_EXPORT ssize_t rwritev(int socket, const struct iovec* iov, int iovcnt) {
  return send_iov(socket, iov, iovcnt, 0);
}

VRDMA_EXPORT ssize_t rrecv(int socket, void* buf, size_t len, int flags) {
  iovec v{buf, len};
  return recv_iov(socket, &v, 1, flags);
}

VRDMA_EXPORT ssize_t rrecvfrom(int socket, void* buf, size_t len, int flags,
                               struct sockaddr* src_addr, socklen_t* addrlen) {
  ssize_t n = rrecv(socket, buf, len, flags);
  if (n >= 0 && src_addr && addrlen) rgetpeername(socket, src_addr, addrlen);
  return n;
}

VRDMA_EXPORT ssize_t rrecvmsg(int socket, struct msghdr* msg, int flags) {
  if (!msg) return fail(EFAULT);
  ssize_t n = recv_iov(socket, msg->msg_iov, static_cast<int>(msg->msg_iovlen), flags);
  if (n >= 0) {
    // As for TCP: no ancillary data, no address, no flags.
    msg->msg_controllen = 0;
    msg->msg_namelen = 0;
    msg->msg_flags = 0;
  }
  return n;
}

VRDMA_EXPORT ssize_t rread(int socket, void* buf, size_t count) {
  return rrecv(socket, buf, count, 0);
}

VRDMA_EXPORT ssize_t rreadv(int socket, const struct iovec* iov, int iovcnt) {
  return recv_iov(socket, iov, iovcnt, 0);
}

}  // extern "C"
