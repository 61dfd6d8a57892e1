// The router's private state, shared by router.cc, router_links.cc, router_requester.cc,
// router_responder.cc and router_hold.cc.
#pragma once

#include <array>

#include "common/address.h"
#include "daemon/router/router.h"
#include "shm/rings.h"
#include "transport/requester.h"
#include "transport/responder.h"

namespace vrdma::daemon {

class Router::ClientFds : public shm::FdSource {
 public:
  explicit ClientFds(Router& r) : r_(r) {}
  int fetch_fd(uint32_t owner, uint32_t fd_id, uint32_t /*via_qpn*/, int& fd) override {
    return r_.hooks_.fetch_fd(owner, fd_id, fd);
  }
  int grant_mr(uint32_t owner, uint32_t /*via_qpn*/, uint32_t key, uint32_t /*access*/,
               shm::MrGrant& out) override {
    return r_.hooks_.grant_mr ? r_.hooks_.grant_mr(owner, key, 0, 0, out) : ENOENT;
  }
  int grant_mr_range(uint32_t owner, uint32_t /*via_qpn*/, uint32_t key, uint32_t /*access*/,
                     uint64_t addr, uint64_t length, shm::MrGrant& out) override {
    return r_.hooks_.grant_mr ? r_.hooks_.grant_mr(owner, key, addr, length, out) : ENOENT;
  }
  uint8_t* kept_mapping(uint32_t owner, uint32_t fd_id, uint64_t& size) override {
    return r_.hooks_.kept_mapping ? r_.hooks_.kept_mapping(owner, fd_id, size) : nullptr;
  }

 private:
  Router& r_;
};

using transport::InConn;
using transport::SendQp;
using transport::Wqe;

// A routed QP: the requester's state (transport/requester.h) and what the router adds.
struct Router::Outbound : SendQp {
  std::string tenant;  // its owner's
  // Its QoS class, fixed when it connected (its address's), and so its lane: every frame of
  // the QP goes on that lane's link, in order.
  int cls = qos::kBulk;
  uint32_t lane = wire::kMainLane;
  std::map<uint32_t, uint32_t> ud_links;  // UD: destination address -> link id
  // QoS (router_qos.cc): its container in the scheduler, its place in its flow's list of QPs
  // with work this pass, the payload bytes it sent, and when its queued entries were first
  // seen (entries before stamp_end[i] at stamp_ns[i]) for their queueing delay.
  uint32_t qos_container = 0;
  Outbound* qos_next = nullptr;
  uint32_t qos_pass_sent = 0;
  bool qos_held = false;  // its flow is held by a rate limit: its work waits (no busy loop)
  // Its requests wait for room in its link's full socket (prepare_sleep): its doorbell stays
  // unarmed, as the router wakes for that room and serves it then.
  bool waits_room = false;
  static constexpr int kStamps = 8;
  uint64_t stamp_end[kStamps] = {};
  int64_t stamp_ns[kStamps] = {};
  uint8_t stamp_first = 0, stamp_count = 0;
  // The work list (router_worklist.cc): its neighbours there while it is on it, and how many
  // passes in a row found it with nothing to do.
  Outbound* work_prev = nullptr;
  Outbound* work_next = nullptr;
  bool on_work = false;
  uint32_t idle_passes = 0;
  // Its neighbours among its owner's routed QPs (Router::client_qps_).
  Outbound* client_prev = nullptr;
  Outbound* client_next = nullptr;
};

// The frame whose payload a link is receiving, for the router itself: a datagram to a
// multicast group (requests and responses are its requester's and responder's).
struct Router::McastRx {
  bool active = false;
  wire::Request req{};
  std::array<uint8_t, 4096> data{};
};

// What the requester asks of the router.
class Router::ReqEnv : public transport::RequesterEnv {
 public:
  explicit ReqEnv(Router& r) : r_(r) {}
  SendQp* find(uint32_t qpn) override {
    auto it = r_.outbound_.find(qpn);
    return it == r_.outbound_.end() ? nullptr : it->second.get();
  }
  transport::Link* link_for(SendQp& q, const Wqe& w) override {
    auto& o = static_cast<Outbound&>(q);
    return o.type == IBV_QPT_UD ? r_.ud_link(o, w.dgid) : r_.find_link(o.link_id);
  }
  bool link_full(const transport::Link& l) const override {
    return r_.link_full(static_cast<const Link&>(l));
  }
  bool send_special(SendQp& q, const Wqe& w, int64_t now, bool* handled) override {
    *handled = q.type == IBV_QPT_UD && gid_is_multicast(w.dgid);
    return *handled ? r_.send_multicast(static_cast<Outbound&>(q), w, now) : true;
  }
  void failed(SendQp& q, proto::FatalReason why) override {
    r_.hooks_.qp_fatal(q.owner, q.qpn, why);
  }

 private:
  Router& r_;
};

// What the responder asks of the router.
class Router::RespEnv : public transport::ResponderEnv {
 public:
  explicit RespEnv(Router& r) : r_(r) {}
  bool names_peer(uint32_t qpn, uint32_t ipv4, uint32_t peer_qpn) override {
    return r_.hooks_.names_peer(qpn, ipv4, peer_qpn);
  }
  bool target(uint32_t qpn, shm::PeerQp& out) override { return r_.target(qpn, out); }
  bool xrc_srq(const InConn& c, uint32_t srqn, shm::PeerQp& out) override;  // router_xrc.cc
  const shm::PeerQp* ud_target(transport::Link& link, const wire::Request& r) override {
    return r_.ud_target(static_cast<Link&>(link), r);
  }
  bool take_held(uint32_t host, uint64_t bytes, const char** over) override {
    uint64_t& held = r_.host_held_[host];
    if (held + bytes > r_.lim_.held_bytes_per_host) {
      if (!held) r_.host_held_.erase(host);
      *over = "bytes held for the host";
      return false;
    }
    held += bytes;
    return true;
  }
  void give_held(uint32_t host, uint64_t bytes) override {
    auto it = r_.host_held_.find(host);
    if (it == r_.host_held_.end()) return;
    it->second -= bytes;
    if (!it->second) r_.host_held_.erase(it);
  }
  const char* who() const override { return "router: host"; }

 private:
  Router& r_;
};

// The QoS class of a QP by its address (QpShared::traffic_class: SL << 8 | GRH traffic class):
// a nonzero SL, or DSCP 46 (Expedited Forwarding) in the traffic class, is the latency class;
// anything else is bulk.
inline int qos_class_of(uint32_t traffic_class) {
  const uint32_t sl = traffic_class >> 8 & 15, dscp = (traffic_class & 0xff) >> 2;
  return sl != 0 || dscp == 46 ? qos::kLatency : qos::kBulk;
}

// The lane of a class's QPs: the latency class has a link of its own to each host; the bulk
// class the main lane, or bulk link `k` of several (router_lanes.cc).
inline uint32_t lane_of(int cls, uint32_t k = 0) {
  return cls == qos::kLatency ? wire::kLatencyLane : wire::bulk_lane(k);
}

inline uint64_t lane_key(uint32_t host_id, uint32_t lane) {
  return uint64_t(host_id) << 8 | lane;
}

inline uint64_t inbound_key(uint32_t link_id, uint32_t src_qpn) {
  return transport::conn_key(link_id, src_qpn);
}

}  // namespace vrdma::daemon
