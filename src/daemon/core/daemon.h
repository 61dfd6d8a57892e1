// vrdmad: the per-host trusted control-path daemon. One thread, one epoll loop, no timers:
// an idle daemon sleeps in epoll_wait.
//
//   daemon.cc       the event loop: clients connect, send requests, go away
//   dispatch.cc     one request: decoded (decode.h), checked, handed to its handler
//   verbs_ops.cc    the verbs requests: descriptors, QPNs, connections, keys
//   status_view.cc  the Status reply
//   metrics_view.cc the metrics endpoint (Prometheus): what a scrape reads, in this loop
//   ports.cc        what the rdma_cm service and the router ask of the daemon
//   client_admission.cc  who a new connection is, whether it gets a device, its quotas
//   reload_op.cc    reloading the configuration (SIGHUP, the Reload request)
//
// Usage (also from tests):
//   Daemon d(config);
//   if (int err = d.start(); err != 0) ...;  // the socket exists once start() returned 0
//   std::thread t([&] { d.run(); });         // serves until stop()
//   d.stop(); t.join();
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/protocol.h"
#include "common/unique_fd.h"
#include "common/unix_socket.h"
#include "daemon/cm/cm_service.h"
#include "daemon/core/client.h"
#include "daemon/core/config.h"
#include "daemon/core/decode.h"
#include "daemon/core/quotas.h"
#include "daemon/directory/directory.h"
#include "daemon/identity/client_identity.h"
#include "daemon/metrics/metrics_server.h"
#include "daemon/metrics/snapshot.h"
#include "daemon/registry/registry.h"
#include "daemon/router/router.h"

namespace vrdma::daemon {

// What a reload of the configuration did: 0 or an errno, and one line per change.
struct ReloadOutcome {
  int error = 0;
  std::string text;
};

class Daemon : private CmPort {
 public:
  explicit Daemon(DaemonConfig config);
  ~Daemon() override;
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  // Creates the listening socket (mode 0660, group cfg.socket_group) and the event loop. Refuses
  // (EADDRINUSE) to take over the socket of a daemon that still answers on it. 0 or a positive
  // errno.
  int start();
  // Serves clients until stop(). Returns 0, or a positive errno when the event loop itself
  // failed. Before returning it closes every client and removes the socket it created.
  int run();
  // Asks run() to return. Safe from any thread and from a signal handler.
  void stop();

  // Reloading the configuration (reload_op.cc): `handler` runs in the event loop after
  // request_reload() (safe from a signal handler: SIGHUP) and for a Reload request of the host's
  // administrator, whose reply carries what it returns.
  void set_reload_handler(std::function<ReloadOutcome()> handler);
  void request_reload();
  // New tenant rules, in the event loop (a reload): connections made from now on are admitted
  // by them, and so are requests from other hosts (the tenant of their source address). A
  // connected client keeps the tenant it was admitted with until it reconnects.
  void set_tenant_rules(std::vector<TenantRule> rules);
  // The QoS rules in force from now on (qos_op.cc): what `rules` names changes, a container or
  // tenant it no longer names goes back to the defaults.
  void set_qos_rules(const qos::RuleSet& rules);

  const DaemonConfig& config() const { return cfg_; }
  uint64_t boot_id() const { return boot_; }

 private:
  // The event loop (daemon.cc).
  int listen_on_socket();
  int start_services();  // directory, rdma_cm, router
  void accept_clients();
  void on_client_event(uint32_t id, uint32_t events);
  void schedule_drop(Client& c, const std::string& why);
  void reap();  // drops every client scheduled for it
  void drop(Client& c, const std::string& why, bool notify_peers);
  // Whether a verbs client other than `except` still uses the address.
  bool address_in_use(uint32_t ipv4, uint32_t except) const;
  // The address of a container without clients stays served (rdma_cm resolves it, its
  // directory entry stays) while its network namespace is pinned in the netns directory: the
  // container is still there. Once the pin is gone, so is the container: withdrawn.
  void address_idle(const Client& c);
  void check_idle_addresses(int64_t now);
  void withdraw_address(uint32_t ipv4);
  void shutdown_all();
  Client* find_live(uint32_t id);

  // Who a new connection is and what it may do (client_admission.cc).
  bool admit_client(Client& c);    // false: close it at once
  // The tenant the platform's file gives a client's namespace ("" for none, or without one).
  std::string platform_tenant(const Identity& id) const;
  void release_client(Client& c);  // gives back everything the client counted, at its drop
  int charge(Client& c, Resource r, uint64_t n = 1);
  void release(Client& c, Resource r, uint64_t n = 1);
  // A verbs Hello: 0 when the client gets a device, else the errno it is refused with.
  int admit_device(Client& c);
  // Replies. A send that fails for any reason (EAGAIN included) drops the client.
  bool send(Client& c, proto::Op op, uint32_t seq, int32_t status, const void* payload, size_t len,
            std::span<const int> fds = {});
  bool reply_error(Client& c, const Decoded& d, int error);

  // One request (dispatch.cc).
  void handle_packet(Client& c, Packet& p, int payload_len);
  CmCaller cm_caller(const Client& c, const Decoded& d) const;

  // The verbs requests (verbs_ops.cc); one overload per request.
  void handle(Client& c, const Decoded& d, const proto::HelloReq& r);
  void handle(Client& c, const Decoded& d, const proto::PutFdReq& r);
  void handle(Client& c, const Decoded& d, const proto::DropFdReq& r);
  void handle(Client& c, const Decoded& d, const proto::GetFdReq& r);
  void handle(Client& c, const Decoded& d, const proto::AllocQpnReq& r);
  void handle(Client& c, const Decoded& d, const proto::FreeQpnReq& r);
  void handle(Client& c, const Decoded& d, const proto::ConnectQpReq& r);
  void handle(Client& c, const Decoded& d, const proto::AllocKeyReq& r);
  void handle(Client& c, const Decoded& d, const proto::FreeKeyReq& r);
  void handle(Client& c, const Decoded& d, const proto::StatusReq& r);
  void handle(Client& c, const Decoded& d, const proto::ReloadReq& r);  // reload_op.cc
  void handle(Client& c, const Decoded& d, const proto::QosReq& r);     // qos_op.cc
  ReloadOutcome reload();
  void handle(Client& c, const Decoded& d, const proto::SetQpObjectReq& r);
  void handle(Client& c, const Decoded& d, const proto::GetMrReq& r);

  // Grants (grants.cc): what a client may get of another client's shared memory.
  int accept_fd(Client& c, const proto::PutFdReq& r, UniqueFd& fd, ClientFd& out);
  std::vector<const QpRecord*> reachable(const Client& req, uint32_t via,
                                         const Client& owner) const;
  int describe_mr(const Client& owner, const KeyRecord& k, uint32_t key, proto::GetMrRep& rep,
                  const ClientFd** files) const;
  bool objects_ok(const Client& c, uint32_t object, uint32_t srq, uint32_t notify) const;
  int router_grant(uint32_t owner, uint32_t key, shm::MrGrant& out);
  uint8_t* router_kept_mapping(uint32_t owner, uint32_t fd_id, uint64_t& size);
  // A ConnectQp whose destination is on another host: through the router (async reply).
  void connect_routed(Client& c, const Decoded& d, const proto::ConnectQpReq& r,
                      uint32_t dest_ipv4);

  // The metrics endpoint (metrics_view.cc): the page, its server in this loop.
  int start_metrics();
  int metrics_timeout(int timeout_ms) const;  // epoll's timeout with the scrapes' deadlines
  std::string metrics_text();
  // A QP's last counters go to its container's totals (it is being destroyed, or its owner).
  void metrics_retire(const Client& c, uint32_t qpn);
  metrics::QpSample metrics_qp(const Client& c, uint32_t qpn, uint32_t* send_cq,
                               uint32_t* recv_cq) const;
  metrics::ContainerSample metrics_container(const Client& c) const;
  // The Status reply (status_view.cc).
  std::string status_text(const Client& viewer);
  bool sees_everything(const Client& viewer) const;

  // What the router asks of the daemon (ports.cc).
  Router::Hooks router_hooks();
  void notify_qp_fatal(uint32_t client, uint32_t qpn, proto::FatalReason why);
  // CmPort (ports.cc).
  bool cm_reply(const CmCaller& to, int status, const void* payload, size_t len) override;
  void cm_event(uint32_t client, proto::Op op, const void* payload, size_t len) override;
  bool cm_client_tenant(uint32_t client, std::string* tenant) override;
  std::string cm_tenant_of(uint32_t ipv4) override;
  // The tenant of another host's container address: by the --tenant rules, or with tenants
  // from the platform, as its host published it in the directory ("" when none).
  std::string remote_tenant_of(uint32_t ipv4);
  bool cm_qp_of(uint32_t client, uint32_t qpn, uint32_t* type) override;
  int cm_charge(uint32_t client, CmCharge what) override;
  void cm_release(uint32_t client, CmCharge what) override;
  int cm_remote_host(uint32_t ipv4, uint32_t* host) override;
  int cm_send_to_host(uint32_t host, const wire::Cm& m) override;

  DaemonConfig cfg_;
  IdentityResolver identity_;
  Registry registry_;
  ContainerQuotas quotas_;
  size_t refused_pending_ = 0;  // refused connections waiting for their Hello
  std::unique_ptr<Directory> directory_;
  std::unique_ptr<CmService> cm_;
  std::unique_ptr<Router> router_;  // only with cfg_.router_listen
  std::unique_ptr<metrics::MetricsServer> metrics_;  // only with cfg_.metrics_listen
  metrics::CounterLedger metrics_ledger_;
  std::map<uint32_t, NetnsId> idle_addresses_;  // address -> its container's namespace
  int64_t next_idle_check_ns_ = 0;
  UniqueFd listen_;
  UniqueFd epoll_;
  UniqueFd wake_;    // eventfd written by stop()
  UniqueFd reload_;  // eventfd written by request_reload()
  std::function<ReloadOutcome()> reload_handler_;
  UniqueFd spare_;  // released to shed a connection when the process runs out of descriptors
  uint64_t socket_dev_ = 0, socket_ino_ = 0;
  bool started_ = false;
  uint64_t boot_ = 0;
  std::chrono::steady_clock::time_point started_at_;
  uint32_t next_client_id_ = 1;
  std::map<uint32_t, std::unique_ptr<Client>> clients_;
  std::vector<uint32_t> doomed_;
  std::unique_ptr<Packet> packet_;  // one receive buffer; packets are handled one at a time
  UniqueFd received_fds_[proto::kMaxFdsPerMessage];  // of the packet being handled
};

}  // namespace vrdma::daemon
