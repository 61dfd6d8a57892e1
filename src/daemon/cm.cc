// The connection manager's requests (rdma_cm over the control protocol). Listeners and
// connections live in cm_ (CmTable); the QPs on both sides stay the clients' own, and each
// client moves its QPs through their states itself, as librdmacm does over a kernel CM.
#include <arpa/inet.h>
#include <errno.h>

#include <algorithm>
#include <cstring>

#include "daemon/daemon.h"
#include "daemon/log.h"

namespace vrdma::daemon {

namespace {

std::string ip_port(uint32_t ipv4, uint16_t port) {
  char buf[INET_ADDRSTRLEN] = {};
  in_addr a{ipv4};
  ::inet_ntop(AF_INET, &a, buf, sizeof(buf));
  return std::string(buf) + ":" + std::to_string(port);
}

}  // namespace

void Daemon::handle_cm(Client& c, const Decoded& d) {
  if (auto* r = std::get_if<proto::CmListenReq>(&d.body))
    op_cm_listen(c, d, *r);
  else if (auto* r = std::get_if<proto::CmUnlistenReq>(&d.body))
    op_cm_unlisten(c, d, *r);
  else if (auto* r = std::get_if<proto::CmResolveReq>(&d.body))
    op_cm_resolve(c, d, *r);
  else if (auto* r = std::get_if<proto::CmConnectReq>(&d.body))
    op_cm_connect(c, d, *r);
  else if (auto* r = std::get_if<proto::CmAcceptReq>(&d.body))
    op_cm_accept(c, d, *r);
  else if (auto* r = std::get_if<proto::CmRejectReq>(&d.body))
    op_cm_reject(c, d, *r);
  else if (auto* r = std::get_if<proto::CmConnReq>(&d.body)) {
    if (d.op == proto::Op::kCmRtu)
      op_cm_rtu(c, d, *r);
    else
      op_cm_disconnect(c, d, *r);
  }
}

bool Daemon::owns_ipv4(uint32_t ipv4) const { return seen_ipv4_.count(ipv4) != 0; }


void Daemon::cm_send(uint32_t client, proto::Op op, const proto::CmEvent& ev) {
  Client* peer = find_live(client);
  if (!peer) return;
  send(*peer, op, 0, 0, &ev, sizeof(ev));
}

void Daemon::op_cm_listen(Client& c, const Decoded& d, const proto::CmListenReq& r) {
  uint32_t ip = r.ipv4 ? r.ipv4 : c.ident.ipv4;
  if (ip != c.ident.ipv4) return void(reply_error(c, d, EADDRNOTAVAIL));
  if (int err = cm_.listen(c.id, ip, r.port, r.cookie)) {
    LOG_DEBUG("client %u: listen on %s: %s", c.id, ip_port(ip, r.port).c_str(), strerror(err));
    return void(reply_error(c, d, err));
  }
  LOG_DEBUG("client %u: listening on %s", c.id, ip_port(ip, r.port).c_str());
  directory_->publish_listener(ip, r.port);
  proto::CmListenRep rep{ip};
  send(c, d.op, d.seq, 0, &rep, sizeof(rep));
}

void Daemon::op_cm_unlisten(Client& c, const Decoded& d, const proto::CmUnlistenReq& r) {
  uint32_t ip = r.ipv4 ? r.ipv4 : c.ident.ipv4;
  int err = cm_.unlisten(c.id, ip, r.port);
  if (err == 0) directory_->withdraw_listener(ip, r.port);
  send(c, d.op, d.seq, err, nullptr, 0);
}

void Daemon::op_cm_resolve(Client& c, const Decoded& d, const proto::CmResolveReq& r) {
  if (!owns_ipv4(r.dst_ipv4)) {
    uint32_t host;
    if (int err = cm_remote_host(r.dst_ipv4, &host)) return void(reply_error(c, d, err));
  }
  proto::CmResolveRep rep{c.ident.ipv4};
  send(c, d.op, d.seq, 0, &rep, sizeof(rep));
}

void Daemon::op_cm_connect(Client& c, const Decoded& d, const proto::CmConnectReq& r) {
  const QpRecord* qp = registry_.find_qp(r.local_qpn);
  if (!qp || qp->owner != c.id) return void(reply_error(c, d, EPERM));
  if (!owns_ipv4(r.dst_ipv4)) return cm_connect_remote(c, d, r);
  const CmListener* l = cm_.listener(r.dst_ipv4, r.dst_port);
  Client* owner = l ? find_live(l->client) : nullptr;
  if (!owner) {
    LOG_DEBUG("client %u: connect to %s refused: no listener", c.id,
              ip_port(r.dst_ipv4, r.dst_port).c_str());
    return void(reply_error(c, d, ECONNREFUSED));
  }
  if (owner->tenant != c.tenant) {
    LOG_INFO("client %u: connect to %s refused: tenant %s -> %s", c.id,
             ip_port(r.dst_ipv4, r.dst_port).c_str(), c.tenant.c_str(), owner->tenant.c_str());
    return void(reply_error(c, d, ECONNREFUSED));
  }
  CmConnection* conn = cm_.add(c.id, r.cookie, r.local_qpn, owner->id, r.qp_type);
  if (!conn) return void(reply_error(c, d, EMFILE));
  proto::CmConnectRep rep{conn->id};
  proto::CmRequestEvent ev = request_event(conn->id, l->cookie, c.ident.ipv4, r);
  LOG_DEBUG("client %u: connection %u to %s (client %u)", c.id, conn->id,
            ip_port(r.dst_ipv4, r.dst_port).c_str(), owner->id);
  if (!send(c, d.op, d.seq, 0, &rep, sizeof(rep))) return;
  send(*owner, proto::Op::kCmRequest, 0, 0, &ev, sizeof(ev));
}

void Daemon::op_cm_accept(Client& c, const Decoded& d, const proto::CmAcceptReq& r) {
  CmConnection* conn = cm_.find(r.conn_id);
  if (!conn || conn->passive_client != c.id) return void(reply_error(c, d, ENOENT));
  if (conn->state != CmState::kRequested) return void(reply_error(c, d, EINVAL));
  const QpRecord* qp = registry_.find_qp(r.local_qpn);
  if (!qp || qp->owner != c.id) return void(reply_error(c, d, EPERM));
  if (qp->type != conn->qp_type) return void(reply_error(c, d, EINVAL));
  conn->passive_qpn = r.local_qpn;
  conn->state = CmState::kAccepted;
  proto::CmEvent ev{};
  ev.conn_id = conn->id;
  ev.cookie = conn->active_cookie;
  ev.remote_qpn = r.local_qpn;
  ev.qkey = r.qkey;
  ev.params = r.params;
  ev.private_len = r.private_len;
  std::memcpy(ev.private_data, r.private_data, sizeof(ev.private_data));
  uint32_t active = conn->active_client;
  // UD has no RTU and no disconnect: the exchange ends with the reply (as SIDR does).
  CmConnection peer_side = *conn;
  if (conn->qp_type == static_cast<uint32_t>(proto::QpType::kUd)) cm_.erase(conn->id);
  if (!send(c, d.op, d.seq, 0, nullptr, 0)) return;
  if (peer_side.remote()) return cm_forward(peer_side, proto::Op::kCmReply, &ev, sizeof(ev));
  cm_send(active, proto::Op::kCmReply, ev);
}

void Daemon::op_cm_reject(Client& c, const Decoded& d, const proto::CmRejectReq& r) {
  CmConnection* conn = cm_.find(r.conn_id);
  if (!conn || conn->passive_client != c.id) return void(reply_error(c, d, ENOENT));
  if (conn->state != CmState::kRequested) return void(reply_error(c, d, EINVAL));
  proto::CmEvent ev{};
  ev.conn_id = conn->id;
  ev.cookie = conn->active_cookie;
  ev.private_len = r.private_len;
  std::memcpy(ev.private_data, r.private_data, sizeof(ev.private_data));
  uint32_t active = conn->active_client;
  CmConnection peer_side = *conn;
  cm_.erase(conn->id);
  if (!send(c, d.op, d.seq, 0, nullptr, 0)) return;
  if (peer_side.remote()) return cm_forward(peer_side, proto::Op::kCmRejected, &ev, sizeof(ev));
  cm_send(active, proto::Op::kCmRejected, ev);
}

void Daemon::op_cm_rtu(Client& c, const Decoded& d, const proto::CmConnReq& r) {
  CmConnection* conn = cm_.find(r.conn_id);
  if (!conn || conn->active_client != c.id) return void(reply_error(c, d, ENOENT));
  if (conn->state != CmState::kAccepted) return void(reply_error(c, d, EINVAL));
  conn->state = CmState::kEstablished;
  proto::CmEvent ev{};
  ev.conn_id = conn->id;
  ev.remote_qpn = conn->active_qpn;
  uint32_t passive = conn->passive_client;
  if (!send(c, d.op, d.seq, 0, nullptr, 0)) return;
  if (conn->remote()) {
    proto::CmConnReq fwd{0, 0};
    return cm_forward(*conn, proto::Op::kCmRtu, &fwd, sizeof(fwd));
  }
  cm_send(passive, proto::Op::kCmEstablished, ev);
}

void Daemon::op_cm_disconnect(Client& c, const Decoded& d, const proto::CmConnReq& r) {
  CmConnection* conn = cm_.find(r.conn_id);
  bool as_passive = r.passive != 0;
  if (!conn || (as_passive ? conn->passive_client : conn->active_client) != c.id)
    return void(reply_error(c, d, ENOENT));
  proto::CmEvent ev{};
  ev.conn_id = conn->id;
  uint32_t to;
  proto::Op op = proto::Op::kCmDisconnected;
  if (as_passive) {
    // An acceptor that drops a request it never answered rejects it.
    to = conn->active_client;
    ev.cookie = conn->active_cookie;
    if (conn->state == CmState::kRequested) {
      op = proto::Op::kCmRejected;
      ev.reason = ECONNREFUSED;
    }
  } else {
    to = conn->passive_client;
  }
  CmConnection peer_side = *conn;
  cm_.erase(conn->id);
  if (!send(c, d.op, d.seq, 0, nullptr, 0)) return;
  if (peer_side.remote()) {
    proto::CmConnReq fwd{0, as_passive ? 1u : 0u};
    return cm_forward(peer_side, proto::Op::kCmDisconnect, &fwd, sizeof(fwd));
  }
  cm_send(to, op, ev);
}

void Daemon::cm_client_gone(uint32_t client, bool notify) {
  if (directory_)
    for (const auto& [ip, port] : cm_.listeners_of(client))
      directory_->withdraw_listener(ip, port);
  std::vector<CmNotice> notices = cm_.remove_client(client);
  if (!notify) return;
  for (const CmNotice& n : notices) {
    if (n.remote_host != CmConnection::kLocal) {
      CmConnection side;
      side.id = n.conn_id;
      side.remote_host = n.remote_host;
      side.remote_conn = n.remote_conn;
      proto::CmConnReq fwd{0, n.passive_gone ? 1u : 0u};
      cm_forward(side, proto::Op::kCmDisconnect, &fwd, sizeof(fwd));
      continue;
    }
    proto::CmEvent ev{};
    ev.conn_id = n.conn_id;
    ev.cookie = n.cookie;
    ev.reason = n.reason;
    cm_send(n.client, n.op, ev);
  }
}

}  // namespace vrdma::daemon
