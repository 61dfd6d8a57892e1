// rconnect: address and route resolution, the endpoint, the connection request with this
// side's ring, and the peer's ring from its answer. Non-blocking sockets return EINPROGRESS and
// finish in whichever call comes next (rpoll, rconnect, rsend, rrecv, SO_ERROR).
#include <errno.h>
#include <fcntl.h>
#include <string.h>

#include "../export.h"
#include "socket.h"

namespace vrdma::rsock {

namespace {

int failed(Socket& s, int err) {
  s.state = State::kFailed;
  s.so_error = err;
  return err;
}

int event_error(const rdma_cm_event& ev) {
  switch (ev.event) {
    case RDMA_CM_EVENT_REJECTED:
      return ECONNREFUSED;
    case RDMA_CM_EVENT_ADDR_ERROR:
    case RDMA_CM_EVENT_ROUTE_ERROR:
    case RDMA_CM_EVENT_UNREACHABLE:
      return EHOSTUNREACH;
    case RDMA_CM_EVENT_DISCONNECTED:
      return ECONNRESET;
    case RDMA_CM_EVENT_CONNECT_ERROR:
      return ev.status < 0 ? -ev.status : ECONNREFUSED;
    default:
      return ev.status < 0 ? -ev.status : EIO;
  }
}

// One event of the attempt: EINPROGRESS, 0 (connected) or an error.
int on_event(Socket& s, rdma_cm_event& ev) {
  switch (ev.event) {
    case RDMA_CM_EVENT_ADDR_RESOLVED:
      if (rdma_resolve_route(s.id, 2000)) return errno;
      return EINPROGRESS;
    case RDMA_CM_EVENT_ROUTE_RESOLVED: {
      if (int e = create_endpoint(s)) return e;
      ConnData cd = conn_data(s);
      rdma_conn_param p{};
      p.private_data = &cd;
      p.private_data_len = sizeof(cd);
      p.responder_resources = 1;
      p.initiator_depth = 1;
      p.flow_control = 1;
      p.retry_count = 7;
      p.rnr_retry_count = 7;  // a receive always comes: wait for it
      if (rdma_connect(s.id, &p)) return errno;
      return EINPROGRESS;
    }
    case RDMA_CM_EVENT_ESTABLISHED:
      if (int e = take_conn_data(s, ev.param.conn.private_data, ev.param.conn.private_data_len))
        return e;
      s.local = s.id->route.addr.src_sin;
      s.peer = s.id->route.addr.dst_sin;
      s.state = State::kConnected;
      return 0;
    default:
      return event_error(ev);
  }
}

}  // namespace

int drive_connect(Socket& s) {
  if (s.state == State::kConnected) return 0;
  if (s.state != State::kConnecting) return s.so_error ? s.so_error : ECONNABORTED;
  rdma_cm_event* ev = nullptr;
  while (rdma_get_cm_event(s.ch, &ev) == 0) {
    int r = on_event(s, *ev);
    rdma_ack_cm_event(ev);
    if (r == 0) return 0;
    if (r != EINPROGRESS) {
      if (s.id->qp) rdma_disconnect(s.id);
      return failed(s, r);
    }
  }
  if (errno != EAGAIN) return failed(s, errno);
  return EINPROGRESS;
}

}  // namespace vrdma::rsock

using namespace vrdma::rsock;

extern "C" {

VRDMA_EXPORT int rconnect(int socket, const struct sockaddr* addr, socklen_t addrlen) {
  Socket* s = lookup(socket);
  if (!s) return fail(EBADF);
  std::unique_lock lk(s->mu);
  bool nonblock = s->fl & O_NONBLOCK;
  switch (s->state) {
    case State::kConnected:
      return fail(EISCONN);
    case State::kListening:
      return fail(EINVAL);
    case State::kFailed: {
      // The error of the attempt, once (as connect() reports it); then the socket is unusable.
      int e = s->so_error ? s->so_error : ECONNABORTED;
      s->so_error = 0;
      return fail(e);
    }
    case State::kConnecting:
      if (nonblock) {
        int r = drive_connect(*s);
        return r == 0 ? 0 : fail(r == EINPROGRESS ? EALREADY : r);
      }
      break;
    case State::kInit:
    case State::kBound: {
      sockaddr_in dst;
      if (int e = to_v4(addr, addrlen, s->domain, dst)) return fail(e);
      if (dst.sin_addr.s_addr == INADDR_ANY) dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      if (dst.sin_port == 0) return fail(ECONNREFUSED);
      sockaddr* src = s->state == State::kBound ? reinterpret_cast<sockaddr*>(&s->local) : nullptr;
      if (rdma_resolve_addr(s->id, src, reinterpret_cast<sockaddr*>(&dst), 2000))
        return fail(errno);
      s->state = State::kConnecting;
      break;
    }
  }
  int r = drive_connect(*s);
  if (r == EINPROGRESS && !nonblock) {
    // A signal ends the wait with EINTR; the connection goes on (as connect() does).
    if (wait_until(*s, lk, false, [](Socket& x) { return drive_connect(x) != EINPROGRESS; }) ==
        EINTR)
      return fail(EINTR);
    r = drive_connect(*s);
  }
  if (r == 0) return 0;
  if (r == EINPROGRESS) return fail(EINPROGRESS);
  s->so_error = 0;  // reported here
  return fail(r);
}

}  // extern "C"
