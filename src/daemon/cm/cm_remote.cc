// rdma_cm between hosts. The service of each side keeps its own record of the connection,
// with the other side as (host, connection id there); the messages a local client's request
// would send to a local peer go through the router to the other host's daemon, which turns
// them into the events its client expects.
//
// A message about a connection is taken only from the host that holds its other side (the
// router authenticated the sender), a connection request only for a source address that host
// owns, and at most CmTable::kMaxConnectionsFromHost from one host. A side that waits for the
// other host gives up after a while; the connections of a host whose link closed, or that left
// the directory, end.
#include <arpa/inet.h>
#include <errno.h>
#include <string.h>

#include <cstring>
#include <set>

#include "common/address.h"
#include "common/clock.h"
#include "common/log.h"
#include "daemon/cm/cm_service.h"
#include "daemon/directory/directory.h"

namespace vrdma::daemon {

namespace {

// What travels in wire::Cm::body: both sides' connection ids (the receiver's is 0 until the
// sender has learned it), then the message.
struct CmHead {
  uint32_t sender_conn;
  uint32_t receiver_conn;
};
struct RemoteConnect {
  proto::CmConnectReq req;
  uint32_t src_ipv4;
};
static_assert(sizeof(CmHead) + sizeof(RemoteConnect) <= sizeof(wire::Cm::body));
static_assert(sizeof(CmHead) + sizeof(proto::CmEvent) <= sizeof(wire::Cm::body));

wire::Cm make_cm(proto::Op op, uint32_t sender, uint32_t receiver, const void* body, size_t len) {
  wire::Cm m{};
  m.op = static_cast<uint16_t>(op);
  CmHead h{sender, receiver};
  std::memcpy(m.body, &h, sizeof(h));
  std::memcpy(m.body + sizeof(h), body, len);
  m.len = static_cast<uint32_t>(sizeof(h) + len);
  return m;
}

}  // namespace

void CmService::forward(const CmConnection& conn, proto::Op op, const void* body, size_t len) {
  wire::Cm m = make_cm(op, conn.id, conn.remote_conn, body, len);
  if (int err = port_.cm_send_to_host(conn.remote_host, m))
    LOG_WARN("cm: connection %u: cannot reach host %u: %s", conn.id, conn.remote_host,
             strerror(err));
}

void CmService::connect_remote(const CmCaller& c, const proto::CmConnectReq& r) {
  uint32_t host;
  if (int err = port_.cm_remote_host(r.dst_ipv4, &host))
    return void(port_.cm_reply(c, err, nullptr, 0));
  int refused = EMFILE;
  CmConnection* conn = table_.add(c.client, r.cookie, r.local_qpn, 0, r.qp_type, &refused);
  if (!conn) return void(port_.cm_reply(c, refused, nullptr, 0));
  table_.set_remote(*conn, host);
  conn->since_ns = now_ns();
  RemoteConnect rc{r, c.ipv4};
  wire::Cm m = make_cm(proto::Op::kCmConnect, conn->id, 0, &rc, sizeof(rc));
  if (int err = port_.cm_send_to_host(host, m)) {
    table_.erase(conn->id);
    return void(port_.cm_reply(c, err == EAGAIN ? EAGAIN : EHOSTUNREACH, nullptr, 0));
  }
  LOG_DEBUG("client %u: connection %u to %s on host %u", c.client, conn->id,
            ip_port_text(r.dst_ipv4, r.dst_port).c_str(), host);
  proto::CmConnectRep rep{conn->id};
  port_.cm_reply(c, 0, &rep, sizeof(rep));
}

void CmService::on_remote(uint32_t host, const wire::Cm& m) {
  CmHead h;
  if (m.len < sizeof(h) || m.len > sizeof(m.body)) return;
  std::memcpy(&h, m.body, sizeof(h));
  const uint8_t* body = m.body + sizeof(h);
  const size_t len = m.len - sizeof(h);
  const auto op = static_cast<proto::Op>(m.op);
  switch (op) {
    case proto::Op::kCmConnect:
      return remote_connect(host, h.sender_conn, body, len);
    case proto::Op::kCmReply:
    case proto::Op::kCmRejected:
      return remote_answer(host, op, h.sender_conn, h.receiver_conn, body, len);
    case proto::Op::kCmRtu:
      return remote_rtu(host, h.sender_conn);
    case proto::Op::kCmDisconnect:
      return remote_disconnect(host, h.sender_conn, h.receiver_conn, body, len);
    default:
      LOG_DEBUG("cm: message %u from host %u ignored", m.op, host);
  }
}

bool CmService::host_owns(uint32_t host, uint32_t ipv4) {
  HostEntry h;
  if (directory_.host_by_id(host, &h) != Lookup::kFound) return false;
  for (const auto& c : h.cidrs)
    if (c.contains(ntohl(ipv4))) return true;
  return false;
}

// A connector on `host` asks for a listener of ours.
void CmService::remote_connect(uint32_t host, uint32_t sender_conn, const uint8_t* body,
                               size_t len) {
  if (len < sizeof(RemoteConnect) || sender_conn == 0) return;
  RemoteConnect rc;
  std::memcpy(&rc, body, sizeof(rc));
  const proto::CmConnectReq& r = rc.req;
  if (table_.find_remote(host, sender_conn)) return;  // asked already
  auto refuse = [&](const char* why) {
    LOG_DEBUG("cm: host %u: connect from %s to %s refused (%s)", host,
              ipv4_text(rc.src_ipv4).c_str(), ip_port_text(r.dst_ipv4, r.dst_port).c_str(), why);
    proto::CmEvent ev{};
    ev.reason = ECONNREFUSED;
    port_.cm_send_to_host(host, make_cm(proto::Op::kCmRejected, 0, sender_conn, &ev, sizeof(ev)));
  };
  // The connector's address is one that host owns (it cannot speak for another host's).
  if (!host_owns(host, rc.src_ipv4)) return refuse("source address not the host's");
  const CmListener* l = table_.listener(r.dst_ipv4, r.dst_port);
  std::string tenant;
  if (!l || !port_.cm_client_tenant(l->client, &tenant)) return refuse("no listener");
  if (!port_.cm_may_initiate(port_.cm_tenant_of(rc.src_ipv4), tenant)) return refuse("tenant");
  CmConnection* conn = table_.add_from_host(host, sender_conn, r.local_qpn, l->client, r.qp_type);
  if (!conn) {
    LOG_WARN("cm: host %u is over its quota of %zu connections: request refused", host,
             CmTable::kMaxConnectionsFromHost);
    return refuse("quota");
  }
  conn->since_ns = now_ns();
  LOG_DEBUG("cm: connection %u from host %u (its connection %u) to %s", conn->id, host,
            sender_conn, ip_port_text(r.dst_ipv4, r.dst_port).c_str());
  proto::CmRequestEvent ev = request_event(conn->id, l->cookie, rc.src_ipv4, r);
  port_.cm_event(l->client, proto::Op::kCmRequest, &ev, sizeof(ev));
}

// The listener on `host` accepted or rejected our client's request.
void CmService::remote_answer(uint32_t host, proto::Op op, uint32_t sender_conn,
                              uint32_t receiver_conn, const uint8_t* body, size_t len) {
  if (len < sizeof(proto::CmEvent)) return;
  proto::CmEvent ev;
  std::memcpy(&ev, body, sizeof(ev));
  CmConnection* conn = table_.find(receiver_conn);
  // Only the host we asked, only while we wait for its answer.
  if (!conn || conn->remote_host != host || !conn->active_client ||
      conn->state != CmState::kRequested)
    return;
  const uint32_t active = conn->active_client;
  ev.conn_id = conn->id;
  ev.cookie = conn->active_cookie;
  if (op == proto::Op::kCmReply && conn->qp_type != static_cast<uint32_t>(proto::QpType::kUd)) {
    if (sender_conn == 0) return;
    conn->remote_conn = sender_conn;
    conn->passive_qpn = ev.remote_qpn;
    conn->state = CmState::kAccepted;
    conn->since_ns = now_ns();
  } else {
    table_.erase(conn->id);  // rejected, or a UD exchange, which ends with the reply
  }
  event(active, op, ev);
}

// Our acceptor's connector on `host` sent its RTU.
void CmService::remote_rtu(uint32_t host, uint32_t sender_conn) {
  CmConnection* conn = table_.find_remote(host, sender_conn);
  if (!conn || conn->state != CmState::kAccepted || !conn->passive_client) return;
  conn->state = CmState::kEstablished;
  conn->since_ns = now_ns();
  proto::CmEvent ev{};
  ev.conn_id = conn->id;
  ev.remote_qpn = conn->active_qpn;
  event(conn->passive_client, proto::Op::kCmEstablished, ev);
}

// The other side on `host` disconnected (or its program died).
void CmService::remote_disconnect(uint32_t host, uint32_t sender_conn, uint32_t receiver_conn,
                                  const uint8_t* body, size_t len) {
  if (len < sizeof(proto::CmConnReq)) return;
  proto::CmConnReq r;
  std::memcpy(&r, body, sizeof(r));
  CmConnection* conn =
      receiver_conn ? table_.find(receiver_conn) : table_.find_remote(host, sender_conn);
  // The host of the other side, about its own side of this connection.
  if (!conn || conn->remote_host != host || !sender_conn ||
      (conn->remote_conn && conn->remote_conn != sender_conn))
    return;
  const CmConnection other = *conn;
  table_.erase(conn->id);
  tell_disconnect(other, r.passive != 0);
}

void CmService::host_gone(uint32_t host) {
  std::vector<uint32_t> ids = table_.connections_with(host);
  if (ids.empty()) return;
  LOG_INFO("cm: host %u is gone: %zu rdma_cm connection(s) with it end", host, ids.size());
  for (uint32_t id : ids) {
    CmConnection* conn = table_.find(id);
    if (!conn) continue;
    const CmConnection other = *conn;
    table_.erase(id);
    // As if the other side had left: its side is the passive one when ours is the connector.
    tell_disconnect(other, other.active_client != 0);
  }
}

void CmService::time_out(const CmConnection& conn) {
  LOG_INFO("cm: connection %u with host %u: no answer from that host for %lld s", conn.id,
           conn.remote_host, static_cast<long long>(remote_timeout_ns_ / 1'000'000'000));
  table_.erase(conn.id);
  if (conn.active_client) {
    // Our connector never heard back: it fails, and the other host forgets the request.
    proto::CmEvent ev{};
    ev.conn_id = conn.id;
    ev.cookie = conn.active_cookie;
    ev.reason = ETIMEDOUT;
    event(conn.active_client, proto::Op::kCmRejected, ev);
    proto::CmConnReq fwd{0, 0};
    forward(conn, proto::Op::kCmDisconnect, &fwd, sizeof(fwd));
    return;
  }
  if (conn.state == CmState::kRequested) {
    // Our listener never answered: the connector is refused.
    proto::CmEvent ev{};
    ev.reason = ETIMEDOUT;
    forward(conn, proto::Op::kCmRejected, &ev, sizeof(ev));
    return;
  }
  // Accepted, but the connector never sent its RTU: our acceptor hears a disconnect.
  proto::CmConnReq fwd{0, 1};
  forward(conn, proto::Op::kCmDisconnect, &fwd, sizeof(fwd));
  tell_disconnect(conn, false);
}

void CmService::tick(int64_t now) {
  std::vector<CmConnection> expired;
  std::set<uint32_t> hosts;
  for (uint32_t id : table_.remote_connections()) {
    const CmConnection* c = table_.find(id);
    if (!c) continue;
    hosts.insert(c->remote_host);
    // Waiting: for the other host's answer (ours is the connector), for our listener's answer
    // (theirs is: it waits as long), or for the other host's RTU after we accepted.
    bool waits = c->state == CmState::kRequested ||
                 (c->state == CmState::kAccepted && c->active_client == 0);
    if (waits && now - c->since_ns > remote_timeout_ns_) expired.push_back(*c);
  }
  for (const auto& c : expired) time_out(c);
  if (now >= next_host_check_ns_) {
    next_host_check_ns_ = now + 1'000'000'000;
    for (uint32_t host : hosts) {
      HostEntry h;
      if (directory_.host_by_id(host, &h) == Lookup::kNotFound) host_gone(host);
    }
  }
}

int64_t CmService::next_deadline(int64_t now) const {
  return table_.has_remote() ? now + 100'000'000 : -1;
}

}  // namespace vrdma::daemon
