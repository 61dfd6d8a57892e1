// rdma_cm between the host's own clients; with a side on another host, the same requests go
// through cm_remote.cc.
#include "daemon/cm/cm_service.h"

#include <errno.h>
#include <string.h>

#include <cstring>

#include "common/address.h"
#include "common/clock.h"
#include "common/log.h"
#include "daemon/directory/directory.h"

namespace vrdma::daemon {

namespace {

template <typename Req>
proto::CmEvent event_with_private_data(uint32_t conn_id, uint64_t cookie, const Req& r) {
  proto::CmEvent ev{};
  ev.conn_id = conn_id;
  ev.cookie = cookie;
  ev.private_len = r.private_len;
  std::memcpy(ev.private_data, r.private_data, sizeof(ev.private_data));
  return ev;
}

}  // namespace

void CmService::event(uint32_t client, proto::Op op, const proto::CmEvent& ev) {
  port_.cm_event(client, op, &ev, sizeof(ev));
}

void CmService::on_request(const CmCaller& c, const proto::CmListenReq& r) {
  uint32_t ip = r.ipv4 ? r.ipv4 : c.ipv4;
  if (ip != c.ipv4) return void(port_.cm_reply(c, EADDRNOTAVAIL, nullptr, 0));
  if (int err = table_.listen(c.client, ip, r.port, r.cookie)) {
    LOG_DEBUG("client %u: listen on %s: %s", c.client, ip_port_text(ip, r.port).c_str(),
              strerror(err));
    return void(port_.cm_reply(c, err, nullptr, 0));
  }
  LOG_DEBUG("client %u: listening on %s", c.client, ip_port_text(ip, r.port).c_str());
  directory_.publish_listener(ip, r.port);
  proto::CmListenRep rep{ip};
  port_.cm_reply(c, 0, &rep, sizeof(rep));
}

void CmService::on_request(const CmCaller& c, const proto::CmUnlistenReq& r) {
  uint32_t ip = r.ipv4 ? r.ipv4 : c.ipv4;
  int err = table_.unlisten(c.client, ip, r.port);
  if (err == 0) directory_.withdraw_listener(ip, r.port);
  port_.cm_reply(c, err, nullptr, 0);
}

void CmService::on_request(const CmCaller& c, const proto::CmResolveReq& r) {
  if (!owns(r.dst_ipv4)) {
    uint32_t host;
    if (int err = port_.cm_remote_host(r.dst_ipv4, &host))
      return void(port_.cm_reply(c, err, nullptr, 0));
  }
  proto::CmResolveRep rep{c.ipv4};
  port_.cm_reply(c, 0, &rep, sizeof(rep));
}

void CmService::on_request(const CmCaller& c, const proto::CmConnectReq& r) {
  uint32_t type;
  if (!port_.cm_qp_of(c.client, r.local_qpn, &type)) return void(port_.cm_reply(c, EPERM, nullptr, 0));
  if (!owns(r.dst_ipv4)) return connect_remote(c, r);
  const std::string where = ip_port_text(r.dst_ipv4, r.dst_port);
  const CmListener* l = table_.listener(r.dst_ipv4, r.dst_port);
  std::string tenant;
  if (!l || !port_.cm_client_tenant(l->client, &tenant)) {
    LOG_DEBUG("client %u: connect to %s refused: no listener", c.client, where.c_str());
    return void(port_.cm_reply(c, ECONNREFUSED, nullptr, 0));
  }
  if (!port_.cm_may_initiate(c.tenant, tenant)) {
    LOG_INFO("client %u: connect to %s refused: tenant %s -> %s", c.client, where.c_str(),
             c.tenant.c_str(), tenant.c_str());
    return void(port_.cm_reply(c, ECONNREFUSED, nullptr, 0));
  }
  const uint32_t listener = l->client;
  int err = EMFILE;
  CmConnection* conn = table_.add(c.client, r.cookie, r.local_qpn, listener, r.qp_type, &err);
  if (!conn) return void(port_.cm_reply(c, err, nullptr, 0));
  proto::CmConnectRep rep{conn->id};
  proto::CmRequestEvent ev = request_event(conn->id, l->cookie, c.ipv4, r);
  LOG_DEBUG("client %u: connection %u to %s (client %u)", c.client, conn->id, where.c_str(),
            listener);
  if (!port_.cm_reply(c, 0, &rep, sizeof(rep))) return;
  port_.cm_event(listener, proto::Op::kCmRequest, &ev, sizeof(ev));
}

void CmService::on_request(const CmCaller& c, const proto::CmAcceptReq& r) {
  CmConnection* conn = table_.find(r.conn_id);
  if (!conn || conn->passive_client != c.client) return void(port_.cm_reply(c, ENOENT, nullptr, 0));
  if (conn->state != CmState::kRequested) return void(port_.cm_reply(c, EINVAL, nullptr, 0));
  uint32_t type;
  if (!port_.cm_qp_of(c.client, r.local_qpn, &type)) return void(port_.cm_reply(c, EPERM, nullptr, 0));
  if (type != conn->qp_type) return void(port_.cm_reply(c, EINVAL, nullptr, 0));
  conn->passive_qpn = r.local_qpn;
  conn->state = CmState::kAccepted;
  conn->since_ns = now_ns();
  proto::CmEvent ev = event_with_private_data(conn->id, conn->active_cookie, r);
  ev.remote_qpn = r.local_qpn;
  ev.qkey = r.qkey;
  ev.params = r.params;
  const CmConnection other = *conn;
  // UD has no RTU and no disconnect: the exchange ends with the reply (as SIDR does).
  if (conn->qp_type == static_cast<uint32_t>(proto::QpType::kUd)) table_.erase(conn->id);
  if (!port_.cm_reply(c, 0, nullptr, 0)) return;
  if (other.remote()) return forward(other, proto::Op::kCmReply, &ev, sizeof(ev));
  event(other.active_client, proto::Op::kCmReply, ev);
}

void CmService::on_request(const CmCaller& c, const proto::CmRejectReq& r) {
  CmConnection* conn = table_.find(r.conn_id);
  if (!conn || conn->passive_client != c.client) return void(port_.cm_reply(c, ENOENT, nullptr, 0));
  if (conn->state != CmState::kRequested) return void(port_.cm_reply(c, EINVAL, nullptr, 0));
  proto::CmEvent ev = event_with_private_data(conn->id, conn->active_cookie, r);
  const CmConnection other = *conn;
  table_.erase(conn->id);
  if (!port_.cm_reply(c, 0, nullptr, 0)) return;
  if (other.remote()) return forward(other, proto::Op::kCmRejected, &ev, sizeof(ev));
  event(other.active_client, proto::Op::kCmRejected, ev);
}

void CmService::on_request(const CmCaller& c, const proto::CmRtuReq& r) {
  CmConnection* conn = table_.find(r.conn_id);
  if (!conn || conn->active_client != c.client) return void(port_.cm_reply(c, ENOENT, nullptr, 0));
  if (conn->state != CmState::kAccepted) return void(port_.cm_reply(c, EINVAL, nullptr, 0));
  conn->state = CmState::kEstablished;
  if (!port_.cm_reply(c, 0, nullptr, 0)) return;
  if (conn->remote()) {
    proto::CmConnReq fwd{0, 0};
    return forward(*conn, proto::Op::kCmRtu, &fwd, sizeof(fwd));
  }
  proto::CmEvent ev{};
  ev.conn_id = conn->id;
  ev.remote_qpn = conn->active_qpn;
  event(conn->passive_client, proto::Op::kCmEstablished, ev);
}

void CmService::tell_disconnect(const CmConnection& conn, bool passive_side_left) {
  proto::CmEvent ev{};
  ev.conn_id = conn.id;
  proto::Op op = proto::Op::kCmDisconnected;
  uint32_t to = conn.passive_client;
  if (passive_side_left) {
    // An acceptor that drops a request it never answered rejects it.
    to = conn.active_client;
    ev.cookie = conn.active_cookie;
    if (conn.state == CmState::kRequested) {
      op = proto::Op::kCmRejected;
      ev.reason = ECONNREFUSED;
    }
  }
  if (to) event(to, op, ev);
}

void CmService::on_request(const CmCaller& c, const proto::CmDisconnectReq& r) {
  CmConnection* conn = table_.find(r.conn_id);
  const bool as_passive = r.passive != 0;
  if (!conn || (as_passive ? conn->passive_client : conn->active_client) != c.client)
    return void(port_.cm_reply(c, ENOENT, nullptr, 0));
  const CmConnection other = *conn;
  table_.erase(conn->id);
  if (!port_.cm_reply(c, 0, nullptr, 0)) return;
  if (other.remote()) {
    proto::CmConnReq fwd{0, as_passive ? 1u : 0u};
    return forward(other, proto::Op::kCmDisconnect, &fwd, sizeof(fwd));
  }
  tell_disconnect(other, as_passive);
}

void CmService::client_gone(uint32_t client, bool notify) {
  for (const auto& [ip, port] : table_.listeners_of(client))
    directory_.withdraw_listener(ip, port);
  std::vector<CmNotice> notices = table_.remove_client(client);
  if (!notify) return;
  for (const CmNotice& n : notices) {
    if (n.remote_host != CmConnection::kLocal) {
      CmConnection side;
      side.id = n.conn_id;
      side.remote_host = n.remote_host;
      side.remote_conn = n.remote_conn;
      proto::CmConnReq fwd{0, n.passive_gone ? 1u : 0u};
      forward(side, proto::Op::kCmDisconnect, &fwd, sizeof(fwd));
      continue;
    }
    proto::CmEvent ev{};
    ev.conn_id = n.conn_id;
    ev.cookie = n.cookie;
    ev.reason = n.reason;
    event(n.client, n.op, ev);
  }
}

}  // namespace vrdma::daemon
