// The router's private state, shared by router.cc, router_links.cc, router_requester.cc,
// router_responder.cc and router_hold.cc.
#pragma once

#include <array>

#include "daemon/router/router.h"
#include "shm/rings.h"

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

struct Router::Wqe {
  uint64_t wr_id;
  uint32_t opcode, send_flags, imm_data, num_sge, rkey, status;
  uint64_t remote_addr, compare_add, swap;
  uint32_t ud_qpn, ud_qkey;
  uint8_t dgid[16];
  uint32_t inline_len;
  uint32_t xrc_srqn;           // XRC_SEND: the destination SRQ
  const uint8_t* inline_data;  // inside the SendQueue entry
  ibv_sge sge[shm::kMaxSendSge];
};

struct Router::Outbound {
  uint32_t qpn = 0;
  LocalQp info;
  uint32_t dst_qpn = 0;
  // Its QoS class, fixed when it connected (its address's), and so its lane: every frame of
  // the QP goes on that lane's link, in order.
  int cls = qos::kBulk;
  uint32_t lane = wire::kMainLane;
  uint32_t link_id = 0;  // RC, UC: the link to the destination's host (in its lane)
  std::shared_ptr<shm::Peer> peer;
  shm::QpShared* qp = nullptr;
  shm::SendQueue* sq = nullptr;
  uint32_t sq_mask = 0, esz = 0, max_sge = 0, max_inline = 0;
  shm::CqView cq;
  int cq_efd = -1;
  uint64_t sent = 0;      // next entry to send
  uint64_t done = 0;      // next entry to complete (mirrors sq->done)
  // The owner writes the tail: it may be anything. A sane one lies between what completed and
  // a full queue; posted work is a sane tail beyond what was sent.
  bool sane_tail(uint64_t t) const { return t >= done && t - done <= uint64_t(sq_mask) + 1; }
  bool has_posted(uint64_t t) const { return t != sent && sane_tail(t); }
  uint64_t base = 0;      // the entry whose request is number 0 of the connection
  int64_t oldest_ns = 0;  // when the oldest outstanding request was sent
  bool failed = false;
  uint32_t last_state = 0;
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
  uint64_t sent_bytes = 0;
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

struct Router::HeldRequest {
  wire::Request req;
  uint64_t token = 0;     // which held request a payload in flight is for
  bool complete = true;   // its payload has all arrived
  uint64_t reserved = 0;  // payload bytes counted against the bounds (its length)
  uint64_t received = 0;  // payload bytes stored so far
  // The payload, stored as it arrives, in pieces of at most kHeldChunk bytes.
  std::vector<std::vector<uint8_t>> chunks;
  int64_t next_ns = 0;
  int64_t deadline_ns = 0;  // not ready: give up after this
  int rnr_left = 0;
  ibv_wc_status expiry = IBV_WC_RETRY_EXC_ERR;  // what it fails with when it cannot wait
};
inline constexpr size_t kHeldChunk = 64 * 1024;

struct Router::Inbound {
  uint32_t link_id = 0;
  uint32_t host_id = 0;   // the sending host (authenticated)
  uint32_t src_ipv4 = 0;  // the source QP's address, which that host owns
  uint32_t src_qpn = 0;
  uint32_t dst_qpn = 0;
  uint32_t type = 0;   // the destination QP's type: what every request is taken as
  uint32_t owner = 0;  // the destination QP's client
  uint64_t next_seq = 0;
  shm::PeerQp target;
  bool failed = false;  // a request failed: later ones are dropped as the requester flushes
  uint64_t held_bytes = 0;
  std::deque<HeldRequest> held;
  // XRC (router_xrc.cc): the SRQs of the XRC_RECV QP's domain reached so far, by number, and
  // the last one as a destination (the SRQ's rings and PD with the QP's attributes).
  std::unordered_map<uint32_t, shm::PeerQp> xrc_srqs;
  shm::PeerQp xrc_target;
};

// The frame whose payload a link is receiving.
struct Router::RxFrame {
  enum class Kind { kNone, kPlace, kHold, kDiscardReply, kReadData, kMcast } kind = Kind::kNone;
  wire::Request req{};
  shm::PeerQp target;                     // kPlace
  shm::Placement pl;                      // kPlace
  ibv_wc_status status = IBV_WC_SUCCESS;  // kDiscardReply
  bool reply = true;
  uint64_t hold_key = 0;  // kHold: the connection and the held request it goes to
  uint64_t hold_token = 0;
  // kReadData (requester side): the READ response being scattered.
  uint32_t qpn = 0;
  uint64_t seq = 0;
  uint64_t byte_len = 0;
  // kMcast: a datagram to a multicast group, copied to each member once it is all here.
  std::array<uint8_t, 4096> mcast_data{};
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
  return uint64_t(link_id) << 32 | src_qpn;
}

}  // namespace vrdma::daemon
