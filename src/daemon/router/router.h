// The router: carries QPs' work between hosts over TCP links (link.h, wire.h), inside mutual
// TLS 1.3 (tls.h) unless the cluster runs in plaintext.
//
// Links (router_links.cc): a link is accepted only from the router address of a host the
// directory knows, at most a few per host and a bounded number in all; it must complete its
// TLS handshake and say Hello in time; its certificate, its Hello and its address must all
// name the same host. Nothing but a Hello is read from a link before that. A link nobody
// uses is closed after a while; so is one whose host left the directory.
//
// Lanes (router_lanes.cc): a host opens a link to another per lane, the main one and one for
// the latency class's QPs alone (opened when the first connects), so that their frames wait
// behind no bulk byte in a TCP stream. A QP's lane is fixed when it connects; all its frames
// take that lane's link.
//
// Requester side (router_requester.cc): a local QP whose destination is on another host hands
// its work requests to the router through its SendQueue in the client's arena. The router
// gathers the data straight from the client's registered memory, sends it on its link to the
// destination host, and completes each request into the QP's send CQ when the response comes
// back (data placed, READ data scattered, atomic value returned) or with RETRY_EXC_ERR when
// the link falls silent for longer than the QP's timeout and retry count allow. What the
// client writes (the queue's tail, its entries) is bounded and checked on every pass.
//
// Responder side (router_responder.cc): a request from another host belongs to a connection
// (a Connect from that host, for a source address the host owns); it reaches its destination
// QP only once that QP's RTR named the source (address and QPN), in sequence, with the type of
// the destination QP. It is executed with the same responder logic the library uses on one
// host (respond.h); its payload is read from the socket straight into the destination's
// memory. A request that finds no receive (RNR) or a destination not ready (or not agreeing)
// yet is held, with every later request of the same connection behind it, and retried as the
// QP's attributes say; held payloads are stored as they arrive, within per-connection,
// per-link and per-host bounds.
//
// Transport seam: adopt_link() hands the router a link some other way (an already connected,
// authenticated stream, e.g. a socketpair): the unit tests run two routers in one process over
// such pairs with fake clients and a simulated clock (tests/unit/router_fake.h).
//
// Everything runs on the router's own thread (router_thread.h), apart from vrdmad's control
// loop: no locks in here. That thread calls poll() while there is traffic and sleeps in epoll
// when prepare_sleep() says every queue is empty (QPs then ring their client's doorbell
// eventfd after posting). The hooks run on that thread too: the daemon answers them under its
// own state lock, or queues what they tell it for its control thread.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/unique_fd.h"
#include "daemon/directory/directory.h"
#include "daemon/qos/rules.h"
#include "daemon/qos/scheduler.h"
#include "daemon/router/doorbells.h"
#include "daemon/router/link.h"
#include "daemon/router/router_config.h"
#include "daemon/router/tls.h"
#include "shm/peer.h"
#include "transport/requester.h"
#include "transport/responder.h"
#include "transport/wire.h"
#include "shm/respond.h"
#include "shm/work_request.h"

namespace vrdma::daemon {

// What the router threads share (router_pool.h): the clients' doorbells and the containers'
// and tenants' rate limits. Null members: the Router's own.
struct RouterShared {
  std::shared_ptr<DoorbellTable> bells;
  std::shared_ptr<qos::LimitTable> limits;
};

struct LocalQp {
  uint32_t owner = 0;  // client id
  uint32_t arena_offset = 0;
  uint32_t object_fd_id = 0;  // its QP object (what senders reach)
  uint32_t type = 0;
  uint32_t ipv4 = 0;  // the owner's address (network order)
  std::string tenant;
  uint32_t xrcd = 0;  // XRC_RECV QPs and XRC SRQs: their XRC domain on this host (0: none)
};

class Router : public LinkHandler {
 public:
  struct Hooks {
    // A new descriptor for a client's fd (arena, memory, eventfd), or a positive errno.
    std::function<int(uint32_t client, uint32_t fd_id, int& fd)> fetch_fd;
    // A client's MR `key`, with descriptors of its backings (the router is trusted with all).
    std::function<int(uint32_t client, uint32_t key, uint64_t addr, uint64_t length,
                      shm::MrGrant& out)>
        grant_mr;
    // The daemon's writable mapping of a backing sealed against new writable mappings.
    std::function<uint8_t*(uint32_t client, uint32_t fd_id, uint64_t& size)> kept_mapping;
    // A local QP lost its remote peer (link gone: kPeerGone) or its routed work failed (the
    // router moved it to the error state: kRouted): tell its owner.
    std::function<void(uint32_t client, uint32_t qpn, proto::FatalReason why)> qp_fatal;
    // A QP of this host by number.
    std::function<bool(uint32_t qpn, LocalQp* out)> find_qp;
    // Whether local QP `qpn`'s RTR named (ipv4, peer_qpn) as its destination: its consent.
    std::function<bool(uint32_t qpn, uint32_t ipv4, uint32_t peer_qpn)> names_peer;
    // The tenant of an address by this host's rules.
    std::function<std::string(uint32_t ipv4)> tenant_of;
    // Whether QPs of these two tenants may be connected (the same tenant, or a pair policy
    // allows: the mediated path). Unset: the same tenant only.
    std::function<bool(const std::string& a, const std::string& b)> tenants_pair;
    // Whether an address is one of this host's clients (the source of requests on the link to
    // this host itself).
    std::function<bool(uint32_t ipv4)> local_address;
    // An rdma_cm message from another host (wire::Cm); `host` is the sender's authenticated
    // host id.
    std::function<void(uint32_t host, const wire::Cm& m)> on_cm;
    // rdma_cm connections with `host` (a link to it stays while it has some).
    std::function<size_t(uint32_t host)> cm_connections_with;
    // A link with `host` closed: what rdma_cm had with it is gone.
    std::function<void(uint32_t host)> host_gone;
    // The local UD QPs of `tenant` attached to multicast group `gid` (a copy: the hook runs on the router thread).
    std::function<std::vector<uint32_t>(const std::string& tenant, const uint8_t* gid)>
        mcast_members;
    // No frame in flight points into a client's memory now (optional): mappings the daemon
    // gave up may go (router_thread.h).
    std::function<void()> reclaimed;
    // The direct path (router_direct.cc): another host asks this one to keep `d.ticket` for a
    // direct connection from its QP to local QP `dst` (checked by the router as a Connect is),
    // or for a probe of the pod network to the container at d.dst_ipv4 (`dst` null). 0 with
    // *port where the connection goes, wire::kNoDirect (no direct path there: the other host
    // connects routed, or skips the probe), or another errno (refused). Unset: no direct path.
    // *key: the destination QP's process, as its host numbers it (wire::DirectRep::dst_key).
    std::function<int(const wire::Direct& d, const LocalQp* dst, uint16_t* port, uint64_t* key)>
        direct_ticket;
    // Several router threads (router_pool.h): an inbound link whose Hello named a lane of
    // another thread (RouterConfig::thread_of) goes to that thread's Router (take_link).
    // Unset: every lane is this Router's.
    std::function<void(std::unique_ptr<Link> link)> hand_over;
  };

  // `shared`: what it shares with the other router threads.
  Router(const RouterConfig& cfg, Directory& dir, Hooks hooks, uint64_t boot,
         RouterShared shared = {});
  ~Router() override;

  // Loads the TLS context (unless plaintext), listens for links and registers the listening
  // socket with epoll under tags (kTagBase | n). 0 or a positive errno, after a message.
  int start(int epoll_fd);
  static constexpr uint64_t kTagBase = 3ull << 32;
  static bool is_tag(uint64_t tag) { return (tag >> 32) == 3; }
  // `events`: what epoll said of the descriptor (EPOLLIN, EPOLLOUT, ...).
  void on_event(uint64_t tag, uint32_t events, int64_t now);

  // Data path. poll() returns whether it did any work.
  bool poll(int64_t now);
  // The next time poll() must run although nothing arrives (ns), or -1.
  int64_t next_deadline(int64_t now) const;
  // Arms every queue's doorbell; false if work arrived meanwhile (do not sleep).
  bool prepare_sleep();
  // The doorbell eventfd of a client's routed QPs (one per client, made on first use), or -1.
  int doorbell_for(uint32_t client);

  // Transport seam: takes `fd`, a connected stream socket (e.g. one end of a
  // socketpair(AF_UNIX)) as an open, plaintext link to host `host_id` that the caller has
  // already authenticated: no TCP connect, no TLS, no Hello. `outbound`: this router's link to
  // that host (requests go out on it, responses come back); otherwise a link that host opened
  // (requests come in). The host must be in the directory (its router address and container
  // networks, which the link is checked against as any other). Frames then flow as on a TCP
  // link, so two routers in one process, each given one end of a pair in each direction, carry
  // work between their QPs with no network (the unit tests' fake transport). `lane`: which of
  // the two hosts' links it is (wire.h). 0 or a positive errno (EHOSTUNREACH: not a host of the
  // directory; EEXIST: an outbound link to it in that lane exists; EINVAL: no such lane).
  int adopt_link(UniqueFd fd, uint32_t host_id, bool outbound, int64_t now,
                 uint32_t lane = wire::kMainLane);

  // Control path. Connects local QP `qpn` to `dst_qpn` at `dst_ipv4` on another host; `done`
  // gets 0 or an errno (EHOSTUNREACH, ECONNREFUSED, ETIMEDOUT, EAGAIN: directory down).
  // `lane`: the lane its Connect goes on (pick_lane's; -1: this Router picks it).
  using ConnectDone = std::function<void(int status, uint32_t qp_type)>;
  void connect_qp(uint32_t qpn, const LocalQp& qp, uint32_t dst_ipv4, uint32_t dst_qpn,
                  ConnectDone done, int lane = -1);
  // The same, for a destination QP of this host (the mediated path between tenants): through
  // a link from this router to itself (router_self.cc), whose far end checks every request as
  // it checks another host's.
  void connect_local(uint32_t qpn, const LocalQp& qp, uint32_t dst_ipv4, uint32_t dst_qpn,
                     ConnectDone done, int lane = -1);
  // The direct path (router_direct.cc): asks the host that owns `dst_ipv4` to keep `ticket`
  // (16 bytes) for a direct connection from local QP `qpn` to `dst_qpn` there. `done` gets 0
  // with the destination's QP type and the port to connect to, wire::kNoDirect (connect routed
  // instead), or an errno (EHOSTUNREACH, ECONNREFUSED, ETIMEDOUT, EAGAIN).
  using DirectDone =
      std::function<void(int status, uint32_t qp_type, uint16_t port, uint64_t dst_key)>;
  void connect_direct(uint32_t qpn, const LocalQp& qp, uint32_t dst_ipv4, uint32_t dst_qpn,
                      const uint8_t* ticket, DirectDone done, uint32_t flags = 0);
  // The lane a new connection of local QP `qpn` takes (router_lanes.cc): its class's, and for
  // bulk one of the bulk links in turn; `local`: the mediated path (main or latency lane). A UD
  // QP this Router routes already keeps its own.
  uint32_t pick_lane(uint32_t qpn, const LocalQp& qp, bool local);
  // Takes an inbound link another router thread accepted and authenticated (its Hello named a
  // lane of this thread): frames flow on it from here. Refused (closed) over the link limits.
  void take_link(std::unique_ptr<Link> link, int64_t now);
  // A local QP released by its owner: a UD QP's datagrams posted and not yet sent go out first
  // (router_retire.cc); the caller answers the owner only after this returns.
  void qp_freed(uint32_t qpn);
  // Local UD QP `qpn` sends to multicast groups: its work comes to the router, which carries
  // one copy to each other host with members (router_multicast.cc). 0 or an errno.
  int attach_multicast(uint32_t qpn, const LocalQp& qp);
  void client_gone(uint32_t client);
  // Sends an rdma_cm message to the host that owns dst_ipv4 (0 or an errno) / to a host.
  int send_cm_to_ip(uint32_t dst_ipv4, const wire::Cm& m);
  int send_cm_to_host(uint32_t host_id, const wire::Cm& m);

  // For status.
  struct LinkInfo {
    uint32_t host_id;
    bool outbound, connected;
    std::string addr;
    uint64_t bytes_in, bytes_out;
    bool tls, ktls;
    uint64_t frames_in = 0, frames_out = 0;
    int64_t rtt_ns = -1;  // the last ping's round trip; -1: none yet
    uint64_t held_requests = 0, held_bytes = 0;
    uint32_t lane = wire::kMainLane;  // wire.h: the main link, or the latency class's
    uint32_t thread = 0;              // the router thread that carries it (router_pool.h)
  };
  std::vector<LinkInfo> links() const;
  // Links that came up with each peer host since the router started (for metrics).
  const std::map<uint32_t, uint64_t>& link_connects() const { return link_connects_; }
  // Requests held for each local client (the destination QP's owner): count and payload bytes.
  std::map<uint32_t, std::pair<uint64_t, uint64_t>> held_by_owner() const;
  size_t routed_qps() const { return outbound_.size(); }
  // Routed QPs on the work list now (router_worklist.cc), and how many times passes looked at
  // a QP's queue since the router started.
  size_t active_qps() const { return work_count_; }
  uint64_t qp_visits() const { return qp_visits_; }

  // QoS (router_qos.cc). Applies a rule at once (control path); the rules in force.
  void set_qos(const qos::NamedRule& rule);
  const qos::RuleSet& qos_rules() const { return cfg_.qos; }
  struct QosFlowInfo {
    uint32_t ipv4;  // the container (network order)
    std::string tenant;
    int cls;  // qos::Class
    qos::Rule container, tenant_rule;
    qos::FlowCounters counters;
  };
  // Every container's flows that carried traffic, and the configured ones.
  std::vector<QosFlowInfo> qos_flows() const;
  // Containers the scheduler's tables have room for (those that left give their room again).
  size_t qos_table_size() const { return qos_.containers(); }
  bool tls() const { return tls_ != nullptr; }

  // LinkHandler.
  bool on_frame(transport::Link& link, wire::Type type, const uint8_t* body, uint32_t payload,
                PayloadDest& dest, const char** why) override {
    return on_frame(static_cast<Link&>(link), type, body, payload, dest, why);
  }
  void on_payload_data(transport::Link& link, const uint8_t* data, size_t len) override {
    on_payload_data(static_cast<Link&>(link), data, len);
  }
  void on_payload(transport::Link& link) override { on_payload(static_cast<Link&>(link)); }
  // (Every link of the router is a daemon::Link.)
  bool on_frame(Link& link, wire::Type type, const uint8_t* body, uint32_t payload,
                PayloadDest& dest, const char** why);
  void on_payload_data(Link& link, const uint8_t* data, size_t len);
  void on_payload(Link& link);

 private:
  class ClientFds;
  struct Outbound;  // a routed QP: the requester's state and the router's
  struct McastRx;   // a datagram to a multicast group being received on a link
  class ReqEnv;     // what the requester and the responder ask of the router
  class RespEnv;
  struct PendingConnect {
    uint32_t link_id;
    uint32_t dst_ipv4;
    uint32_t qpn;
    LocalQp qp;
    uint32_t dst_qpn;
    int64_t deadline;
    ConnectDone done;
    int cls = qos::kBulk;  // the QP's QoS class as it connects: its flow
    uint32_t lane = wire::kMainLane;  // the lane of the link its Connect went on: all its frames'
  };

  // Links (router.cc, router_links.cc). Our link to a host in a lane (made on first use), or
  // null (*err); without a lane, the main one.
  Link* outbound_link(uint32_t host_id, int* err) {
    return outbound_link(host_id, wire::kMainLane, err);
  }
  Link* outbound_link(uint32_t host_id, uint32_t lane, int* err);
  // The link to this host itself in a lane (made on first use; router_self.cc), or null (*err).
  Link* self_link(uint32_t lane, int* err);
  // Lanes (router_lanes.cc): the QoS class local QP `qpn` connects with (its address's, read
  // where the library keeps it; a UD QP already routed keeps its own).
  int connect_class(uint32_t qpn, const LocalQp& qp);
  // The lane its Connect goes on: the latency lane for that class; for bulk, one of the
  // cfg_.bulk_links bulk links to the host in turn (a UD QP already routed keeps its own).
  uint32_t connect_lane(uint32_t qpn, const LocalQp& qp, int cls);
  // Serves one link in poll(): connect, handshake, write, read. Whether it did any work.
  bool serve_link(Link& link, int64_t now);
  // Sends a Connect for local QP `qpn` of class `cls` on `link` and waits for its ConnectRep.
  void send_connect(Link& link, uint32_t qpn, const LocalQp& qp, int cls, uint32_t dst_ipv4,
                    uint32_t dst_qpn, ConnectDone done);
  // Whether QPs of the tenants of `src_ipv4` and `dst_tenant` may be connected.
  bool tenants_pair(uint32_t src_ipv4, const std::string& dst_tenant) const;
  Link* find_link(uint32_t id);
  void accept_links(int64_t now);
  // Why a connection from `ipv4` cannot be a link (nullptr: it can).
  const char* refuse_address(uint32_t ipv4);
  // Links `ipv4` opened to this Router (the per-host limit counts them).
  // Inbound links from `ipv4` that said Hello; that have not; the one of those to close first
  // (from anywhere: 0): the oldest that sent nothing yet, else the oldest.
  uint32_t authenticated_links_from(uint32_t ipv4) const;
  uint32_t pending_links_from(uint32_t ipv4) const;
  Link* oldest_pending(uint32_t ipv4) const;
  // Room for a connection from `ipv4`, made by closing connections without a Hello (the
  // source's oldest over its bound; the oldest of all when every link is taken).
  bool make_room(uint32_t ipv4);
  bool on_hello(Link& link, const wire::Hello& h, const char** why);
  void progress_link(Link& link, int64_t now);  // connect, handshake, deadlines
  bool verify_server(Link& link, std::string* why);
  void check_links(int64_t now);  // idle, stalled, dead hosts
  bool link_in_use(const Link& link) const;
  void close_link(Link& link, const char* why);
  void doom(uint32_t link_id, std::string why);  // closed at the end of this pass
  void close_doomed();
  // Inbound links whose Hello named another thread's lane go there (hooks_.hand_over).
  void hand_over_links();
  // Unmaps the clients' deregistered MRs once no frame in flight can point into one.
  void reclaim_mappings();
  void set_rx_paused(Link& link, bool paused);
  // What epoll watches a link's socket for: reads unless paused, room while tx_blocked.
  void update_watch(Link& link);
  // Link::flush, and epoll then watches for room if the socket turned out full. False: the
  // connection failed.
  bool flush_link(Link& link, int64_t now);
  void watch(Link& link);  // registers the link's socket with epoll
  // A link's epoll tag: kTagBase | (kTagLinks + its id); below kTagLinks, the listener's.
  static constexpr uint64_t kTagLinks = 2;
  static uint64_t link_tag(uint32_t id) { return kTagBase | (kTagLinks + uint64_t(id)); }
  void on_connect_rep(Link& link, const wire::ConnectRep& r);
  // The direct path's set-up (router_direct.cc).
  void on_direct(Link& link, const wire::Direct& d);
  void on_direct_rep(Link& link, const wire::DirectRep& r);
  // Pending kDirects that waited too long (link_id 0), or whose link closed, fail.
  void expire_directs(int64_t now, uint32_t link_id = 0);
  void on_peer_gone(Link& link, const wire::PeerGone& g);
  std::shared_ptr<shm::Peer> peer(uint32_t client);
  bool owns_address(const Link& link, uint32_t ipv4) const;
  // Whether the connection's destination QP agreed to its source, and no other link carries
  // the same connection: its end is the QP's peer's end.
  bool agreed_and_alone(const transport::InConn& in) const;

  // Requester (router_requester.cc, transport/requester.h).
  int attach_outbound(const PendingConnect& pc, std::unique_ptr<Outbound>* out);
  // Whether a link takes no more requests now: its ring is full or link_window_bytes of them
  // wait for its socket.
  bool link_full(const Link& link) const;
  // Whether a (connected) QP's requests wait for room in its link's full socket.
  bool waits_for_room(const Outbound& o);
  void check_timeouts(int64_t now);
  Link* ud_link(Outbound& o, const uint8_t* dgid);
  // Multicast (router_multicast.cc).
  bool send_multicast(Outbound& o, const transport::Wqe& w, int64_t now);
  // A UD QP being released: what it posted and the router has not sent yet goes out now
  // (router_retire.cc). Returns how many datagrams found no room (lost).
  uint64_t send_posted(Outbound& o);
  static bool is_multicast_request(const wire::Request& r);
  void on_mcast_datagram(Link& link, const wire::Request& r, uint32_t payload, PayloadDest& dest);
  void deliver_multicast(const wire::Request& r, const uint8_t* data);
  // QoS (router_qos.cc): a new routed QP joins its container's flows; one pass of sending
  // in the scheduler's order.
  void qos_attach(Outbound& o);
  bool pump_all(int64_t now);
  uint32_t qos_container(uint32_t ipv4, const std::string& tenant);
  // A routed QP of the container came / went; containers without QPs for qos_linger_ns leave
  // the scheduler (their counters with them).
  void qos_hold(uint32_t container);
  void qos_release(uint32_t container);
  void qos_prune(int64_t now);
  // The work list (router_worklist.cc): the routed QPs a pass serves.
  bool has_work(const Outbound& o) const;
  void work_add(Outbound& o);
  void work_remove(Outbound& o);
  void work_rotate(Outbound& o);  // the list starts at `o`, the order otherwise kept
  // Arms its doorbell and takes it off the list, unless it has work after all (false).
  bool work_retire(Outbound& o);
  void work_pass_done();             // QPs idle for a while leave the list
  void work_ring(uint32_t client);   // the client's doorbell rang
  void work_sweep();                 // every routed QP with work joins (state changes)
  void client_link(Outbound& o);     // onto / off its owner's list (client_qps_)
  void client_unlink(Outbound& o);
  // Every routed QP goes into outbound_ through put_outbound and leaves through erase_outbound.
  void put_outbound(std::unique_ptr<Outbound> o);
  std::map<uint32_t, std::unique_ptr<Outbound>>::iterator erase_outbound(
      std::map<uint32_t, std::unique_ptr<Outbound>>::iterator it);

  // Responder (router_responder.cc, transport/responder.h).
  void on_connect(Link& link, const wire::Connect& c);
  bool target(uint32_t qpn, shm::PeerQp& out);
  const shm::PeerQp* ud_target(Link& link, const wire::Request& r);

  RouterConfig cfg_;
  const RouterLimits& lim_;
  Directory& dir_;
  Hooks hooks_;
  uint64_t boot_;
  int epoll_ = -1;
  std::unique_ptr<TlsContext> tls_;  // null in plaintext
  UniqueFd listen_;
  std::shared_ptr<DoorbellTable> bells_;  // shared by the router threads (doorbells.h)
  std::shared_ptr<qos::LimitTable> limits_;  // and the rate limits (qos/limits.h)
  std::map<uint32_t, int> doorbells_;     // client id -> its eventfd (bells_'), watched here
  std::unique_ptr<ClientFds> fd_source_;
  uint32_t next_link_id_ = 1;
  std::map<uint32_t, std::unique_ptr<Link>> links_;
  uint32_t next_bulk_link_ = 0;  // connect_lane's turn among the bulk links
  std::map<uint64_t, uint32_t> host_links_;  // lane_key(host id, lane) -> our outbound link id
  std::vector<std::pair<uint32_t, std::string>> doomed_links_;
  std::vector<uint32_t> handed_links_;  // authenticated this pass, for another thread
  std::unordered_map<uint32_t, std::shared_ptr<shm::Peer>> peers_;  // client id -> mapped arena
  // Mappings of clients that died while a link may still send from them; dropped once idle.
  std::vector<std::shared_ptr<shm::Peer>> graveyard_;
  std::unordered_map<uint32_t, shm::PeerQp> ud_targets_;  // local UD QPs reached from elsewhere
  // send_multicast's scratch lists (kept: no allocation per datagram once grown).
  std::vector<std::pair<uint32_t, uint32_t>> mcast_hosts_;
  std::vector<uint32_t> mcast_links_;
  int64_t now_ = 0;
  int64_t next_check_ns_ = 0;      // check_links
  int64_t next_dir_check_ns_ = 0;  // the directory still knows the links' hosts
  std::map<uint32_t, std::unique_ptr<Outbound>> outbound_;     // local qpn ->
  Outbound* work_head_ = nullptr;  // the work list, through Outbound::work_next
  Outbound* work_tail_ = nullptr;
  size_t work_count_ = 0;
  // Each client's routed QPs, through Outbound::client_next: what its doorbell's ring looks at.
  std::unordered_map<uint32_t, Outbound*> client_qps_;  // client id -> the first of them
  uint64_t qp_visits_ = 0;
  std::map<uint32_t, uint64_t> link_connects_;                 // peer host -> links that came up
  std::unique_ptr<ReqEnv> req_env_;
  std::unique_ptr<RespEnv> resp_env_;
  transport::Requester requester_;
  transport::Responder responder_;  // its connections: link id << 32 | src qpn ->
  std::unordered_map<uint32_t, std::unique_ptr<McastRx>> mcast_rx_;  // link id ->
  std::map<uint64_t, PendingConnect> connects_;
  struct PendingDirect {
    uint32_t link_id;
    int64_t deadline;
    DirectDone done;
  };
  std::map<uint64_t, PendingDirect> directs_;
  std::map<uint32_t, uint64_t> host_held_;  // host id -> payload bytes held for it
  // QoS: the scheduler, its containers (by address and tenant: an address given again to a
  // container of another tenant is another container) and tenants (by name), and per flow the
  // QPs with work in this pass (a list through Outbound::qos_next).
  qos::Scheduler qos_;
  std::map<std::pair<uint32_t, std::string>, uint32_t> qos_containers_;
  std::map<std::string, uint32_t> qos_tenants_;
  struct QosContainer {
    uint32_t ipv4 = 0;
    std::string tenant;
    uint32_t qps = 0;     // its routed QPs
    int64_t idle_ns = 0;  // when its last QP went
  };
  std::vector<QosContainer> qos_container_info_;  // by the scheduler's container id
  struct QosQueue {
    Outbound* head = nullptr;
    Outbound* tail = nullptr;
  };
  std::vector<QosQueue> qos_queues_;  // per flow
  int64_t qos_ready_ns_ = -1;  // when a flow held by its limit may send again (-1: none held)
  uint64_t next_req_ = 1;
  // Connections refused at accept (a container, an unknown address, over a limit): counted,
  // and logged at most every few seconds.
  uint64_t refused_accepts_ = 0;
  uint64_t evicted_pending_ = 0;  // connections without a Hello closed to make room
  int64_t refused_logged_ns_ = 0;
};

}  // namespace vrdma::daemon
