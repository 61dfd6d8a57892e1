// vrdmad: the per-host trusted control-path daemon. One thread, one epoll loop, no timers:
// an idle daemon sleeps in epoll_wait.
//
// Usage (also from tests):
//   Daemon d(config);
//   if (int rc = d.start(); rc < 0) ...;   // the socket exists once start() returned 0
//   std::thread t([&] { d.run(); });       // serves until stop()
//   d.stop(); t.join();
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <set>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/protocol.h"
#include "common/unix_socket.h"
#include "daemon/arena.h"
#include "daemon/client_identity.h"
#include "daemon/cm.h"
#include "daemon/config.h"
#include "daemon/decode.h"
#include "daemon/directory.h"
#include "daemon/registry.h"
#include "daemon/router.h"
#include "daemon/unique_fd.h"

namespace vrdma::daemon {

class Daemon {
 public:
  explicit Daemon(DaemonConfig config);
  ~Daemon();
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  // Creates the listening socket (mode 0666) and the event loop. Refuses (-EADDRINUSE) to
  // take over the socket of a daemon that still answers on it. 0 or -errno.
  int start();
  // Serves clients until stop(). Returns 0, or -errno when the event loop itself failed.
  // Before returning it closes every client and removes the socket it created.
  int run();
  // Asks run() to return. Safe from any thread and from a signal handler.
  void stop();

  const DaemonConfig& config() const { return cfg_; }
  uint64_t boot_id() const { return boot_; }

 private:
  struct FdEntry {
    UniqueFd fd;
    proto::FdKind kind{};
    uint64_t size = 0;
  };
  struct Client {
    uint32_t id = 0;
    UniqueFd sock;
    bool identified = false;
    std::string identify_error;
    Identity ident;
    std::string tenant;
    uint32_t kind = 0;  // proto::ClientKind once hello is true
    bool hello = false;
    bool doomed = false;  // scheduled for drop; nothing more is read from or sent to it
    std::string drop_reason;
    int protocol_errors = 0;
    std::map<uint32_t, FdEntry> fds;
    ArenaMap arena;
  };

  // Event loop.
  void accept_clients();
  void on_client_event(uint32_t id, uint32_t events);
  void handle_packet(Client& c, Packet& p, int payload_len);
  void fail(Client& c, const std::string& why);  // schedule a drop
  void reap();                                   // drop every scheduled client
  void drop(Client& c, const std::string& why, bool notify_peers);
  void shutdown_all();
  Client* find_live(uint32_t id);

  // Replies. A send that fails for any reason (EAGAIN included) drops the client.
  bool send(Client& c, proto::Op op, uint32_t seq, int32_t status, const void* payload, size_t len,
            std::span<const int> fds = {});
  bool reply_error(Client& c, const Decoded& d, int error);

  // Ops (ops.cc).
  void op_hello(Client& c, const Decoded& d, const proto::HelloReq& r);
  void op_put_fd(Client& c, const Decoded& d, const proto::PutFdReq& r, UniqueFd fd);
  void op_drop_fd(Client& c, const Decoded& d, const proto::DropFdReq& r);
  void op_get_fd(Client& c, const Decoded& d, const proto::GetFdReq& r);
  void op_alloc_qpn(Client& c, const Decoded& d, const proto::AllocQpnReq& r);
  void op_free_qpn(Client& c, const Decoded& d, const proto::FreeQpnReq& r);
  void op_connect_qp(Client& c, const Decoded& d, const proto::ConnectQpReq& r);
  void op_alloc_key(Client& c, const Decoded& d, const proto::AllocKeyReq& r);
  void op_free_key(Client& c, const Decoded& d, const proto::FreeKeyReq& r);
  void op_status(Client& c, const Decoded& d);
  // A destination that is not one of this host's clients: through the router (async reply).
  void route_remote(Client& c, const Decoded& d, const proto::ConnectQpReq& r,
                    uint32_t dest_ipv4);
  Router::Hooks router_hooks();
  // An rdma_cm message another host's daemon forwarded (cm_remote.cc).
  void on_remote_cm(uint32_t host, const wire::Cm& m);
  void notify_qp_fatal(uint32_t client, uint32_t qpn, proto::FatalReason why);

  // Connection manager (cm.cc).
  void handle_cm(Client& c, const Decoded& d);
  void op_cm_listen(Client& c, const Decoded& d, const proto::CmListenReq& r);
  void op_cm_unlisten(Client& c, const Decoded& d, const proto::CmUnlistenReq& r);
  void op_cm_resolve(Client& c, const Decoded& d, const proto::CmResolveReq& r);
  void op_cm_connect(Client& c, const Decoded& d, const proto::CmConnectReq& r);
  void op_cm_accept(Client& c, const Decoded& d, const proto::CmAcceptReq& r);
  void op_cm_reject(Client& c, const Decoded& d, const proto::CmRejectReq& r);
  void op_cm_rtu(Client& c, const Decoded& d, const proto::CmConnReq& r);
  void op_cm_disconnect(Client& c, const Decoded& d, const proto::CmConnReq& r);
  void cm_send(uint32_t client, proto::Op op, const proto::CmEvent& ev);
  // Forgets the client's listeners and connections and tells the other sides (if notify).
  void cm_client_gone(uint32_t client, bool notify);
  bool owns_ipv4(uint32_t ipv4) const;
  // rdma_cm with a side on another host (cm_remote.cc).
  int cm_remote_host(uint32_t dst_ipv4, uint32_t* host);  // 0 or the error to reply with
  void cm_connect_remote(Client& c, const Decoded& d, const proto::CmConnectReq& r);
  // Sends a message about `conn` to the host of its other side.
  void cm_forward(const CmConnection& conn, proto::Op op, const void* body, size_t len);

  std::string status_text(const Client& viewer);
  bool sees_everything(const Client& viewer) const;
  std::string tenant_of(const Identity& ident) const;

  DaemonConfig cfg_;
  IdentityResolver identity_;
  Registry registry_;
  CmTable cm_;
  std::unique_ptr<Directory> directory_;
  std::unique_ptr<Router> router_;  // only with cfg_.router_listen
  // Addresses of the containers whose programs have said Hello since the daemon started: the
  // addresses this host answers for in rdma_cm (a connect there without a listener is refused
  // rather than unreachable).
  std::set<uint32_t> seen_ipv4_;
  UniqueFd listen_;
  UniqueFd epoll_;
  UniqueFd wake_;   // eventfd written by stop()
  UniqueFd spare_;  // released to shed a connection when the process runs out of descriptors
  uint64_t socket_dev_ = 0, socket_ino_ = 0;
  bool started_ = false;
  uint64_t boot_ = 0;
  std::chrono::steady_clock::time_point started_at_;
  uint32_t next_client_id_ = 1;
  std::map<uint32_t, std::unique_ptr<Client>> clients_;
  std::vector<uint32_t> doomed_;
  std::unique_ptr<Packet> packet_;  // one receive buffer; packets are handled one at a time
};

}  // namespace vrdma::daemon
