// Queue pairs: the verbs state machine, posting, and the execution of every
// opcode against the destination's shared memory (execute.cc).
#pragma once

#include <infiniband/verbs.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <unordered_map>
#include <vector>

#include "common/clock.h"
#include "common/unique_fd.h"
#include "engine/objects.h"
#include "shm/peer.h"
#include "shm/respond.h"
#include "shm/work_request.h"

namespace vrdma {

class DirectLink;

// Who provides the memory of a QP's send queue in the process (the requests waiting their turn
// and copies of their inline data): the library's heap by default, or a parent domain's
// allocator. alloc returns the memory, nullptr (failure) or kUseDefaultAllocator.
struct QueueAllocator {
  void* (*alloc)(void* owner, size_t size, size_t alignment) = nullptr;
  void (*free)(void* owner, void* p) = nullptr;
  void* owner = nullptr;
};
inline void* use_default_allocator() { return reinterpret_cast<void*>(~uintptr_t{0}); }

struct QpConfig {
  Pd* pd;
  Cq* send_cq;
  Cq* recv_cq;
  Srq* srq;
  ibv_qp_type type;
  bool sq_sig_all;
  QueueAllocator allocator = {};
};

class Qp {
 public:
  explicit Qp(const QpConfig& cfg);
  ~Qp();

  // Allocates shared state and a QPN; adjusts `cap` to what was granted.
  int init(ibv_qp_cap& cap);

  int modify(const ibv_qp_attr& attr, int mask);
  void query(ibv_qp_attr& attr, ibv_qp_init_attr& init) const;
  int post_send(ibv_send_wr* wr, ibv_send_wr** bad);
  int post_recv(ibv_recv_wr* wr, ibv_recv_wr** bad);
  // UD multicast (qp_mcast.cc): 0 or an errno, as ibv_attach_mcast/ibv_detach_mcast answer.
  int attach_mcast(const uint8_t* gid);
  int detach_mcast(const uint8_t* gid);

  uint32_t qpn() const { return qpn_; }
  ibv_qp_state state() const;
  // Whether `attr`/`mask` make a valid modify of a QP of type `type` in state `cur`; 0 or EINVAL.
  static int check_transition(ibv_qp_type type, const ibv_qp_attr& attr, int mask,
                              ibv_qp_state cur);
  ibv_qp_type type() const { return type_; }
  Context& context() { return pd_->context(); }
  Cq* send_cq() const { return send_cq_; }
  Cq* recv_cq() const { return recv_cq_; }

  // Progress thread / poll path: retries waiting work. Returns the absolute
  // time (ns, CLOCK_MONOTONIC) of the next attempt, or -1 when nothing waits.
  int64_t retry(int64_t now_ns, bool wait_for_lock);
  // The daemon says the peer is gone (or the daemon itself is): error state, flushed work,
  // and the async event if `raise`.
  void fatal(ibv_event_type event, bool raise = true);

  // XRC (xrc.cc): an XRC_RECV QP or XRC SRQ side joins a domain the client opened; an XRC SRQ's
  // side is put into the domain and made ready.
  int join_xrcd(uint32_t xrcd);
  int open_xrc_srq(uint32_t xrcd);
  // Something the QP needs as long as it lives (an XRC_RECV QP: its domain's PD and CQ).
  void keep(std::shared_ptr<void> p) { keep_ = std::move(p); }
  // A shared XRC_RECV QP another process holds from now on: destroying this one leaves its
  // number and object to that process (xrc_shared_qp.cc).
  void hand_over() { handed_ = true; }

  // The direct path (direct.h). Whether the QP's RTR named (ipv4, qpn) as its destination (its
  // consent to requests from there); the object senders reach; the other end of a direct
  // connection from a QP of another host to this one, which vrdmad handed over.
  bool names_peer(uint32_t ipv4, uint32_t qpn) const {
    return peer_wanted_.load(std::memory_order_acquire) &&
           dest_ipv4_.load(std::memory_order_relaxed) == ipv4 &&
           recv_source_.peer_qpn.load(std::memory_order_relaxed) == qpn;
  }
  uint32_t object_fd_id() const { return object_ ? object_->fd_id() : 0; }
  // A direct connection takes requests for this QP from now on (until close_direct()).
  void joined_direct_in(std::shared_ptr<DirectLink> c);
  // Kept from being destroyed while pinned (Device::pin_qp).
  void pin() { pins_.fetch_add(1, std::memory_order_acquire); }
  void unpin() { pins_.fetch_sub(1, std::memory_order_release); }

  void* user = nullptr;

  // Whether vrdmad's router carries its requests (a destination on another host, not on the
  // direct path): what a vrdmad that goes away takes with it.
  bool on_router();

 private:
  // kRouted: handed to the router, which completes it; kFull: the router's queue is full.
  // kPaced: a same-host rate limit holds the request until `not_before` (no retry counted).
  enum class Block : uint8_t { kNone, kRnr, kTransport, kRouted, kFull, kPaced };
  struct Result {
    ibv_wc_status status = IBV_WC_SUCCESS;
    uint32_t byte_len = 0;
    Block block = Block::kNone;
    int64_t not_before = 0;  // kPaced
  };
  struct Pending {
    ibv_send_wr wr;
    ibv_sge sge[shm::kMaxSendSge];
  };

  int check_modify(const ibv_qp_attr& attr, int mask, ibv_qp_state cur) const;
  void set_state(ibv_qp_state st);  // the owner's record and the one senders read
  int new_object();                 // the QP object senders reach (again after a reset)
  void store_attributes(const ibv_qp_attr& attr, int mask);  // requires lock_
  void connect_destination(const ibv_qp_attr& attr);

  Result execute(const ibv_send_wr& wr);
  // BIND_MW and LOCAL_INV (window_ops.cc): done here, in order with the other requests.
  ibv_wc_status memory_op(const ibv_send_wr& wr);
  Result execute_mcast(const ibv_send_wr& wr);  // qp_mcast.cc
  const shm::PeerQp* local_ud_peer(uint32_t qpn);
  ibv_wc_status gather(const ibv_send_wr& wr, shm::Seg* local, int& nl, uint64_t& total) const;
  shm::Incoming incoming(const ibv_send_wr& wr, uint64_t total) const;
  Result route(const ibv_send_wr& wr, const shm::PeerQp& peer);  // route.cc
  int init_route_queue();                                        // route.cc
  const shm::PeerQp* connected_peer();
  const shm::PeerQp* xrc_peer(const ibv_send_wr& wr, ibv_wc_status& status);  // xrc.cc
  const shm::PeerQp* ud_peer(const ibv_send_wr& wr);
  // What a ConnectQp reply says of the direct path (a destination of another host's
  // container): the connection made for the QP, or the process to whose connection it is to be
  // added, with the pair's ticket.
  struct DirectJoin {
    bool direct = false;
    UniqueFd fd;
    uint64_t key = 0;
    uint8_t ticket[16] = {};
  };
  // `direct`: where such a reply goes; without it the reply is refused (EPROTO). `flags`:
  // proto::ConnectFlags.
  int connect_peer(uint32_t dest_qpn, const uint8_t* gid, shm::PeerQp& out,
                   DirectJoin* direct = nullptr, uint32_t flags = 0);
  // The QP sends on the direct connection the reply named from now on: the new one, or the
  // process's connection to that process (asking for a new one when it has none). Requires
  // lock_. 0 or an errno.
  int join_direct(DirectJoin& j, uint32_t dst_qpn);
  // Its direct connections end (the QP is destroyed or reset): the other ends are told.
  void close_direct();
  // Runs its incoming direct connections once: requests that arrived are executed and answered.
  void drain_direct_in();
  // Sends what route() queued for the direct connection (requires lock_).
  void kick_direct();
  int validate(const ibv_send_wr& wr) const;
  void complete(const ibv_send_wr& wr, const Result& r);
  void enqueue(const ibv_send_wr& wr);
  void set_error();     // requires lock_
  void flush_locked();  // requires lock_
  void flush_recv();
  int64_t block_interval_ns(Block b) const;
  int64_t retry_locked(int64_t now_ns);

  std::shared_ptr<void> keep_;  // first: it goes last
  Pd* pd_;
  Cq* send_cq_;
  Cq* recv_cq_;
  Srq* srq_;
  ibv_qp_type type_;
  bool sq_sig_all_;
  uint32_t qpn_ = 0;
  uint32_t offset_ = 0;
  shm::QpShared* shared_ = nullptr;  // in the arena: the owner's and the router's
  std::unique_ptr<SharedObject> object_;  // what senders reach
  uint32_t recv_table_offset_ = 0;        // the own receive queue's table, in the arena
  PostedRecvs own_recvs_;
  PostedRecvs* recvs_ = nullptr;  // own_recvs_ or the SRQ's
  RecvSource recv_source_;
  shm::SendQueue* sq_ = nullptr;  // work for the router; geometry below is our own copy
  uint32_t sq_mask_ = 0, sq_entry_size_ = 0;
  bool routed_ = false;  // the connected destination is on another host
  bool handed_ = false;  // hand_over()
  ibv_qp_cap cap_{};
  ibv_qp_attr attr_{};  // what modify has set, for query
  SpinLock lock_;
  SpinLock recv_lock_;  // posting and flushing receives

  // Destination (RC/UC) or destinations (UD).
  shm::PeerQp peer_;
  std::atomic<bool> peer_wanted_{false};
  std::atomic<uint32_t> dest_ipv4_{0};  // the address its RTR named (0: none, or no GID)
  // The direct path: the connection its requests go on, and those on which the other host's QPs
  // send to it (direct_lock_).
  std::shared_ptr<DirectLink> direct_out_;
  bool kick_ = false;  // route() queued work for direct_out_
  SpinLock direct_lock_;
  std::vector<std::shared_ptr<DirectLink>> direct_in_;
  std::atomic<int> pins_{0};
  uint8_t dest_gid_[16] = {};
  std::unordered_map<uint64_t, shm::PeerQp> ud_peers_;
  // XRC_SEND: the SRQs reached so far (by number), and the last request's destination.
  std::unordered_map<uint32_t, shm::PeerQp> xrc_srqs_;
  shm::PeerQp xrc_target_;
  // Multicast groups sent to: the members on this host, as of the arena's mcast_gen `gen`.
  struct McastMembers {
    uint32_t gen = 0;
    bool known = false;
    bool routed = false;  // the router carries a copy to the other hosts with members
    std::vector<uint32_t> qpns;
  };
  std::map<std::array<uint8_t, 16>, McastMembers> mcast_groups_;

  // Work that waits: a ring of copies, oldest first.
  std::vector<Pending> pending_;
  std::vector<uint8_t> inline_buf_;
  QueueAllocator allocator_;
  void* sq_mem_ = nullptr;  // from allocator_, when it provided the send queue
  Pending* pend_ = nullptr;  // pending_ or sq_mem_
  uint8_t* inline_ = nullptr;
  uint32_t pend_head_ = 0, pend_count_ = 0;
  Block block_ = Block::kNone;
  int retries_left_ = 0;
  int64_t deadline_ns_ = 0;
};

}  // namespace vrdma
