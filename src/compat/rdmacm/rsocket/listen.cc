// rlisten and raccept. As a kernel completes TCP handshakes before accept(), a per-process
// accept service thread (started by the first rlisten, asleep in poll() when there is nothing
// to do) answers connection requests at once: it checks the peer's connection data, builds the
// new socket's endpoint, accepts, and once the peer's RTU arrives (ESTABLISHED) gives the
// socket its own event channel and queues it for raccept. A listener's accept queue is an
// eventfd, readable while connections wait.
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <new>
#include <thread>

#include "../export.h"
#include "socket.h"

namespace vrdma::rsock {

struct Listener {
  std::deque<Socket*> ready;     // established, waiting for raccept
  std::vector<Socket*> pending;  // accepted, waiting for the peer's RTU
  int efd = -1;                  // readable while `ready` is not empty
  uint32_t limit = 0;            // pending + ready
};

namespace {

constexpr uint32_t kMinBacklog = 128;

struct Service {
  std::mutex mu;  // before any listener's mutex
  std::vector<Socket*> listeners;
  uint64_t gen = 0;
  int ctl = -1;  // eventfd: the set of listeners changed
  bool started = false;
};

Service& service() {
  static Service* s = new Service();  // lives as long as the process (its thread may run)
  return *s;
}

void wake_service(Service& sv) {
  uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(sv.ctl, &one, sizeof(one));
}

// A connection request: a new socket with the listener's options, accepted at once.
void on_request(Socket& l, rdma_cm_event* ev) {
  rdma_cm_id* cid = ev->id;
  uint8_t pdata[sizeof(ConnData)] = {};
  uint8_t plen = ev->param.conn.private_data_len;
  if (plen > sizeof(pdata)) plen = sizeof(pdata);
  if (ev->param.conn.private_data) memcpy(pdata, ev->param.conn.private_data, plen);
  rdma_ack_cm_event(ev);
  Listener& q = *l.lst;
  auto* c = new (std::nothrow) Socket();
  if (!c || q.pending.size() + q.ready.size() >= q.limit) {
    delete c;
    rdma_reject(cid, nullptr, 0);
    rdma_destroy_id(cid);
    return;
  }
  c->id = cid;
  cid->context = c;
  c->domain = l.domain;
  c->opt = l.opt;
  c->state = State::kConnecting;
  c->local = cid->route.addr.src_sin;
  c->peer = cid->route.addr.dst_sin;
  int e = take_conn_data(*c, pdata, plen);
  if (!e) e = create_endpoint(*c);
  if (!e) {
    ConnData cd = conn_data(*c);
    rdma_conn_param p{};
    p.private_data = &cd;
    p.private_data_len = sizeof(cd);
    p.responder_resources = 1;
    p.initiator_depth = 1;
    p.flow_control = 1;
    p.retry_count = 7;
    p.rnr_retry_count = 7;
    if (rdma_accept(cid, &p)) e = errno ? errno : EIO;
  } else {
    rdma_reject(cid, nullptr, 0);
  }
  if (e) {
    destroy_socket(c);
    return;
  }
  q.pending.push_back(c);
}

Socket* take_pending(Listener& q, rdma_cm_id* id) {
  auto it =
      std::find_if(q.pending.begin(), q.pending.end(), [&](Socket* c) { return c->id == id; });
  if (it == q.pending.end()) return nullptr;
  Socket* c = *it;
  q.pending.erase(it);
  return c;
}

// The peer's RTU came: the socket waits for raccept (which gives it its own event channel).
void on_established(Socket& l, Socket* c) {
  c->state = State::kConnected;
  Listener& q = *l.lst;
  if (q.ready.empty()) {
    uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(q.efd, &one, sizeof(one));
  }
  q.ready.push_back(c);
  if (l.waiters) kick_waiters(l, nullptr);
}

// The listener's events, with the service's mutex held.
void handle_listener(Socket& l) {
  std::lock_guard lock(l.mu);
  if (!l.lst) return;
  rdma_cm_event* ev = nullptr;
  while (rdma_get_cm_event(l.ch, &ev) == 0) {
    switch (ev->event) {
      case RDMA_CM_EVENT_CONNECT_REQUEST:
        on_request(l, ev);
        break;
      case RDMA_CM_EVENT_ESTABLISHED: {
        Socket* c = take_pending(*l.lst, ev->id);
        rdma_ack_cm_event(ev);
        if (c) on_established(l, c);
        break;
      }
      default: {
        // The peer went away before the connection was complete, or before raccept.
        rdma_cm_event_type t = ev->event;
        rdma_cm_id* id = ev->id;
        rdma_ack_cm_event(ev);
        if (Socket* c = take_pending(*l.lst, id)) {
          destroy_socket(c);
          break;
        }
        for (Socket* c : l.lst->ready)
          if (c->id == id) peer_left(*c, t);
        break;
      }
    }
  }
}

void service_loop() {
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, nullptr);
  Service& sv = service();
  std::vector<pollfd> fds;
  std::vector<Socket*> ls;
  for (;;) {
    uint64_t gen;
    {
      std::lock_guard lock(sv.mu);
      gen = sv.gen;
      ls = sv.listeners;
    }
    fds.assign(1, pollfd{sv.ctl, POLLIN, 0});
    for (Socket* l : ls) fds.push_back(pollfd{l->fd, POLLIN, 0});
    if (::poll(fds.data(), fds.size(), -1) < 0) continue;
    if (fds[0].revents) drain(sv.ctl);
    std::lock_guard lock(sv.mu);
    if (sv.gen != gen) continue;  // a listener went away: its descriptor may be reused
    for (size_t i = 0; i < ls.size(); ++i)
      if (fds[i + 1].revents) handle_listener(*ls[i]);
  }
}

int start_service(Service& sv) {
  if (sv.started) return 0;
  sv.ctl = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (sv.ctl < 0) return errno;
  try {
    std::thread(service_loop).detach();
  } catch (...) {
    ::close(sv.ctl);
    sv.ctl = -1;
    return EAGAIN;
  }
  sv.started = true;
  return 0;
}

}  // namespace

bool accept_ready(Socket& s) {
  return s.lst && !s.lst->ready.empty();
}

int accept_wait_fd(const Socket& s) {
  return s.lst ? s.lst->efd : -1;
}

void stop_listening(Socket& s) {
  Service& sv = service();
  std::lock_guard slock(sv.mu);
  sv.listeners.erase(std::remove(sv.listeners.begin(), sv.listeners.end(), &s), sv.listeners.end());
  ++sv.gen;
  if (sv.ctl >= 0) wake_service(sv);
  std::lock_guard lock(s.mu);
  if (!s.lst) return;
  for (Socket* c : s.lst->pending) destroy_socket(c);
  for (Socket* c : s.lst->ready) destroy_socket(c);
  ::close(s.lst->efd);
  delete s.lst;
  s.lst = nullptr;
}

}  // namespace vrdma::rsock

using namespace vrdma::rsock;

extern "C" {

VRDMA_EXPORT int rlisten(int socket, int backlog) {
  Socket* s = lookup(socket);
  if (!s) return fail(EBADF);
  {
    std::lock_guard lock(s->mu);
    if (s->state == State::kListening) return 0;
    if (s->state != State::kInit && s->state != State::kBound) return fail(EINVAL);
    auto* q = new (std::nothrow) Listener();
    if (!q) return fail(ENOMEM);
    q->efd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (q->efd < 0) {
      int e = errno;
      delete q;
      return fail(e);
    }
    q->limit = backlog > int(kMinBacklog) ? uint32_t(backlog) : kMinBacklog;
    if (rdma_listen(s->id, backlog)) {
      int e = errno;
      ::close(q->efd);
      delete q;
      return fail(e);
    }
    s->lst = q;
    s->state = State::kListening;
    s->local = s->id->route.addr.src_sin;
  }
  Service& sv = service();
  std::lock_guard slock(sv.mu);
  if (int e = start_service(sv)) return fail(e);
  sv.listeners.push_back(s);
  ++sv.gen;
  wake_service(sv);
  return 0;
}

VRDMA_EXPORT int raccept(int socket, struct sockaddr* addr, socklen_t* addrlen) {
  Socket* s = lookup(socket);
  if (!s) return fail(EBADF);
  std::unique_lock lk(s->mu);
  if (s->state != State::kListening) return fail(EINVAL);
  bool nonblock = s->fl & O_NONBLOCK;
  if (int e = wait_until(*s, lk, nonblock, [](Socket& x) { return accept_ready(x); }))
    return fail(e);
  // The socket's number is made now, after whatever descriptor the caller took for it (as
  // librspreload does), above it and every other open descriptor (another thread may have
  // closed a lower one meanwhile).
  int err = 0;
  rdma_event_channel* ch = socket_channel(err);
  if (!ch) return fail(err);
  Listener& q = *s->lst;
  Socket* c = q.ready.front();
  if (rdma_migrate_id(c->id, ch)) {
    int e = errno;
    rdma_destroy_event_channel(ch);
    return fail(e);
  }
  q.ready.pop_front();
  if (q.ready.empty()) drain(q.efd);
  c->ch = ch;
  c->fd = ch->fd;
  lk.unlock();
  if (int e = insert(c)) {
    rdma_disconnect(c->id);
    destroy_socket(c);
    return fail(e);
  }
  if (addr && addrlen) from_v4(*c, c->peer, addr, addrlen);
  return c->fd;
}

}  // extern "C"
