#include "daemon/cm/cm_table.h"

#include <errno.h>

#include <algorithm>
#include <cstring>

#include "common/random.h"

namespace vrdma::daemon {

CmTable::CmTable(std::function<uint32_t()> random32)
    : random32_(random32 ? std::move(random32) : random_u32) {}

int CmTable::listen(uint32_t client, uint32_t ipv4, uint16_t port, uint64_t cookie) {
  auto key = std::make_pair(ipv4, port);
  if (listeners_.count(key)) return EADDRINUSE;
  size_t& mine = listeners_per_client_[client];
  if (mine >= kMaxListenersPerClient) return EMFILE;
  if (hooks_.charge)
    if (int err = hooks_.charge(client, CmCharge::kListener)) return err;
  ++mine;
  listeners_[key] = CmListener{client, cookie};
  return 0;
}

int CmTable::unlisten(uint32_t client, uint32_t ipv4, uint16_t port) {
  auto it = listeners_.find(std::make_pair(ipv4, port));
  if (it == listeners_.end() || it->second.client != client) return ENOENT;
  listeners_.erase(it);
  auto n = listeners_per_client_.find(client);
  if (n != listeners_per_client_.end() && --n->second == 0) listeners_per_client_.erase(n);
  if (hooks_.release) hooks_.release(client, CmCharge::kListener);
  return 0;
}

const CmListener* CmTable::listener(uint32_t ipv4, uint16_t port) const {
  auto it = listeners_.find(std::make_pair(ipv4, port));
  return it == listeners_.end() ? nullptr : &it->second;
}

CmConnection* CmTable::add(uint32_t active_client, uint64_t active_cookie, uint32_t active_qpn,
                           uint32_t passive_client, uint32_t qp_type, int* err) {
  int refused = 0;
  size_t& n = conns_per_client_[active_client];
  if (n >= kMaxConnectionsPerClient)
    refused = EMFILE;
  else if (hooks_.charge)
    refused = hooks_.charge(active_client, CmCharge::kConnection);
  if (refused) {
    if (n == 0) conns_per_client_.erase(active_client);
    if (err) *err = refused;
    return nullptr;
  }
  // Not sequential: an id says nothing of the others. The table holds far fewer than 2^32
  // connections, so a free id is found within a few draws.
  uint32_t id = random32_();
  for (int tries = 0; id == 0 || conns_.count(id); ++tries) {
    if (tries > 64) {
      if (n == 0) conns_per_client_.erase(active_client);
      if (hooks_.release) hooks_.release(active_client, CmCharge::kConnection);
      if (err) *err = EAGAIN;
      return nullptr;
    }
    id = random32_();
  }
  ++n;
  CmConnection& c = conns_[id];
  c.id = id;
  c.qp_type = qp_type;
  c.active_client = active_client;
  c.active_cookie = active_cookie;
  c.active_qpn = active_qpn;
  c.passive_client = passive_client;
  return &c;
}

CmConnection* CmTable::add_from_host(uint32_t host, uint32_t remote_conn, uint32_t active_qpn,
                                     uint32_t passive_client, uint32_t qp_type) {
  size_t& n = conns_per_host_[host];
  if (n >= kMaxConnectionsFromHost) return nullptr;
  CmConnection* c = add(0, 0, active_qpn, passive_client, qp_type);
  if (!c) return nullptr;
  // Counted for the host, not for "client 0" that every other host would share.
  if (auto k = conns_per_client_.find(0); k != conns_per_client_.end() && --k->second == 0)
    conns_per_client_.erase(k);
  ++n;
  set_remote(*c, host);
  c->remote_conn = remote_conn;
  return c;
}

CmConnection* CmTable::find(uint32_t conn_id) {
  auto it = conns_.find(conn_id);
  return it == conns_.end() ? nullptr : &it->second;
}

const CmConnection* CmTable::find(uint32_t conn_id) const {
  auto it = conns_.find(conn_id);
  return it == conns_.end() ? nullptr : &it->second;
}

void CmTable::erase(uint32_t conn_id) {
  auto it = conns_.find(conn_id);
  if (it == conns_.end()) return;
  const CmConnection& c = it->second;
  const uint32_t active = c.active_client;
  if (c.remote()) --remote_count_;
  if (c.active_client == 0 && c.remote()) {
    auto h = conns_per_host_.find(c.remote_host);
    if (h != conns_per_host_.end() && --h->second == 0) conns_per_host_.erase(h);
  } else {
    auto n = conns_per_client_.find(c.active_client);
    if (n != conns_per_client_.end() && --n->second == 0) conns_per_client_.erase(n);
  }
  conns_.erase(it);
  if (hooks_.release) hooks_.release(active, CmCharge::kConnection);
}

std::vector<std::pair<uint32_t, uint16_t>> CmTable::listeners_of(uint32_t client) const {
  std::vector<std::pair<uint32_t, uint16_t>> out;
  for (const auto& [key, l] : listeners_)
    if (l.client == client) out.push_back(key);
  return out;
}

proto::CmRequestEvent request_event(uint32_t conn_id, uint64_t listen_cookie, uint32_t src_ipv4,
                                    const proto::CmConnectReq& req) {
  proto::CmRequestEvent ev{};
  ev.conn_id = conn_id;
  ev.remote_qpn = req.local_qpn;
  ev.listen_cookie = listen_cookie;
  ev.src_ipv4 = src_ipv4;
  ev.dst_ipv4 = req.dst_ipv4;
  ev.src_port = req.src_port;
  ev.dst_port = req.dst_port;
  ev.qp_type = req.qp_type;
  ev.qkey = req.qkey;
  ev.params = req.params;
  ev.private_len = req.private_len;
  std::memcpy(ev.private_data, req.private_data, sizeof(ev.private_data));
  return ev;
}

CmConnection* CmTable::find_remote(uint32_t host, uint32_t remote_conn) {
  for (auto& [id, c] : conns_)
    if (c.remote_host == host && c.remote_conn == remote_conn) return &c;
  return nullptr;
}

std::vector<uint32_t> CmTable::connections_with(uint32_t host) const {
  std::vector<uint32_t> out;
  for (const auto& [id, c] : conns_)
    if (c.remote_host == host) out.push_back(id);
  return out;
}

std::vector<uint32_t> CmTable::remote_connections() const {
  std::vector<uint32_t> out;
  for (const auto& [id, c] : conns_)
    if (c.remote()) out.push_back(id);
  return out;
}

void CmTable::set_remote(CmConnection& c, uint32_t host) {
  if (!c.remote()) ++remote_count_;
  c.remote_host = host;
}

std::vector<CmNotice> CmTable::remove_client(uint32_t client) {
  std::vector<CmNotice> out;
  for (auto it = listeners_.begin(); it != listeners_.end();) {
    if (it->second.client == client) {
      it = listeners_.erase(it);
      if (hooks_.release) hooks_.release(client, CmCharge::kListener);
    } else {
      ++it;
    }
  }
  listeners_per_client_.erase(client);
  std::vector<uint32_t> gone;
  for (const auto& [id, c] : conns_) {
    bool active = c.active_client == client, passive = c.passive_client == client;
    if (!active && !passive) continue;
    gone.push_back(id);
    if (active && passive) continue;  // both ends in the dead client
    CmNotice n;
    n.conn_id = id;
    n.remote_host = c.remote_host;
    n.remote_conn = c.remote_conn;
    n.passive_gone = passive;
    if (passive) {
      n.client = c.active_client;
      n.cookie = c.active_cookie;
      n.op = c.state == CmState::kRequested ? proto::Op::kCmRejected : proto::Op::kCmDisconnected;
      n.reason = c.state == CmState::kRequested ? ECONNREFUSED : 0;
    } else {
      n.client = c.passive_client;
      n.op = proto::Op::kCmDisconnected;
    }
    out.push_back(n);
  }
  for (uint32_t id : gone) erase(id);
  conns_per_client_.erase(client);
  return out;
}

}  // namespace vrdma::daemon
