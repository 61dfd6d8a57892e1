// rdma_cm between hosts. The daemon of each side keeps its own record of the connection (in
// cm_), with the other side as (host, connection id there); the messages a local client's
// request would send to a local peer go through the router to the other host's daemon, which
// turns them into the events its client expects.
#include <arpa/inet.h>
#include <errno.h>

#include <cstring>

#include "daemon/daemon.h"
#include "daemon/log.h"

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

int Daemon::cm_remote_host(uint32_t dst_ipv4, uint32_t* host) {
  if (!router_) return EHOSTUNREACH;
  HostEntry h;
  switch (directory_->host_of(dst_ipv4, &h)) {
    case Lookup::kUnavailable:
      LOG_WARN("cm: cannot resolve %s: the directory is unavailable (%s)",
               inet_ntoa(in_addr{dst_ipv4}), directory_->describe().c_str());
      return EAGAIN;
    case Lookup::kNotFound:
      return EHOSTUNREACH;
    case Lookup::kFound:
      break;
  }
  if (h.host_id == cfg_.host_id) return EHOSTUNREACH;  // ours, but nobody there
  *host = h.host_id;
  return 0;
}

void Daemon::cm_forward(const CmConnection& conn, proto::Op op, const void* body, size_t len) {
  if (!router_) return;
  wire::Cm m = make_cm(op, conn.id, conn.remote_conn, body, len);
  if (int err = router_->send_cm_to_host(conn.remote_host, m))
    LOG_WARN("cm: connection %u: cannot reach host %u: %s", conn.id, conn.remote_host,
             strerror(err));
}

void Daemon::cm_connect_remote(Client& c, const Decoded& d, const proto::CmConnectReq& r) {
  uint32_t host;
  if (int err = cm_remote_host(r.dst_ipv4, &host)) return void(reply_error(c, d, err));
  CmConnection* conn = cm_.add(c.id, r.cookie, r.local_qpn, 0, r.qp_type);
  if (!conn) return void(reply_error(c, d, EMFILE));
  conn->remote_host = host;
  RemoteConnect rc{r, c.ident.ipv4};
  wire::Cm m = make_cm(proto::Op::kCmConnect, conn->id, 0, &rc, sizeof(rc));
  if (int err = router_->send_cm_to_host(host, m)) {
    cm_.erase(conn->id);
    return void(reply_error(c, d, err == EAGAIN ? EAGAIN : EHOSTUNREACH));
  }
  LOG_DEBUG("client %u: connection %u to %s:%u on host %u", c.id, conn->id,
            inet_ntoa(in_addr{r.dst_ipv4}), r.dst_port, host);
  proto::CmConnectRep rep{conn->id};
  send(c, d.op, d.seq, 0, &rep, sizeof(rep));
}

void Daemon::on_remote_cm(uint32_t host, const wire::Cm& m) {
  CmHead h;
  if (m.len < sizeof(h)) return;
  std::memcpy(&h, m.body, sizeof(h));
  const uint8_t* body = m.body + sizeof(h);
  const size_t len = m.len - sizeof(h);
  auto op = static_cast<proto::Op>(m.op);
  switch (op) {
    case proto::Op::kCmConnect: {
      if (len < sizeof(RemoteConnect)) return;
      RemoteConnect rc;
      std::memcpy(&rc, body, sizeof(rc));
      const proto::CmConnectReq& r = rc.req;
      const CmListener* l = cm_.listener(r.dst_ipv4, r.dst_port);
      Client* owner = l ? find_live(l->client) : nullptr;
      std::string tenant = tenant_for(cfg_.tenants, rc.src_ipv4);
      CmConnection* conn = nullptr;
      if (owner && owner->tenant == tenant)
        conn = cm_.add(0, 0, r.local_qpn, owner->id, r.qp_type);
      if (!conn) {
        LOG_DEBUG("cm: host %u: connect to %s:%u refused (%s)", host,
                  inet_ntoa(in_addr{r.dst_ipv4}), r.dst_port,
                  owner ? "tenant or quota" : "no listener");
        proto::CmEvent ev{};
        ev.reason = ECONNREFUSED;
        wire::Cm rej = make_cm(proto::Op::kCmRejected, 0, h.sender_conn, &ev, sizeof(ev));
        router_->send_cm_to_host(host, rej);
        return;
      }
      conn->remote_host = host;
      conn->remote_conn = h.sender_conn;
      proto::CmRequestEvent ev{};
      ev.conn_id = conn->id;
      ev.remote_qpn = r.local_qpn;
      ev.listen_cookie = l->cookie;
      ev.src_ipv4 = rc.src_ipv4;
      ev.dst_ipv4 = r.dst_ipv4;
      ev.src_port = r.src_port;
      ev.dst_port = r.dst_port;
      ev.qp_type = r.qp_type;
      ev.qkey = r.qkey;
      ev.params = r.params;
      ev.private_len = r.private_len;
      std::memcpy(ev.private_data, r.private_data, sizeof(ev.private_data));
      send(*owner, proto::Op::kCmRequest, 0, 0, &ev, sizeof(ev));
      return;
    }
    case proto::Op::kCmReply:
    case proto::Op::kCmRejected: {
      if (len < sizeof(proto::CmEvent)) return;
      proto::CmEvent ev;
      std::memcpy(&ev, body, sizeof(ev));
      CmConnection* conn = cm_.find(h.receiver_conn);
      if (!conn || conn->remote_host != host || !conn->active_client) return;
      uint32_t active = conn->active_client;
      ev.conn_id = conn->id;
      ev.cookie = conn->active_cookie;
      if (op == proto::Op::kCmReply) {
        conn->remote_conn = h.sender_conn;
        conn->passive_qpn = ev.remote_qpn;
        conn->state = CmState::kAccepted;
        if (conn->qp_type == static_cast<uint32_t>(proto::QpType::kUd)) cm_.erase(conn->id);
      } else {
        cm_.erase(conn->id);
      }
      cm_send(active, op, ev);
      return;
    }
    case proto::Op::kCmRtu: {
      CmConnection* conn = cm_.find_remote(host, h.sender_conn);
      if (!conn || conn->state != CmState::kAccepted || !conn->passive_client) return;
      conn->state = CmState::kEstablished;
      proto::CmEvent ev{};
      ev.conn_id = conn->id;
      ev.remote_qpn = conn->active_qpn;
      cm_send(conn->passive_client, proto::Op::kCmEstablished, ev);
      return;
    }
    case proto::Op::kCmDisconnect: {
      if (len < sizeof(proto::CmConnReq)) return;
      proto::CmConnReq r;
      std::memcpy(&r, body, sizeof(r));
      CmConnection* conn = h.receiver_conn ? cm_.find(h.receiver_conn)
                                           : cm_.find_remote(host, h.sender_conn);
      if (!conn || conn->remote_host != host) return;
      proto::CmEvent ev{};
      ev.conn_id = conn->id;
      proto::Op to_op = proto::Op::kCmDisconnected;
      uint32_t to;
      if (r.passive) {  // the acceptor went away: tell our connector
        to = conn->active_client;
        ev.cookie = conn->active_cookie;
        if (conn->state == CmState::kRequested) {
          to_op = proto::Op::kCmRejected;
          ev.reason = ECONNREFUSED;
        }
      } else {
        to = conn->passive_client;
      }
      cm_.erase(conn->id);
      if (to) cm_send(to, to_op, ev);
      return;
    }
    default:
      LOG_DEBUG("cm: message %u from host %u ignored", m.op, host);
  }
}

}  // namespace vrdma::daemon
