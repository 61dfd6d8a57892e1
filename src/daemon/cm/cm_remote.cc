// rdma_cm between hosts. The service of each side keeps its own record of the connection,
// with the other side as (host, connection id there); the messages a local client's request
// would send to a local peer go through the router to the other host's daemon, which turns
// them into the events its client expects.
#include <errno.h>
#include <string.h>

#include <cstring>

#include "common/address.h"
#include "common/log.h"
#include "daemon/cm/cm_service.h"

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
  conn->remote_host = host;
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

// A connector on `host` asks for a listener of ours.
void CmService::remote_connect(uint32_t host, uint32_t sender_conn, const uint8_t* body,
                               size_t len) {
  if (len < sizeof(RemoteConnect)) return;
  RemoteConnect rc;
  std::memcpy(&rc, body, sizeof(rc));
  const proto::CmConnectReq& r = rc.req;
  const CmListener* l = table_.listener(r.dst_ipv4, r.dst_port);
  std::string tenant;
  bool live = l && port_.cm_client_tenant(l->client, &tenant);
  CmConnection* conn = nullptr;
  if (live && tenant == port_.cm_tenant_of(rc.src_ipv4))
    conn = table_.add(0, 0, r.local_qpn, l->client, r.qp_type);
  if (!conn) {
    LOG_DEBUG("cm: host %u: connect to %s refused (%s)", host,
              ip_port_text(r.dst_ipv4, r.dst_port).c_str(), live ? "tenant or quota" : "no listener");
    proto::CmEvent ev{};
    ev.reason = ECONNREFUSED;
    port_.cm_send_to_host(host, make_cm(proto::Op::kCmRejected, 0, sender_conn, &ev, sizeof(ev)));
    return;
  }
  conn->remote_host = host;
  conn->remote_conn = sender_conn;
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
  if (!conn || conn->remote_host != host || !conn->active_client) return;
  const uint32_t active = conn->active_client;
  ev.conn_id = conn->id;
  ev.cookie = conn->active_cookie;
  if (op == proto::Op::kCmReply && conn->qp_type != static_cast<uint32_t>(proto::QpType::kUd)) {
    conn->remote_conn = sender_conn;
    conn->passive_qpn = ev.remote_qpn;
    conn->state = CmState::kAccepted;
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
  if (!conn || conn->remote_host != host) return;
  const CmConnection other = *conn;
  table_.erase(conn->id);
  tell_disconnect(other, r.passive != 0);
}

}  // namespace vrdma::daemon
