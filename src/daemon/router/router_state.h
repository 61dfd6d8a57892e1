// The router's private state, shared by router.cc, router_requester.cc and
// router_responder.cc.
#pragma once

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
    return r_.hooks_.grant_mr ? r_.hooks_.grant_mr(owner, key, out) : ENOENT;
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
  const uint8_t* inline_data;  // inside the SendQueue entry
  ibv_sge sge[shm::kMaxSendSge];
};

struct Router::Outbound {
  uint32_t qpn = 0;
  LocalQp info;
  uint32_t dst_qpn = 0;
  uint32_t link_id = 0;  // RC, UC: the link to the destination's host
  std::shared_ptr<shm::Peer> peer;
  shm::QpShared* qp = nullptr;
  shm::SendQueue* sq = nullptr;
  uint32_t sq_mask = 0, esz = 0, max_sge = 0, max_inline = 0;
  shm::CqView cq;
  int cq_efd = -1;
  uint64_t sent = 0;      // next entry to send
  uint64_t done = 0;      // next entry to complete (mirrors sq->done)
  int64_t oldest_ns = 0;  // when the oldest outstanding request was sent
  bool failed = false;
  uint32_t last_state = 0;
  std::map<uint32_t, uint32_t> ud_links;  // UD: destination address -> link id
};

struct Router::HeldRequest {
  wire::Request req;
  std::vector<uint8_t> data;
  int64_t next_ns = 0;
  int64_t deadline_ns = 0;  // not ready: give up after this
  int rnr_left = 0;
};

struct Router::Inbound {
  uint32_t link_id = 0;
  uint32_t src_qpn = 0;
  uint32_t dst_qpn = 0;
  uint32_t owner = 0;  // the destination QP's client
  shm::PeerQp target;
  bool failed = false;  // a request failed: later ones are dropped as the requester flushes
  std::deque<HeldRequest> held;
};

// The frame whose payload a link is receiving.
struct Router::RxFrame {
  enum class Kind { kNone, kPlace, kHold, kDiscardReply, kReadData } kind = Kind::kNone;
  wire::Request req{};
  Inbound* in = nullptr;                  // kPlace (RC/UC), kHold
  shm::PeerQp target;                     // kPlace
  shm::Placement pl;                      // kPlace
  ibv_wc_status status = IBV_WC_SUCCESS;  // kDiscardReply
  bool reply = true;
  // kReadData (requester side): the READ response being scattered.
  uint32_t qpn = 0;
  uint64_t seq = 0;
  uint64_t byte_len = 0;
};

inline uint64_t inbound_key(uint32_t link_id, uint32_t src_qpn) {
  return uint64_t(link_id) << 32 | src_qpn;
}

}  // namespace vrdma::daemon
