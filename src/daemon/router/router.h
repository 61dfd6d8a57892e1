// The router: carries QPs' work between hosts over TCP links (link.h, wire.h).
//
// Requester side (router_requester.cc): a local QP whose destination is on another host hands
// its work requests to the router through its SendQueue in the client's arena. The router
// gathers the data straight from the client's registered memory, sends it on its link to the
// destination host, and completes each request into the QP's send CQ when the response comes
// back (data placed, READ data scattered, atomic value returned) or with RETRY_EXC_ERR when
// the link falls silent for longer than the QP's timeout and retry count allow.
//
// Responder side (router_responder.cc): requests from other hosts are executed against the
// destination QP with the same responder logic the library uses on one host (respond.h); their
// payload is read from the socket straight into the destination's memory. A request that finds
// no receive (RNR) or a destination not ready yet is held, with every later request of the
// same source QP behind it, and retried as the QP's attributes say.
//
// Everything runs on the daemon's event-loop thread: no locks. The daemon calls poll() while
// there is traffic and sleeps in epoll when prepare_sleep() says every queue is empty (QPs then
// ring the doorbell eventfd after posting).
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
#include "daemon/router/link.h"
#include "daemon/router/router_config.h"
#include "daemon/router/wire.h"
#include "shm/peer.h"
#include "shm/respond.h"
#include "shm/work_request.h"

namespace vrdma::daemon {

struct LocalQp {
  uint32_t owner = 0;  // client id
  uint32_t arena_offset = 0;
  uint32_t object_fd_id = 0;  // its QP object (what senders reach)
  uint32_t type = 0;
  uint32_t ipv4 = 0;  // the owner's address (network order)
  std::string tenant;
};

class Router : public LinkHandler {
 public:
  struct Hooks {
    // A new descriptor for a client's fd (arena, memory, eventfd), or a positive errno.
    std::function<int(uint32_t client, uint32_t fd_id, int& fd)> fetch_fd;
    // A client's MR `key`, with descriptors of its backings (the router is trusted with all).
    std::function<int(uint32_t client, uint32_t key, shm::MrGrant& out)> grant_mr;
    // The daemon's writable mapping of a backing sealed against new writable mappings.
    std::function<uint8_t*(uint32_t client, uint32_t fd_id, uint64_t& size)> kept_mapping;
    // A local QP lost its remote peer (link gone: kPeerGone) or its routed work failed (the
    // router moved it to the error state: kRouted): tell its owner.
    std::function<void(uint32_t client, uint32_t qpn, proto::FatalReason why)> qp_fatal;
    // A QP of this host by number.
    std::function<bool(uint32_t qpn, LocalQp* out)> find_qp;
    // The tenant of an address by this host's rules.
    std::function<std::string(uint32_t ipv4)> tenant_of;
    // An rdma_cm message from another host (wire::Cm); `host` is the sender's host id.
    std::function<void(uint32_t host, const wire::Cm& m)> on_cm;
  };

  Router(const RouterConfig& cfg, Directory& dir, Hooks hooks, uint64_t boot);
  ~Router() override;

  // Listens for links and registers the listening socket and the doorbell with epoll under
  // tags (kTagBase | n). 0 or a positive errno.
  int start(int epoll_fd);
  static constexpr uint64_t kTagBase = 3ull << 32;
  static bool is_tag(uint64_t tag) { return (tag >> 32) == 3; }
  void on_event(uint64_t tag, int64_t now);

  // Data path. poll() returns whether it did any work.
  bool poll(int64_t now);
  // The next time poll() must run although nothing arrives (ns), or -1.
  int64_t next_deadline(int64_t now) const;
  // Arms every queue's doorbell; false if work arrived meanwhile (do not sleep).
  bool prepare_sleep();
  int doorbell_fd() const { return doorbell_.get(); }

  // Control path. Connects local QP `qpn` to `dst_qpn` at `dst_ipv4` on another host; `done`
  // gets 0 or an errno (EHOSTUNREACH, ENOENT, EACCES, ETIMEDOUT, EAGAIN: directory down).
  using ConnectDone = std::function<void(int status, uint32_t qp_type)>;
  void connect_qp(uint32_t qpn, const LocalQp& qp, uint32_t dst_ipv4, uint32_t dst_qpn,
                  ConnectDone done);
  void qp_freed(uint32_t qpn);
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
  };
  std::vector<LinkInfo> links() const;
  size_t routed_qps() const { return outbound_.size(); }

  // LinkHandler.
  void on_frame(Link& link, wire::Type type, const uint8_t* body, uint32_t payload,
                PayloadDest& dest) override;
  void on_payload(Link& link) override;

 private:
  class ClientFds;
  struct Wqe;       // a RouteWqe copied out of shared memory and validated
  struct Outbound;  // requester state of one local QP
  struct Inbound;   // responder state of one remote source QP
  struct HeldRequest;
  struct RxFrame;  // what the payload being received on a link is for
  struct PendingConnect {
    uint32_t link_id;
    uint32_t dst_ipv4;
    uint32_t qpn;
    LocalQp qp;
    uint32_t dst_qpn;
    int64_t deadline;
    ConnectDone done;
  };

  // Links (router.cc).
  Link* outbound_link(uint32_t host_id, int* err);
  Link* find_link(uint32_t id);
  void accept_links();
  void on_hello(Link& link, const wire::Hello& h);
  void on_connect_rep(Link& link, const wire::ConnectRep& r);
  void on_peer_gone(Link& link, const wire::PeerGone& g);
  void close_link(Link& link, const char* why);
  void check_connecting(Link& link, int64_t now);
  std::shared_ptr<shm::Peer> peer(uint32_t client);

  // Requester (router_requester.cc).
  int attach_outbound(const PendingConnect& pc, std::unique_ptr<Outbound>* out);
  bool pump(Outbound& o, int64_t now);
  bool read_wqe(const Outbound& o, uint64_t pos, Wqe& w) const;
  bool send_wqe(Outbound& o, const Wqe& w, int64_t now);
  void complete(Outbound& o, const Wqe& w, ibv_wc_status st, uint32_t byte_len);
  void abort_qp(Outbound& o, ibv_wc_status first, bool tell_owner);
  void on_response(Link& link, const wire::Response& r, uint32_t payload, PayloadDest& dest);
  void check_timeouts(int64_t now);
  Link* ud_link(Outbound& o, const uint8_t* dgid);

  // Responder (router_responder.cc).
  void on_request(Link& link, const wire::Request& r, uint32_t payload, PayloadDest& dest);
  void on_datagram(const wire::Request& r, uint32_t payload, PayloadDest& dest, RxFrame& f);
  // The request fails (or is dropped, UC) with `st`, once its payload has passed.
  void discard_and_reply(Link& link, RxFrame& f, ibv_wc_status st, uint32_t payload);
  // Keeps the request (its payload, as it arrives) until `next_ns`: RNR, or not ready yet.
  void hold(Inbound& ib, const wire::Request& r, uint32_t payload, PayloadDest& dest, RxFrame& f,
            int64_t next_ns);
  void on_connect(Link& link, const wire::Connect& c);
  bool target(uint32_t qpn, shm::PeerQp& out);
  const shm::PeerQp* ud_target(const wire::Request& r);
  RxFrame& frame(uint32_t link_id);
  void respond(Link& link, const wire::Request& r, ibv_wc_status st, uint64_t byte_len,
               uint64_t atomic_old, const shm::Seg* data, int nseg);
  bool execute_held(Link& link, Inbound& in, int64_t now);
  void retry_held(int64_t now);

  RouterConfig cfg_;
  Directory& dir_;
  Hooks hooks_;
  uint64_t boot_;
  int epoll_ = -1;
  UniqueFd listen_;
  UniqueFd doorbell_;
  std::unique_ptr<ClientFds> fd_source_;
  uint32_t next_link_id_ = 1;
  std::map<uint32_t, std::unique_ptr<Link>> links_;
  std::map<uint32_t, uint32_t> host_links_;  // host id -> our outbound link id
  std::unordered_map<uint32_t, std::shared_ptr<shm::Peer>> peers_;  // client id -> mapped arena
  // Mappings of clients that died while a link may still send from them; dropped once idle.
  std::vector<std::shared_ptr<shm::Peer>> graveyard_;
  std::unordered_map<uint32_t, shm::PeerQp> ud_targets_;  // local UD QPs reached from elsewhere
  int64_t now_ = 0;
  std::map<uint32_t, std::unique_ptr<Outbound>> outbound_;     // local qpn ->
  std::map<uint64_t, std::unique_ptr<Inbound>> inbound_;       // link id << 32 | src qpn ->
  std::unordered_map<uint32_t, std::unique_ptr<RxFrame>> rx_;  // link id -> frame in progress
  std::map<uint64_t, PendingConnect> connects_;
  uint64_t next_req_ = 1;
  size_t held_count_ = 0;
};

}  // namespace vrdma::daemon
