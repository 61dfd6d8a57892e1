// The requester: work requests a QP posted into its SendQueue (in its owner's arena), carried
// as frames on a link to the side that executes them (responder.h), and their completions.
// vrdmad's router runs one for every QP whose destination is on another host (or of another
// tenant); the client library runs one per direct connection, for its own QP.
//
// The requester gathers each request's data straight from the owner's registered memory (the
// frame's payload points there until the link writes it), and completes each request into the
// QP's send CQ, in order, when its response comes back (data placed, READ data scattered,
// atomic value returned), or with RETRY_EXC_ERR when the link falls silent for longer than the
// QP's timeout and retry count allow. What the owner writes (the queue's tail, its entries) is
// bounded and checked on every pass: the owner may be another, untrusted, process.
//
// Single-threaded: its user serializes every call.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <map>
#include <memory>
#include <unordered_map>

#include "common/protocol.h"
#include "shm/layout.h"
#include "shm/peer.h"
#include "shm/respond.h"
#include "transport/link.h"
#include "transport/wire.h"

namespace vrdma::transport {

// A work request as the requester takes it: copied out of shared memory, checked.
struct Wqe {
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

// The requester's state of one QP.
struct SendQp {
  uint32_t qpn = 0;
  uint32_t owner = 0;  // the QP's client
  uint32_t type = 0;
  uint32_t ipv4 = 0;  // the owner's address (network order)
  uint32_t dst_qpn = 0;
  uint32_t link_id = 0;  // RC, UC: the link to the destination
  std::shared_ptr<shm::Peer> peer;  // the owner's arena and memory
  shm::QpShared* qp = nullptr;
  shm::SendQueue* sq = nullptr;
  uint32_t sq_mask = 0, esz = 0, max_sge = 0, max_inline = 0;
  shm::CqView cq;
  int cq_efd = -1;
  uint64_t sent = 0;  // next entry to send
  uint64_t done = 0;  // next entry to complete (mirrors sq->done)
  // The owner writes the tail: it may be anything. A sane one lies between what completed and
  // a full queue; posted work is a sane tail beyond what was sent.
  bool sane_tail(uint64_t t) const { return t >= done && t - done <= uint64_t(sq_mask) + 1; }
  bool has_posted(uint64_t t) const { return t != sent && sane_tail(t); }
  uint64_t base = 0;      // the entry whose request is number 0 of the connection
  int64_t oldest_ns = 0;  // when the oldest outstanding request was sent
  bool failed = false;
  uint32_t last_state = 0;
  uint64_t sent_bytes = 0;
};

// What the requester asks of its user.
class RequesterEnv {
 public:
  virtual ~RequesterEnv() = default;
  // The QP `qpn` whose work this requester carries, or null.
  virtual SendQp* find(uint32_t qpn) = 0;
  // The link request `w` of `q` goes on: RC, UC and XRC the QP's link; UD its destination's.
  // Null: nobody there (a datagram is lost; a connected QP fails with RETRY_EXC_ERR).
  virtual Link* link_for(SendQp& q, const Wqe& w) = 0;
  // Whether a link takes no more requests now.
  virtual bool link_full(const Link& l) const { return !l.has_room(1); }
  // Requests the requester does not send itself (a datagram to a multicast group): `handled`
  // set, and false when it has to wait.
  virtual bool send_special(SendQp& q, const Wqe& w, int64_t now, bool* handled);
  // The QP failed (its work completed in error): its owner is told why.
  virtual void failed(SendQp& q, proto::FatalReason why) = 0;
};

class Requester {
 public:
  // `flush_batch`: how many requests of a failed QP one pump() completes (flushed) at most.
  explicit Requester(RequesterEnv& env, uint32_t flush_batch = 256)
      : env_(env), flush_batch_(flush_batch) {}

  // Fills `q` from the QP's shared state at `qp_offset` of its owner's arena (`q.peer`, with
  // the arena attached): its send queue and send CQ, checked. Work it posted before goes out
  // in order, numbered from 0 in this connection. 0 or a positive errno.
  static int attach(SendQp& q, uint32_t qp_offset);

  // The QP's state changes and flushes, then at most max_wqes of its requests sent (fewer when
  // the link has no room: it waits). Whether it did any work.
  bool pump(SendQp& q, int64_t now, uint32_t max_wqes);
  // The owner's tail, if it is sane; else the QP fails.
  bool tail_of(SendQp& q, uint64_t* tail);
  bool read_wqe(const SendQp& q, uint64_t pos, Wqe& w) const;
  // Moves the QP to error: its oldest outstanding request completes with `first`, the rest
  // with WR_FLUSH_ERR. The owner is told `why` (kRouted: its work failed, as a completion error
  // on a fabric; kPeerGone: its peer went away).
  void abort(SendQp& q, ibv_wc_status first, bool tell_owner,
             proto::FatalReason why = proto::FatalReason::kRouted);
  void complete(SendQp& q, const Wqe& w, ibv_wc_status st, uint32_t byte_len);
  // The request's payload where it lies: its inline data, or its SGEs in the owner's memory
  // (written into by READ and atomic responses). False when it cannot go: an SGE deregistered
  // since it was posted is a local protection error, in order (the QP fails).
  bool gather(SendQp& q, const Wqe& w, shm::Seg* data, int& nseg, uint64_t& total);

  // A response frame on `link`; its payload (READ data) then goes where `dest` says.
  void on_response(Link& link, const wire::Response& r, uint32_t payload, PayloadDest& dest,
                   int64_t now);
  // The payload of the frame being received is complete: false when no response of this
  // requester was receiving one on the link.
  bool on_payload(Link& link, int64_t now);
  // Whether READ data is being placed into a client's memory on some link now.
  bool placing() const;
  void forget_link(uint32_t link_id) { rx_.erase(link_id); }

  // Liveness of a connected QP with outstanding requests on `l`: pings the link now and then
  // (kPingIntervalNs apart); true when it has been silent longer than the QP's timeout and retry
  // count allow (at least kMinSilenceNs): its connection is dead.
  static bool check_silence(SendQp& q, Link& l, int64_t now);
  static constexpr int64_t kPingIntervalNs = 50'000'000;
  static constexpr int64_t kMinSilenceNs = 150'000'000;  // never declare a link dead sooner

 private:
  bool send_wqe(SendQp& q, const Wqe& w, int64_t now);
  struct Rx {  // the READ response whose data a link is receiving
    bool active = false;
    uint32_t qpn = 0;
    uint64_t seq = 0;
    uint64_t byte_len = 0;
    ibv_wc_status status = IBV_WC_SUCCESS;
    shm::Placement pl;  // where it goes, and what each piece was translated from
  };

  RequesterEnv& env_;
  uint32_t flush_batch_;
  std::unordered_map<uint32_t, Rx> rx_;  // link id ->
};

}  // namespace vrdma::transport
