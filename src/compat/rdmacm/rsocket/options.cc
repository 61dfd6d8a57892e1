// rsetsockopt, rgetsockopt, rfcntl. Buffer and queue sizes take effect when the connection
// is made (a listener passes its options to the sockets it accepts); the SOL_RDMA options are
// refused once a connection is under way, as in rdma-core. Keepalive is recorded: vrdma itself
// fails the connection when the peer's process or host goes away.
#include <errno.h>
#include <fcntl.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <string.h>
#include <sys/time.h>

#include "../export.h"
#include "socket.h"

namespace vrdma::rsock {

namespace {

constexpr int kMaxTcpSeg = 4096;  // the device's MTU

bool endpoint_fixed(const Socket& s) {
  return s.state == State::kConnecting || s.state == State::kConnected || s.state == State::kFailed;
}

uint32_t buffer_size(int v) {
  if (v <= 0) return kMinBuf;
  uint64_t d = uint64_t(v) * 2;  // as Linux: room for bookkeeping
  return d > kMaxRing ? kMaxRing : d < kMinBuf ? kMinBuf : uint32_t(d);
}

int set_socket(Socket& s, int name, const void* val, socklen_t len) {
  if (name == SO_LINGER) {
    if (len < sizeof(linger)) return EINVAL;
    const auto* l = static_cast<const linger*>(val);
    s.opt.linger = l->l_onoff;
    s.opt.linger_time = l->l_linger;
    return 0;
  }
  if (len < sizeof(int)) return EINVAL;
  int v;
  memcpy(&v, val, sizeof(v));
  switch (name) {
    case SO_REUSEADDR:
      s.opt.reuseaddr = v;
      return 0;
    case SO_KEEPALIVE:
      s.opt.keepalive = v;
      return 0;
    case SO_OOBINLINE:
      s.opt.oobinline = v;
      return 0;
    case SO_RCVBUF:
      if (!s.rbuf) s.opt.rbuf = buffer_size(v);
      return 0;
    case SO_SNDBUF:
      if (!s.sbuf) s.opt.sbuf = buffer_size(v);
      return 0;
    default:
      return ENOPROTOOPT;
  }
}

int set_tcp(Socket& s, int name, const void* val, socklen_t len) {
  if (len < sizeof(int)) return EINVAL;
  int v;
  memcpy(&v, val, sizeof(v));
  switch (name) {
    case TCP_NODELAY:
      s.opt.nodelay = v;
      return 0;  // every send goes out at once anyway
    case TCP_MAXSEG:
    case TCP_KEEPINTVL:
    case TCP_KEEPCNT:
      return v > 0 ? 0 : EINVAL;
    case TCP_KEEPIDLE:
      if (v <= 0) return EINVAL;
      s.opt.keepidle = v;
      return 0;
    default:
      return ENOPROTOOPT;
  }
}

int set_rdma(Socket& s, int name, const void* val, socklen_t len) {
  if (endpoint_fixed(s)) return EINVAL;
  if (name == RDMA_ROUTE) return 0;  // vrdma routes by address; a path record changes nothing
  if (len < sizeof(int)) return EINVAL;
  int v;
  memcpy(&v, val, sizeof(v));
  if (v < 0) return EINVAL;
  uint32_t u = static_cast<uint32_t>(v);
  switch (name) {
    case RDMA_SQSIZE:
      s.opt.sq = u < kMinQueue ? kMinQueue : u > kMaxQueue ? kMaxQueue : u;
      return 0;
    case RDMA_RQSIZE:
      s.opt.rq = u < kMinQueue ? kMinQueue : u > kMaxQueue ? kMaxQueue : u;
      return 0;
    case RDMA_INLINE:
      s.opt.inline_size = u > kMaxInline ? kMaxInline : u;
      return 0;
    case RDMA_IOMAPSIZE:
      s.opt.iomap = u > kMaxIomap ? kMaxIomap : u;
      return 0;
    default:
      return ENOPROTOOPT;
  }
}

int put_int(void* val, socklen_t* len, int v) {
  if (*len < sizeof(int)) return EINVAL;
  memcpy(val, &v, sizeof(v));
  *len = sizeof(int);
  return 0;
}

int get_socket(Socket& s, int name, void* val, socklen_t* len) {
  switch (name) {
    case SO_LINGER: {
      if (*len < sizeof(linger)) return EINVAL;
      linger l{s.opt.linger, s.opt.linger_time};
      memcpy(val, &l, sizeof(l));
      *len = sizeof(l);
      return 0;
    }
    case SO_ERROR: {
      if (s.state == State::kConnecting) drive_connect(s);
      int e = s.so_error;
      if (!e && s.err) e = s.err;
      int r = put_int(val, len, e);
      if (!r) s.so_error = 0;
      return r;
    }
    case SO_TYPE:
      return put_int(val, len, SOCK_STREAM);
    case SO_DOMAIN:
      return put_int(val, len, s.domain);
    case SO_PROTOCOL:
      return put_int(val, len, IPPROTO_TCP);
    case SO_ACCEPTCONN:
      return put_int(val, len, s.state == State::kListening);
    case SO_REUSEADDR:
      return put_int(val, len, s.opt.reuseaddr);
    case SO_KEEPALIVE:
      return put_int(val, len, s.opt.keepalive);
    case SO_OOBINLINE:
      return put_int(val, len, s.opt.oobinline);
    case SO_RCVBUF:
      return put_int(val, len, int(s.rbuf ? s.ring : s.opt.rbuf));
    case SO_SNDBUF:
      return put_int(val, len, int(s.sbuf ? s.sbuf_size : s.opt.sbuf));
    default:
      return ENOPROTOOPT;
  }
}

// What a TCP monitor can learn: the state and segment sizes; no retransmissions, no window.
int get_tcp_info(const Socket& s, void* val, socklen_t* len) {
  tcp_info ti{};
  ti.tcpi_state = s.state == State::kConnected && !s.err ? TCP_ESTABLISHED
                  : s.state == State::kListening         ? TCP_LISTEN
                                                         : TCP_CLOSE;
  ti.tcpi_snd_mss = ti.tcpi_rcv_mss = ti.tcpi_advmss = kMaxTcpSeg;
  ti.tcpi_pmtu = kMaxTcpSeg;
  ti.tcpi_rcv_space = s.ring;
  socklen_t n = *len < sizeof(ti) ? *len : socklen_t(sizeof(ti));
  memcpy(val, &ti, n);
  *len = n;
  return 0;
}

int get_tcp(Socket& s, int name, void* val, socklen_t* len) {
  switch (name) {
    case TCP_INFO:
      return get_tcp_info(s, val, len);
    case TCP_CONGESTION: {
      static const char kName[] = "rdma";  // RDMA's own flow control: credits
      socklen_t n = *len < sizeof(kName) ? *len : socklen_t(sizeof(kName));
      memcpy(val, kName, n);
      *len = n;
      return 0;
    }
    case TCP_NODELAY:
      return put_int(val, len, s.opt.nodelay);
    case TCP_MAXSEG:
      return put_int(val, len, kMaxTcpSeg);
    case TCP_KEEPIDLE:
      return put_int(val, len, s.opt.keepidle);
    case TCP_KEEPINTVL:
    case TCP_KEEPCNT:
      return put_int(val, len, 1);
    default:
      return ENOPROTOOPT;
  }
}

int get_rdma(Socket& s, int name, void* val, socklen_t* len) {
  switch (name) {
    case RDMA_SQSIZE:
      return put_int(val, len, int(s.sq_size ? s.sq_size : s.opt.sq));
    case RDMA_RQSIZE:
      return put_int(val, len, int(s.rq_depth ? s.rq_depth - kCtrlRecvs : s.opt.rq));
    case RDMA_INLINE:
      return put_int(val, len, int(s.opt.inline_size));
    case RDMA_IOMAPSIZE:
      return put_int(val, len, int(s.opt.iomap));
    default:
      return ENOPROTOOPT;
  }
}

}  // namespace

}  // namespace vrdma::rsock

using namespace vrdma::rsock;

extern "C" {

VRDMA_EXPORT int rsetsockopt(int socket, int level, int optname, const void* optval,
                             socklen_t optlen) {
  Socket* s = lookup(socket);
  if (!s) return fail(EBADF);
  if (!optval) return fail(EFAULT);
  std::lock_guard lock(s->mu);
  int e;
  switch (level) {
    case SOL_SOCKET:
      e = set_socket(*s, optname, optval, optlen);
      break;
    case IPPROTO_TCP:
      e = set_tcp(*s, optname, optval, optlen);
      break;
    case SOL_RDMA:
      e = set_rdma(*s, optname, optval, optlen);
      break;
    case IPPROTO_IPV6:
      if (optname != IPV6_V6ONLY || s->domain != AF_INET6) {
        e = ENOPROTOOPT;
      } else if (optlen < sizeof(int)) {
        e = EINVAL;
      } else {
        int v;
        memcpy(&v, optval, sizeof(v));
        s->opt.v6only = v;
        e = 0;
      }
      break;
    default:
      e = ENOPROTOOPT;
  }
  return e ? fail(e) : 0;
}

VRDMA_EXPORT int rgetsockopt(int socket, int level, int optname, void* optval, socklen_t* optlen) {
  Socket* s = lookup(socket);
  if (!s) return fail(EBADF);
  if (!optval || !optlen) return fail(EFAULT);
  std::lock_guard lock(s->mu);
  int e;
  switch (level) {
    case SOL_SOCKET:
      e = get_socket(*s, optname, optval, optlen);
      break;
    case IPPROTO_TCP:
      e = get_tcp(*s, optname, optval, optlen);
      break;
    case SOL_RDMA:
      e = get_rdma(*s, optname, optval, optlen);
      break;
    case IPPROTO_IPV6:
      e = optname == IPV6_V6ONLY && s->domain == AF_INET6 ? put_int(optval, optlen, s->opt.v6only)
                                                          : ENOPROTOOPT;
      break;
    default:
      e = ENOPROTOOPT;
  }
  return e ? fail(e) : 0;
}

VRDMA_EXPORT int rfcntl(int socket, int cmd, ...) {
  Socket* s = lookup(socket);
  if (!s) return fail(EBADF);
  va_list ap;
  va_start(ap, cmd);
  long arg = (cmd == F_SETFL || cmd == F_SETFD) ? va_arg(ap, long) : 0;
  va_end(ap);
  std::lock_guard lock(s->mu);
  switch (cmd) {
    case F_GETFL:
      return O_RDWR | s->fl;
    case F_SETFL:
      s->fl = static_cast<int>(arg) & O_NONBLOCK;
      return 0;
    case F_GETFD:
      return ::fcntl(s->fd, F_GETFD);
    case F_SETFD:
      return ::fcntl(s->fd, F_SETFD, static_cast<int>(arg));
    default:
      return fail(EINVAL);
  }
}

}  // extern "C"
