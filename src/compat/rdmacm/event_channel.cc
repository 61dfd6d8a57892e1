// Event channels (an eventfd readable while events are queued), rdma_get_cm_event and
// rdma_ack_cm_event, and the handler of the daemon's rdma_cm events.
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <new>

#include "internal.h"

namespace vrdma::cm {

namespace {

std::mutex g_mu;
std::unordered_map<uint64_t, Id*> g_by_cookie;
std::unordered_map<uint32_t, Id*> g_passive;  // passive ids by conn_id

void signal_fd(int fd) {
  uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(fd, &one, sizeof(one));
}

void drain_fd(int fd) {
  uint64_t v;
  [[maybe_unused]] ssize_t n = ::read(fd, &v, sizeof(v));
}

// The connect request for a listener: a new passive id on the listener's channel.
void on_request(const proto::CmRequestEvent& r) {
  auto it = g_by_cookie.find(r.listen_cookie);
  Shared* sh = shared_if_open();
  if (it == g_by_cookie.end() || it->second->state != State::kListening || !sh) {
    // Nobody to give it to (the listener is being destroyed): it stays unanswered until the
    // daemon hears that the listener is gone; rejecting here would need a daemon call.
    return;
  }
  Id* l = it->second;
  auto* c = new (std::nothrow) Id();
  if (!c) return;
  c->id.verbs = sh->ctx;
  c->id.pd = sh->pd;
  c->id.channel = l->id.channel;
  c->id.context = l->id.context;
  c->id.ps = l->id.ps;
  c->id.port_num = 1;
  c->id.qp_type = static_cast<ibv_qp_type>(r.qp_type);
  c->passive = true;
  c->bound = true;
  c->state = State::kRequested;
  c->conn_id = r.conn_id;
  c->remote_qpn = r.remote_qpn;
  c->remote_qkey = r.qkey;
  c->peer = r.params;
  c->ep_attr = l->ep_attr;
  c->ep_pd = l->ep_pd;
  sockaddr_in& src = c->id.route.addr.src_sin;
  src.sin_family = AF_INET;
  src.sin_addr.s_addr = r.dst_ipv4;
  src.sin_port = htons(r.dst_port);
  sockaddr_in& dst = c->id.route.addr.dst_sin;
  dst.sin_family = AF_INET;
  dst.sin_addr.s_addr = r.src_ipv4;
  dst.sin_port = htons(r.src_port);
  fill_gid(c->id.route.addr.addr.ibaddr.sgid, r.dst_ipv4);
  fill_gid(c->id.route.addr.addr.ibaddr.dgid, r.src_ipv4);
  c->id.route.addr.addr.ibaddr.pkey = 0xffff;
  register_id(c);  // g_mu is held: the table functions below take it only when called outside
  Event* e = new_event(c, RDMA_CM_EVENT_CONNECT_REQUEST);
  e->ev.listen_id = &l->id;
  uint8_t len = r.private_len <= proto::kCmPrivateData ? r.private_len : 0;
  set_private(e, r.private_data, len);
  if (r.qp_type == static_cast<uint32_t>(proto::QpType::kUd)) {
    e->ev.param.ud.qp_num = r.remote_qpn;
    e->ev.param.ud.qkey = r.qkey;
    fill_ah(e->ev.param.ud.ah_attr, r.src_ipv4);
  } else {
    e->ev.param.conn.responder_resources = r.params.responder_resources;
    e->ev.param.conn.initiator_depth = r.params.initiator_depth;
    e->ev.param.conn.retry_count = r.params.retry_count;
    e->ev.param.conn.rnr_retry_count = r.params.rnr_retry_count;
    e->ev.param.conn.qp_num = r.remote_qpn;
  }
  queue_event(c, e);
}

Id* find_target(const proto::CmEvent& ev) {
  if (ev.cookie) {
    auto it = g_by_cookie.find(ev.cookie);
    if (it == g_by_cookie.end() || it->second->passive) return nullptr;
    Id* id = it->second;
    // The answer of another host can come before rdma_connect has recorded the connection
    // id of its reply.
    if (id->conn_id == 0 && id->state == State::kConnecting) id->conn_id = ev.conn_id;
    return id->conn_id == ev.conn_id ? id : nullptr;
  }
  auto it = g_passive.find(ev.conn_id);
  return it == g_passive.end() ? nullptr : it->second;
}

}  // namespace

std::mutex& table_mu() { return g_mu; }

// Called with g_mu held.
void register_id(Id* id) {
  static uint64_t next_cookie = 1;
  if (!id->cookie) id->cookie = next_cookie++;
  g_by_cookie[id->cookie] = id;
  if (id->passive && id->conn_id) g_passive[id->conn_id] = id;
}

// Called with g_mu held.
void unregister_id(Id* id) {
  g_by_cookie.erase(id->cookie);
  if (id->passive && id->conn_id) {
    auto it = g_passive.find(id->conn_id);
    if (it != g_passive.end() && it->second == id) g_passive.erase(it);
  }
}

Channel* new_channel() {
  auto* ch = new (std::nothrow) Channel();
  if (!ch) {
    errno = ENOMEM;
    return nullptr;
  }
  ch->ch.fd = ::eventfd(0, EFD_CLOEXEC);
  if (ch->ch.fd < 0) {
    int e = errno;
    delete ch;
    errno = e;
    return nullptr;
  }
  return ch;
}

void delete_channel(Channel* ch) {
  {
    std::lock_guard lock(ch->mu);
    for (Event* e : ch->queue) delete e;
    ch->queue.clear();
  }
  ::close(ch->ch.fd);
  delete ch;
}

Event* new_event(Id* id, rdma_cm_event_type type, int status) {
  auto* e = new Event();
  memset(&e->ev, 0, sizeof(e->ev));
  e->ev.id = &id->id;
  e->ev.event = type;
  e->ev.status = status;
  return e;
}

void set_private(Event* e, const uint8_t* data, uint8_t len) {
  if (len > proto::kCmPrivateData) len = proto::kCmPrivateData;
  memcpy(e->private_data, data, len);
  // conn and ud start with the same two members.
  e->ev.param.conn.private_data = len ? e->private_data : nullptr;
  e->ev.param.conn.private_data_len = len;
}

// Called with g_mu held (or when the id is not yet shared with the handler).
void queue_event(Id* id, Event* e) {
  if (e->ev.event == RDMA_CM_EVENT_DISCONNECTED) {
    if (id->disconnect_queued) {
      delete e;
      return;
    }
    id->disconnect_queued = true;
  }
  Channel* ch = impl(id->id.channel);
  std::lock_guard lock(ch->mu);
  if (ch->queue.empty()) signal_fd(ch->ch.fd);
  ch->queue.push_back(e);
}

std::deque<Id*> purge_events(Channel* ch, Id* id) {
  std::deque<Id*> orphans;
  std::lock_guard lock(ch->mu);
  bool had = !ch->queue.empty();
  for (auto it = ch->queue.begin(); it != ch->queue.end();) {
    Event* e = *it;
    if (e->ev.id == &id->id || e->ev.listen_id == &id->id) {
      if (e->ev.listen_id == &id->id && e->ev.event == RDMA_CM_EVENT_CONNECT_REQUEST)
        orphans.push_back(impl(e->ev.id));
      delete e;
      it = ch->queue.erase(it);
    } else {
      ++it;
    }
  }
  if (had && ch->queue.empty()) drain_fd(ch->ch.fd);
  return orphans;
}

void move_events(Channel* from, Channel* to, Id* id) {
  if (from == to) return;
  std::deque<Event*> moved;
  {
    std::lock_guard lock(from->mu);
    bool had = !from->queue.empty();
    for (auto it = from->queue.begin(); it != from->queue.end();) {
      if ((*it)->ev.id == &id->id) {
        moved.push_back(*it);
        it = from->queue.erase(it);
      } else {
        ++it;
      }
    }
    if (had && from->queue.empty()) drain_fd(from->ch.fd);
  }
  if (moved.empty()) return;
  std::lock_guard lock(to->mu);
  if (to->queue.empty()) signal_fd(to->ch.fd);
  for (Event* e : moved) to->queue.push_back(e);
}

void on_daemon_event(uint16_t op, const void* payload, size_t len) {
  std::lock_guard lock(g_mu);
  if (op == static_cast<uint16_t>(proto::Op::kCmRequest)) {
    if (len != sizeof(proto::CmRequestEvent)) return;
    proto::CmRequestEvent r;
    memcpy(&r, payload, sizeof(r));
    on_request(r);
    return;
  }
  if (len != sizeof(proto::CmEvent)) return;
  proto::CmEvent ev;
  memcpy(&ev, payload, sizeof(ev));
  Id* id = find_target(ev);
  if (!id) return;
  uint8_t plen = ev.private_len <= proto::kCmPrivateData ? ev.private_len : 0;
  switch (static_cast<proto::Op>(op)) {
    case proto::Op::kCmReply: {
      if (id->state != State::kConnecting) return;
      Event* e = new_event(id, RDMA_CM_EVENT_ESTABLISHED);
      e->work = Work::kReply;
      e->raw = ev;
      set_private(e, ev.private_data, plen);
      queue_event(id, e);
      return;
    }
    case proto::Op::kCmRejected: {
      if (id->state != State::kConnecting) return;
      id->state = State::kRejected;
      Event* e = new_event(id, RDMA_CM_EVENT_REJECTED,
                           ev.reason ? kRejInvalidServiceId : kRejConsumerDefined);
      set_private(e, ev.private_data, plen);
      queue_event(id, e);
      return;
    }
    case proto::Op::kCmEstablished: {
      if (id->state != State::kAccepting) return;
      id->state = State::kConnected;
      Event* e = new_event(id, RDMA_CM_EVENT_ESTABLISHED);
      e->ev.param.conn.qp_num = id->remote_qpn;
      e->ev.param.conn.responder_resources = id->peer.responder_resources;
      e->ev.param.conn.initiator_depth = id->peer.initiator_depth;
      queue_event(id, e);
      return;
    }
    case proto::Op::kCmDisconnected: {
      State was = id->state;
      id->state = State::kDisconnected;
      if (was == State::kConnecting) {
        // The acceptor left between its accept and our RTU.
        queue_event(id, new_event(id, RDMA_CM_EVENT_REJECTED, kRejConsumerDefined));
        return;
      }
      queue_event(id, new_event(id, RDMA_CM_EVENT_DISCONNECTED));
      return;
    }
    default:
      return;
  }
}

}  // namespace vrdma::cm

using namespace vrdma::cm;
namespace proto = vrdma::proto;

namespace {

// The peer accepted: bring the QP up, send the RTU (RC/UC), and turn the event into what the
// application sees. Runs on the thread that takes the event, with no lock held.
void complete_reply(Event* e) {
  Id* id = impl(e->ev.id);
  const proto::CmEvent& r = e->raw;
  {
    std::lock_guard lock(table_mu());
    if (id->state != State::kConnecting) {
      // Disconnected in the meantime: nothing to establish.
      e->ev.event = RDMA_CM_EVENT_CONNECT_ERROR;
      e->ev.status = -ECONNRESET;
      return;
    }
    id->remote_qpn = r.remote_qpn;
    id->remote_qkey = r.qkey;
    id->peer = r.params;
  }
  uint32_t peer_ip = id->id.route.addr.dst_sin.sin_addr.s_addr;
  if (id->id.qp_type == IBV_QPT_UD) {
    std::lock_guard lock(table_mu());
    id->state = State::kConnected;
    id->conn_id = 0;  // the exchange is over (no disconnect for UD)
    uint8_t len = e->ev.param.conn.private_data_len;
    const void* pd = e->ev.param.conn.private_data;
    memset(&e->ev.param, 0, sizeof(e->ev.param));
    e->ev.param.ud.private_data = pd;
    e->ev.param.ud.private_data_len = len;
    fill_ah(e->ev.param.ud.ah_attr, peer_ip);
    e->ev.param.ud.qp_num = r.remote_qpn;
    e->ev.param.ud.qkey = r.qkey;
    e->ev.event = RDMA_CM_EVENT_ESTABLISHED;
    return;
  }
  e->ev.param.conn.responder_resources = r.params.responder_resources;
  e->ev.param.conn.initiator_depth = r.params.initiator_depth;
  e->ev.param.conn.retry_count = r.params.retry_count;
  e->ev.param.conn.rnr_retry_count = r.params.rnr_retry_count;
  e->ev.param.conn.qp_num = r.remote_qpn;
  if (!id->id.qp) {
    std::lock_guard lock(table_mu());
    id->state = State::kResponded;
    e->ev.event = RDMA_CM_EVENT_CONNECT_RESPONSE;
    return;
  }
  if (int err = qp_to_rts(id)) {
    send_disconnect(id);
    e->ev.event = RDMA_CM_EVENT_CONNECT_ERROR;
    e->ev.status = -err;
    return;
  }
  proto::CmConnReq rtu{id->conn_id, 0};
  if (int err = call(proto::Op::kCmRtu, rtu)) {
    e->ev.event = err == ENOENT ? RDMA_CM_EVENT_REJECTED : RDMA_CM_EVENT_CONNECT_ERROR;
    e->ev.status = err == ENOENT ? kRejConsumerDefined : -err;
    return;
  }
  std::lock_guard lock(table_mu());
  if (id->state == State::kConnecting) id->state = State::kConnected;
  e->ev.event = RDMA_CM_EVENT_ESTABLISHED;
}

}  // namespace

extern "C" {

VRDMA_EXPORT struct rdma_event_channel* rdma_create_event_channel(void) {
  if (!shared()) return nullptr;
  Channel* ch = new_channel();
  return ch ? &ch->ch : nullptr;
}

VRDMA_EXPORT void rdma_destroy_event_channel(struct rdma_event_channel* channel) {
  if (channel) delete_channel(impl(channel));
}

VRDMA_EXPORT int rdma_get_cm_event(struct rdma_event_channel* channel,
                                   struct rdma_cm_event** event) {
  if (!channel || !event) return fail(EINVAL);
  Channel* ch = impl(channel);
  for (;;) {
    Event* e = nullptr;
    {
      std::lock_guard lock(ch->mu);
      if (!ch->queue.empty()) {
        e = ch->queue.front();
        ch->queue.pop_front();
        if (ch->queue.empty()) drain_fd(ch->ch.fd);
      }
    }
    if (e) {
      if (e->work == Work::kReply) {
        e->work = Work::kNone;
        complete_reply(e);
      }
      *event = &e->ev;
      return 0;
    }
    int flags = ::fcntl(ch->ch.fd, F_GETFL);
    if (flags >= 0 && (flags & O_NONBLOCK)) return fail(EAGAIN);
    pollfd p{ch->ch.fd, POLLIN, 0};
    if (::poll(&p, 1, -1) < 0 && errno != EINTR) return -1;
  }
}

VRDMA_EXPORT int rdma_ack_cm_event(struct rdma_cm_event* event) {
  if (!event) return fail(EINVAL);
  delete reinterpret_cast<Event*>(event);
  return 0;
}

}  // extern "C"

namespace vrdma::cm {

int wait_event(Id* id, rdma_cm_event_type want, rdma_cm_event** keep) {
  rdma_cm_event* ev = nullptr;
  if (rdma_get_cm_event(id->id.channel, &ev)) return -1;
  int err = 0;
  if (ev->event != want || ev->status) {
    switch (ev->event) {
      case RDMA_CM_EVENT_REJECTED: err = ECONNREFUSED; break;
      case RDMA_CM_EVENT_DISCONNECTED: err = ECONNRESET; break;
      default: err = ev->status < 0 ? -ev->status : (ev->status ? ev->status : EINVAL); break;
    }
  }
  if (keep && !err) {
    *keep = ev;
  } else {
    rdma_ack_cm_event(ev);
  }
  return err ? fail(err) : 0;
}

}  // namespace vrdma::cm
