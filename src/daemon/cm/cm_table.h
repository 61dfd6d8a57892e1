// The connection manager's host-wide tables: rdma_cm listeners ((ip, port) -> client) and
// connections between a connector (active side) and an acceptor (passive side). Pure
// bookkeeping, no I/O; the service (cm_service.h) checks identities and sends the events.
//
// A connection whose other side is on another host keeps that side as (host, connection id
// there); the service forwards its messages through the router (cm_remote.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <utility>
#include <vector>

#include "common/protocol.h"

namespace vrdma::daemon {

struct CmListener {
  uint32_t client = 0;
  uint64_t cookie = 0;
};

enum class CmState : uint8_t {
  kRequested,    // CmRequest sent to the listener's client, no answer yet
  kAccepted,     // CmReply sent to the connector, waiting for its RTU
  kEstablished,  // RTU passed on
};

struct CmConnection {
  uint32_t id = 0;
  CmState state = CmState::kRequested;
  uint32_t qp_type = 0;
  uint32_t active_client = 0;
  uint64_t active_cookie = 0;
  uint32_t active_qpn = 0;
  uint32_t passive_client = 0;
  uint32_t passive_qpn = 0;
  // The other side is on another host (its client id here is 0): which host, and the id of the
  // connection there (learned from the first message that host sent about it).
  static constexpr uint32_t kLocal = UINT32_MAX;
  uint32_t remote_host = kLocal;
  uint32_t remote_conn = 0;
  bool remote() const { return remote_host != kLocal; }
  // When the connection last changed state (remote ones: a side waiting for the other host
  // gives up after a while).
  int64_t since_ns = 0;
};

// "Send `op` about connection `conn_id` to `client`."
struct CmNotice {
  uint32_t client = 0;
  proto::Op op{};
  uint32_t conn_id = 0;
  uint64_t cookie = 0;
  int32_t reason = 0;
  uint32_t remote_host = CmConnection::kLocal;  // the side to tell is on this host
  uint32_t remote_conn = 0;
  bool passive_gone = false;  // the acceptor's side went away (else the connector's)
};

// What the listener's client hears of a connection request: `req` as the connector sent it,
// from `src_ipv4`, for connection `conn_id` of this host.
proto::CmRequestEvent request_event(uint32_t conn_id, uint64_t listen_cookie, uint32_t src_ipv4,
                                    const proto::CmConnectReq& req);

// What a listener or a connection costs its client (the connector, for a connection). The
// daemon counts it against the client's container (quotas).
enum class CmCharge : uint8_t { kListener, kConnection };
struct CmQuotaHooks {
  // 0, or the errno to refuse with.
  std::function<int(uint32_t client, CmCharge what)> charge;
  std::function<void(uint32_t client, CmCharge what)> release;
};

class CmTable {
 public:
  // Per client, whatever the hooks allow.
  static constexpr size_t kMaxConnectionsPerClient = 16384;
  static constexpr size_t kMaxListenersPerClient = 1024;
  // Connections that clients of one other host may have requested of this host's listeners:
  // a flood from one host cannot take what the others need.
  static constexpr size_t kMaxConnectionsFromHost = 4096;

  // Connection ids come from `random32` (tests); by default from the kernel's CSPRNG, so that
  // nobody can guess another connection's id.
  explicit CmTable(std::function<uint32_t()> random32 = {});

  // Every listener and connection is charged to its client through `hooks` (and released with
  // it), on top of the per-client limits above.
  void set_quota_hooks(CmQuotaHooks hooks) { hooks_ = std::move(hooks); }

  // 0, EADDRINUSE, EMFILE (quota), or what the quota hook refused with.
  int listen(uint32_t client, uint32_t ipv4, uint16_t port, uint64_t cookie);
  // 0 or ENOENT (no such listener of this client).
  int unlisten(uint32_t client, uint32_t ipv4, uint16_t port);
  const CmListener* listener(uint32_t ipv4, uint16_t port) const;
  std::vector<std::pair<uint32_t, uint16_t>> listeners_of(uint32_t client) const;

  // A new connection in state kRequested, with an unpredictable id; nullptr when the connector
  // is over its quota (*err, when given: EMFILE or what the quota hook refused with).
  CmConnection* add(uint32_t active_client, uint64_t active_cookie, uint32_t active_qpn,
                    uint32_t passive_client, uint32_t qp_type, int* err = nullptr);
  // A connection that a client of another host (connection `remote_conn` there) requests of
  // a listener of ours; nullptr when that host is over kMaxConnectionsFromHost.
  CmConnection* add_from_host(uint32_t host, uint32_t remote_conn, uint32_t active_qpn,
                              uint32_t passive_client, uint32_t qp_type);
  CmConnection* find(uint32_t conn_id);
  const CmConnection* find(uint32_t conn_id) const;
  // The connection whose other side is connection `remote_conn` on host `host`.
  CmConnection* find_remote(uint32_t host, uint32_t remote_conn);
  // Every connection with a side on `host`; every connection with a side on another host.
  std::vector<uint32_t> connections_with(uint32_t host) const;
  std::vector<uint32_t> remote_connections() const;
  bool has_remote() const { return remote_count_ != 0; }
  // Our connector's request goes to `host`.
  void set_remote(CmConnection& c, uint32_t host);
  void erase(uint32_t conn_id);

  // The client is gone: forgets its listeners and connections, and returns what the other
  // sides must be told (CmRejected for a request it never answered, else CmDisconnected).
  std::vector<CmNotice> remove_client(uint32_t client);

  size_t listener_count() const { return listeners_.size(); }
  size_t connection_count() const { return conns_.size(); }

 private:
  std::map<std::pair<uint32_t, uint16_t>, CmListener> listeners_;
  std::map<uint32_t, CmConnection> conns_;
  std::map<uint32_t, size_t> conns_per_client_;  // as connector
  std::map<uint32_t, size_t> listeners_per_client_;
  CmQuotaHooks hooks_;
  std::map<uint32_t, size_t> conns_per_host_;    // requested by clients of another host
  std::function<uint32_t()> random32_;
  size_t remote_count_ = 0;  // connections with a side on another host
};

}  // namespace vrdma::daemon
