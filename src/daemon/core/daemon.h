// vrdmad: the per-host trusted control-path daemon. One control thread, one epoll loop, no
// timers: an idle daemon sleeps in epoll_wait. The router (across hosts) runs on a thread of
// its own (router/router_thread.h); the control thread holds state_mu_ while it handles
// events, and the router's questions about the daemon's state (ports.cc) take it too.
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

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <memory>
#include <mutex>
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
#include "daemon/core/mcast_table.h"
#include "daemon/core/pacing_table.h"
#include "daemon/core/locked_directory.h"
#include "daemon/core/quotas.h"
#include "daemon/direct/direct_port.h"
#include "daemon/direct/socket_stats.h"
#include "daemon/direct/tickets.h"
#include "daemon/directory/directory.h"
#include "daemon/identity/client_identity.h"
#include "daemon/metrics/metrics_server.h"
#include "daemon/metrics/snapshot.h"
#include "daemon/registry/registry.h"
#include "daemon/registry/xrcd_table.h"
#include "daemon/router/router.h"
#include "daemon/router/router_pool.h"

namespace vrdma::daemon {

// What a reload of the configuration did: 0 or an errno, and one line per change.
struct ReloadOutcome {
  int error = 0;
  std::string text;
};

// Whether a QP of type `local` may connect to one of type `dest` (xrc_ops.cc): the same type,
// or an XRC_SEND QP and an XRC_RECV QP.
bool connectable_types(uint32_t local, uint32_t dest);

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
  // New --allow rules (mediated.cc), in the event loop: for connections made from now on.
  void set_tenant_allow(std::vector<TenantAllow> rules);
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
  bool admit_client(Client& c);  // false: close it at once
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
  void handle(Client& c, const Decoded& d, const proto::PacingReq& r);  // qos_op.cc
  ReloadOutcome reload();
  void handle(Client& c, const Decoded& d, const proto::SetQpObjectReq& r);
  void handle(Client& c, const Decoded& d, const proto::GetMrReq& r);
  // XRC (xrc_ops.cc).
  void handle(Client& c, const Decoded& d, const proto::OpenXrcdReq& r);
  void handle(Client& c, const Decoded& d, const proto::CloseXrcdReq& r);
  void handle(Client& c, const Decoded& d, const proto::SetQpXrcdReq& r);
  void handle(Client& c, const Decoded& d, const proto::OpenXrcQpReq& r);
  const QpRecord* xrc_target_of(const Client& req, const QpRecord& via, uint32_t via_qpn) const;
  void connect_xrc_srq(Client& c, const Decoded& d, const proto::ConnectQpReq& r,
                       const QpRecord& local, const QpRecord& dest);
  void reachable_xrc(const Client& req, const QpRecord& via, uint32_t via_qpn,
                     const Client& owner, std::vector<const QpRecord*>& out) const;
  // XRC_RECV QPs held by processes other than their maker (xrc_shared_ops.cc).
  struct SharedXrcQp {
    std::map<uint32_t, uint32_t> holders;  // client (not the owner) -> its handles
    uint32_t owner_handles = 1;            // the maker's library: 1 while it has any
    bool handed = false;                   // the owner holds it since its maker went
  };
  void open_shared_xrc_qp(Client& c, const Decoded& d, uint32_t qpn, const QpRecord& q);
  void handle(Client& c, const Decoded& d, const proto::CloseXrcQpReq& r);
  bool holds_xrc_qp(uint32_t client, uint32_t qpn) const;
  bool hand_over_xrc_qp(Client& from, uint32_t qpn, SharedXrcQp& s);
  void xrc_client_gone(Client& c);
  void xrc_qp_freed(uint32_t qpn) { shared_xrc_.erase(qpn); }
  // UD multicast (multicast.cc).
  void handle(Client& c, const Decoded& d, const proto::McastReq& r);
  void mcast_changed(const std::set<std::string>& tenants);
  // What the directory holds of the client's container: its name, tenant and the IPv4 groups
  // the QPs of every client at its address joined; and publishing it again after a change.
  ContainerInfo container_info(const Client& c) const;
  void publish_groups(const Client& c);

  // Grants (grants.cc): what a client may get of another client's shared memory.
  int accept_fd(Client& c, const proto::PutFdReq& r, UniqueFd& fd, ClientFd& out);
  std::vector<const QpRecord*> reachable(const Client& req, uint32_t via,
                                         const Client& owner) const;
  int describe_mr(const Client& owner, const KeyRecord& k, uint32_t key, proto::GetMrRep& rep,
                  const ClientFd** files) const;
  bool objects_ok(const Client& c, uint32_t object, uint32_t srq, uint32_t notify) const;
  // Implicit ODP MRs (implicit_odp.cc): their keys, and the registration that serves a range
  // of one (0), or EAGAIN after the owner was asked to register it, or EACCES.
  void alloc_implicit_key(Client& c, const Decoded& d, const proto::AllocKeyReq& r);
  int implicit_target(const Client& owner, const KeyRecord& k, uint32_t key, uint64_t addr,
                      uint64_t length, bool notify_here, uint32_t& target);
  int router_grant(uint32_t owner, uint32_t key, uint64_t addr, uint64_t length,
                   shm::MrGrant& out);
  uint8_t* router_kept_mapping(uint32_t owner, uint32_t fd_id, uint64_t& size);
  // A ConnectQp whose destination is on another host: through the router (async reply).
  // mediated: the destination is a local QP of another tenant that policy lets this client's
  // tenant pair with; the connection goes through the router's link to this host itself
  // (mediated.cc), never through shared memory.
  void connect_routed(Client& c, const Decoded& d, const proto::ConnectQpReq& r, uint32_t dest_ipv4,
                      bool mediated = false);
  // The direct path (direct.cc). A ConnectQp to a container of another host of the client's
  // tenant: the destination's host keeps a ticket (the router's kDirect), this daemon opens a
  // TCP connection from the client's container to the destination's direct port, and the reply
  // hands it over once the far end's vrdmad took the ticket. Why a connection to `dst_ipv4`
  // goes through the routers instead (nullptr: it goes direct).
  const char* routed_why(const Client& c, const QpRecord& local, uint32_t dst_ipv4);
  void connect_direct(Client& c, const Decoded& d, const proto::ConnectQpReq& r,
                      uint32_t dst_ipv4);
  void dial_direct(Client& c, const Decoded& d, const proto::ConnectQpReq& r, uint32_t dst_ipv4,
                   uint16_t port, const TicketId& ticket, uint32_t dst_type, uint64_t dst_key);
  // A connection between two containers of this host first crosses the pod network (the
  // policy's say, as across hosts): false when the ConnectQp waits for that (it is handled
  // again once the probe is answered) or was answered (EAGAIN: not reachable).
  bool probe_local(Client& c, const Decoded& d, const proto::ConnectQpReq& r,
                   const QpRecord& local, const Client& owner);
  // The probe itself: a connection from `c`'s container to `dst_ipv4`'s direct port that
  // presents a ticket kept there (by this host, or by the other host through the router),
  // answered and closed. `done` gets 0 (through, or nothing there to ask: no direct port) or
  // an errno (ECONNREFUSED, ETIMEDOUT: what a rule that drops it looks like).
  void probe(Client& c, uint32_t src_qpn, uint32_t dst_ipv4, uint32_t dst_qpn, uint32_t qp_type,
             std::function<void(int status)> done);
  // rdma_cm's connect: through the pod network first (EHOSTUNREACH when it is not let through:
  // the connector hears RDMA_CM_EVENT_UNREACHABLE), then as the rdma_cm service says.
  void connect_cm(Client& c, const Decoded& d, const proto::CmConnectReq& r);
  // The live container of this host at an address, with a direct port (null: none).
  Client* container_at(uint32_t ipv4);
  // The direct port of a container: opened with its first device, closed with its last client.
  void direct_port_open(Client& c);
  void direct_port_release(Client& c);
  bool has_direct_port(const NetnsId& ns) const;
  void direct_qp_freed(uint32_t qpn);
  void direct_arrival(DirectPort::Arrival& a);
  // The router's hook: another host asks for a ticket (router thread, under state_mu_).
  int keep_remote_ticket(const wire::Direct& d, const LocalQp* dst, uint16_t* port,
                         uint64_t* key);
  void handle(Client& c, const Decoded& d, const proto::DirectTakeReq& r);
  void handle(Client& c, const Decoded& d, const proto::AdoptMemoryReq& r);  // adopt_memory.cc
  // The router for the mediated path: the cluster's, or one made for this host alone (null
  // when it cannot be made).
  RouterPool* mediation_router();
  // Makes router_ with `rc`, starts it and watches its control queue. 0 or an errno.
  int make_router(const RouterConfig& rc);
  // The tenant of an address for requests that reach the router: a local client's, else as
  // remote_tenant_of says.
  std::string tenant_of_address(uint32_t ipv4);

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
  bool cm_may_initiate(const std::string& from, const std::string& to) override;
  // The tenant of another host's container address: by the --tenant rules, or with tenants
  // from the platform, as its host published it in the directory ("" when none).
  std::string remote_tenant_of(uint32_t ipv4);
  bool cm_qp_of(uint32_t client, uint32_t qpn, uint32_t* type) override;
  int cm_charge(uint32_t client, CmCharge what) override;
  void cm_release(uint32_t client, CmCharge what) override;
  int cm_remote_host(uint32_t ipv4, uint32_t* host) override;
  int cm_send_to_host(uint32_t host, const wire::Cm& m) override;

  DaemonConfig cfg_;
  // The daemon's state (clients, registry, directory, rdma_cm, configuration): the control
  // thread holds it while it handles events; the router thread takes it for its hooks.
  std::mutex state_mu_;
  // Odd while the control thread holds state_mu_, bumped at each take and release: what the
  // router thread cached of the state at an even value still holds while it is unchanged.
  std::atomic<uint64_t> state_gen_{0};
  IdentityResolver identity_;
  Registry registry_;
  XrcdTable xrcds_;
  std::map<uint32_t, SharedXrcQp> shared_xrc_;  // by QPN
  uint32_t next_handed_fd_id_ = 0;
  McastTable mcast_;
  PacingTable pacing_;  // same-host rate limits (cfg_.qos's)
  ContainerQuotas quotas_;
  size_t refused_pending_ = 0;  // refused connections waiting for their Hello
  std::unique_ptr<Directory> directory_;
  std::unique_ptr<CmService> cm_;
  std::unique_ptr<LockedDirectory> router_dir_;  // the directory, for the router thread
  // With cfg_.router_listen, or made for the mediated path (mediation_router()).
  std::unique_ptr<RouterPool> router_;
  TenantPolicy allow_;  // cfg_.allow
  // The direct path (direct.cc): its sockets in this loop, the tickets this host keeps, each
  // container's direct port (by namespace, with its clients), and the pairs of QPs whose
  // connection on this host crossed the pod network (or failed to, until when).
  std::unique_ptr<DirectPort> direct_;
  TicketTable tickets_;
  struct DirectListener {
    uint32_t id = 0;  // DirectPort's; 0 when the port could not be had
    size_t clients = 0;
    // NETLINK_SOCK_DIAG sockets in the namespace: one to read its sockets' statistics, one
    // told the final figures of each socket destroyed.
    UniqueFd diag, destroyed;
    DirectTraffic traffic;  // what the kernel counted on its direct-path connections
  };
  // Reads every namespace's direct-path statistics, at most every kDirectStatsNs unless
  // `force`.
  void sample_direct_traffic(int64_t now, bool force = false);
  void sample_direct_traffic(DirectListener& l);
  // The direct-path figures of namespace `ns`; false when it has no statistics.
  bool direct_traffic_of(const NetnsId& ns, SocketBytes* totals, size_t* connections) const;
  int64_t next_direct_stats_ns_ = 0;
  // A namespace's direct-path totals while it has no vrdma process: the next one's continue
  // from them (bounded: some are forgotten when it is full).
  std::map<NetnsId, SocketBytes> direct_carried_;
  std::map<NetnsId, DirectListener> direct_ports_;
  std::map<std::pair<uint32_t, uint32_t>, int64_t> probes_;  // (qpn, dest qpn) -> 0: passed
  std::set<std::pair<uint32_t, uint32_t>> probing_;
  std::map<uint32_t, int64_t> direct_failed_;  // qpn -> until when a dial is not tried again
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
