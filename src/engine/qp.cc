#include "engine/qp.h"

#include <errno.h>
#include <string.h>
#include <time.h>

#include <algorithm>
#include <thread>

#include "common/address.h"
#include "engine/direct.h"
#include "engine/implicit_odp.h"
#include "engine/xrc.h"

namespace vrdma {

namespace {
constexpr uint32_t kMaxWr = 16384;
constexpr uint32_t kMaxInline = 4096;
}  // namespace

Qp::Qp(const QpConfig& cfg)
    : pd_(cfg.pd),
      send_cq_(cfg.send_cq),
      recv_cq_(cfg.recv_cq),
      srq_(cfg.srq),
      type_(cfg.type),
      sq_sig_all_(cfg.sq_sig_all),
      allocator_(cfg.allocator) {}

Qp::~Qp() {
  Device& dev = context().device();
  // What already reached this process for the QP is taken (and answered) before it goes, as a
  // device has taken whatever arrived before its QP was destroyed.
  drain_direct_in();
  dev.remove_qp(this);
  // A direct connection taking in a new pair for it holds it meanwhile.
  while (pins_.load(std::memory_order_acquire)) std::this_thread::yield();
  close_direct();
  if (qpn_ && !handed_) {
    proto::FreeQpnReq req{qpn_};
    dev.control().call(proto::Op::kFreeQpn, req);
  }
  if (recv_source_.ring.ring) recv_cq_->detach(&recv_source_);
  if (object_ && object_->notify_fd() >= 0 && recv_cq_->channel())
    recv_cq_->channel()->unwatch(object_->notify_fd());
  if (handed_ && object_) object_->disown();
  object_.reset();  // marks it gone for whoever still maps it
  if (sq_mem_) allocator_.free(allocator_.owner, sq_mem_);
  if (shared_) shared_->state.store(IBV_QPS_RESET);
  if (recv_table_offset_) dev.arena().free(recv_table_offset_);
  if (sq_) {
    send_cq_->detach(sq_);
    dev.arena().free(shared_->sq_offset);
  }
  if (offset_) dev.arena().free(offset_);
}

// An XRC_RECV QP's state is its object's: a handle in another process may set it.
ibv_qp_state Qp::state() const {
  const auto& st =
      type_ == IBV_QPT_XRC_RECV && object_ ? object_->qp()->attrs.state : shared_->state;
  return static_cast<ibv_qp_state>(st.load(std::memory_order_relaxed));
}

void Qp::set_state(ibv_qp_state st) {
  shared_->state.store(st, std::memory_order_release);
  if (object_) object_->qp()->attrs.state.store(st, std::memory_order_release);
}

// A QP object: receive queue (unless the SRQ's), the ring of receive completions, the published
// attributes. Attached to the receive CQ (and its channel) in place of any earlier one.
int Qp::new_object() {
  Device& dev = context().device();
  uint32_t ring_cap = srq_ ? srq_->capacity() : cap_.max_recv_wr;
  auto obj = std::make_unique<SharedObject>();
  int e = obj->create_qp(dev.control(), dev.info().client_id, ring_cap, cap_.max_recv_wr,
                         cap_.max_recv_sge, srq_ ? srq_->fd_id() : 0,
                         recv_cq_->channel() != nullptr);
  if (e) return e;
  shm::QpAttrs& a = obj->qp()->attrs;
  a.qpn = qpn_;
  a.qp_type = type_;
  a.pd = pd_->id();
  a.state.store(shared_->state.load(std::memory_order_relaxed), std::memory_order_relaxed);
  a.access.store(shared_->access.load(std::memory_order_relaxed), std::memory_order_relaxed);
  a.qkey.store(shared_->qkey.load(std::memory_order_relaxed), std::memory_order_relaxed);
  a.min_rnr_timer.store(shared_->min_rnr_timer.load(std::memory_order_relaxed),
                        std::memory_order_relaxed);
  if (recv_source_.ring.ring) recv_cq_->detach(&recv_source_);
  if (object_) {
    if (object_->notify_fd() >= 0 && recv_cq_->channel())
      recv_cq_->channel()->unwatch(object_->notify_fd());
    object_->qp()->attrs.gone.store(1, std::memory_order_release);
  }
  if (!srq_) {
    std::lock_guard lock(recv_lock_);
    if (object_)
      own_recvs_.reset(obj->rq());
    else
      own_recvs_.init(obj->rq(), dev.arena().at<shm::RecvTable>(recv_table_offset_));
  }
  object_ = std::move(obj);
  recv_source_.ring = object_->ring();
  recv_source_.head = 0;
  if (object_->notify_fd() >= 0) recv_cq_->channel()->watch(object_->notify_fd(), recv_cq_);
  recv_cq_->attach(&recv_source_);
  return 0;
}

int Qp::init(ibv_qp_cap& cap) {
  if (type_ != IBV_QPT_RC && type_ != IBV_QPT_UC && type_ != IBV_QPT_UD &&
      type_ != IBV_QPT_XRC_SEND && type_ != IBV_QPT_XRC_RECV && type_ != kQptXrcSrq)
    return EOPNOTSUPP;
  if (!send_cq_ || !recv_cq_) return EINVAL;
  if (cap.max_send_wr > kMaxWr || cap.max_recv_wr > kMaxWr || cap.max_send_sge > shm::kMaxSendSge ||
      cap.max_recv_sge > shm::kMaxRecvSge || cap.max_inline_data > kMaxInline)
    return EINVAL;
  Device& dev = context().device();
  cap_.max_send_wr = std::max<uint32_t>(cap.max_send_wr, 1);
  cap_.max_send_sge = std::max<uint32_t>(cap.max_send_sge, 1);
  cap_.max_inline_data = std::max<uint32_t>(cap.max_inline_data, 64);
  cap_.max_recv_sge = srq_ ? 0 : std::max<uint32_t>(cap.max_recv_sge, 1);
  cap_.max_recv_wr = srq_ ? 0 : shm::pow2_at_least(std::max<uint32_t>(cap.max_recv_wr, 1));

  offset_ = dev.arena().alloc(sizeof(shm::QpShared));
  if (!offset_) return ENOMEM;
  shared_ = dev.arena().at<shm::QpShared>(offset_);
  shared_->qp_type = type_;
  shared_->state.store(IBV_QPS_RESET);
  shared_->recv_cq_offset = recv_cq_->offset();
  shared_->send_cq_offset = send_cq_->offset();
  if (srq_) {
    recvs_ = &srq_->recvs();
    shared_->recv_table_offset = srq_->table_offset();
  } else {
    recv_table_offset_ =
        dev.arena().alloc(shm::recv_table_bytes(cap_.max_recv_wr, cap_.max_recv_sge));
    if (!recv_table_offset_) return ENOMEM;
    recvs_ = &own_recvs_;
    shared_->recv_table_offset = recv_table_offset_;
  }
  shared_->sq_sig_all = sq_sig_all_;
  if (int e = init_route_queue()) return e;
  send_cq_->attach(sq_);

  proto::AllocQpnReq req{static_cast<uint32_t>(type_), offset_, 0, 0, 0, pd_->id()};
  auto reply = std::make_unique<Packet>();
  recv_source_.recvs = recvs_;
  recv_source_.srq = srq_;
  recv_source_.type = type_;
  recv_source_.counters = &shared_->counters;
  // The object names the QPN, which comes with AllocQpn: a placeholder object first would cost a
  // round trip, so the QPN is asked for with the object's fd id reserved and the object is made
  // right after.
  if (int e = new_object()) return e;
  req.object_fd_id = object_->fd_id();
  req.srq_fd_id = srq_ ? srq_->fd_id() : 0;
  req.notify_fd_id = object_->notify_fd_id();
  if (int e = dev.control().call(proto::Op::kAllocQpn, req, reply.get())) return e;
  auto* rep = reply->as<proto::AllocQpnRep>();
  if (!rep || rep->qpn == 0) return EPROTO;
  qpn_ = rep->qpn;
  shared_->qpn = qpn_;
  object_->qp()->attrs.qpn = qpn_;
  recv_source_.qpn = qpn_;

  const size_t pend_bytes = size_t(cap_.max_send_wr) * sizeof(Pending);
  const size_t inline_bytes = size_t(cap_.max_send_wr) * cap_.max_inline_data;
  if (allocator_.alloc) {
    void* p = allocator_.alloc(allocator_.owner, pend_bytes + inline_bytes, alignof(Pending));
    if (!p) return ENOMEM;
    if (p != use_default_allocator()) {
      sq_mem_ = p;
      memset(p, 0, pend_bytes + inline_bytes);
      pend_ = static_cast<Pending*>(p);
      inline_ = static_cast<uint8_t*>(p) + pend_bytes;
    }
  }
  if (!pend_) {
    pending_.resize(cap_.max_send_wr);
    inline_buf_.resize(inline_bytes);
    pend_ = pending_.data();
    inline_ = inline_buf_.data();
  }
  cap = cap_;
  dev.add_qp(this);
  return 0;
}

// ---- state machine -------------------------------------------------------

namespace {
struct Transition {
  int required;
  int optional;
};

Transition transition(ibv_qp_type t, ibv_qp_state from, ibv_qp_state to) {
  const int none = 0;
  // XRC QPs connect as RC does; an XRC_SEND QP has no responder side, so its RTR needs no
  // responder resources and no RNR timer.
  const bool xrc_send = t == IBV_QPT_XRC_SEND;
  bool ud = t == IBV_QPT_UD, rc = t == IBV_QPT_RC || t == IBV_QPT_XRC_RECV || xrc_send;
  if (t == kQptXrcSrq) return {-1, 0};  // made ready by open_xrc_srq, never modified
  if (to == IBV_QPS_RESET || to == IBV_QPS_ERR) return {none, ~0};
  switch (from) {
    case IBV_QPS_RESET:
      if (to != IBV_QPS_INIT) break;
      return ud ? Transition{IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY, none}
                : Transition{IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, none};
    case IBV_QPS_INIT:
      if (to == IBV_QPS_INIT)
        return {none, IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS | IBV_QP_QKEY};
      if (to != IBV_QPS_RTR) break;
      if (ud) return {none, IBV_QP_PKEY_INDEX | IBV_QP_QKEY};
      if (xrc_send)
        return {IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN,
                IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER | IBV_QP_ALT_PATH |
                    IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX};
      if (rc)
        return {IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                    IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER,
                IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX};
      return {IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN,
              IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX};
    case IBV_QPS_RTR:
      if (to != IBV_QPS_RTS) break;
      if (ud) return {IBV_QP_SQ_PSN, IBV_QP_CUR_STATE | IBV_QP_QKEY};
      if (t == IBV_QPT_XRC_RECV)  // no requester: no retries, no read/atomic resources
        return {IBV_QP_SQ_PSN | IBV_QP_TIMEOUT,
                IBV_QP_CUR_STATE | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_MIN_RNR_TIMER |
                    IBV_QP_PATH_MIG_STATE};
      if (rc)
        return {IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                    IBV_QP_MAX_QP_RD_ATOMIC,
                IBV_QP_CUR_STATE | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_MIN_RNR_TIMER |
                    IBV_QP_PATH_MIG_STATE};
      return {IBV_QP_SQ_PSN,
              IBV_QP_CUR_STATE | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PATH_MIG_STATE};
    case IBV_QPS_RTS:
      if (to == IBV_QPS_RTS || to == IBV_QPS_SQD)
        return {none, IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_ALT_PATH |
                          IBV_QP_PATH_MIG_STATE | IBV_QP_MIN_RNR_TIMER | IBV_QP_QKEY};
      break;
    case IBV_QPS_SQD:
      if (to == IBV_QPS_RTS || to == IBV_QPS_SQD) return {none, ~0};
      break;
    case IBV_QPS_SQE:
      if (to == IBV_QPS_RTS) return {none, IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_QKEY};
      break;
    default:
      break;
  }
  return {-1, 0};
}
}  // namespace

int Qp::check_modify(const ibv_qp_attr& attr, int mask, ibv_qp_state cur) const {
  return check_transition(type_, attr, mask, cur);
}

int Qp::check_transition(ibv_qp_type type, const ibv_qp_attr& attr, int mask, ibv_qp_state cur) {
  if ((mask & IBV_QP_CUR_STATE) && attr.cur_qp_state != cur && attr.cur_qp_state != IBV_QPS_SQE)
    return EINVAL;
  if (mask & IBV_QP_STATE) {
    Transition t = transition(type, cur, attr.qp_state);
    if (t.required < 0) return EINVAL;
    int given = mask & ~(IBV_QP_STATE | IBV_QP_CUR_STATE);
    if ((given & t.required) != t.required) return EINVAL;
  }
  if ((mask & IBV_QP_PORT) && attr.port_num != 1) return EINVAL;
  if ((mask & IBV_QP_PKEY_INDEX) && attr.pkey_index != 0) return EINVAL;
  if ((mask & IBV_QP_PATH_MTU) && (attr.path_mtu < IBV_MTU_256 || attr.path_mtu > IBV_MTU_4096))
    return EINVAL;
  if ((mask & IBV_QP_MAX_QP_RD_ATOMIC) && attr.max_rd_atomic > 16) return EINVAL;
  if ((mask & IBV_QP_MAX_DEST_RD_ATOMIC) && attr.max_dest_rd_atomic > 16) return EINVAL;
  if ((mask & IBV_QP_AV) && attr.ah_attr.port_num > 1) return EINVAL;
  return 0;
}

// Keeps what `mask` sets: the attributes peers and the router read in shared memory, and the
// rest for query.
void Qp::store_attributes(const ibv_qp_attr& attr, int mask) {
  shm::QpAttrs& pub = object_->qp()->attrs;
  if (mask & IBV_QP_ACCESS_FLAGS) {
    shared_->access.store(attr.qp_access_flags);
    pub.access.store(attr.qp_access_flags);
  }
  if (mask & IBV_QP_QKEY) {
    shared_->qkey.store(attr.qkey);
    pub.qkey.store(attr.qkey);
  }
  if (mask & IBV_QP_MIN_RNR_TIMER) {
    shared_->min_rnr_timer.store(attr.min_rnr_timer & 31);
    pub.min_rnr_timer.store(attr.min_rnr_timer & 31);
  }
  if (mask & IBV_QP_TIMEOUT) shared_->timeout.store(attr.timeout & 31);
  if (mask & IBV_QP_RETRY_CNT) shared_->retry_cnt.store(attr.retry_cnt & 7);
  if (mask & IBV_QP_RNR_RETRY) shared_->rnr_retry.store(attr.rnr_retry & 7);
  if (mask & IBV_QP_AV)
    shared_->traffic_class.store(uint32_t(attr.ah_attr.sl & 15) << 8 |
                                 (attr.ah_attr.is_global ? attr.ah_attr.grh.traffic_class : 0));
  int keep = mask & ~(IBV_QP_STATE | IBV_QP_CUR_STATE);
  if (keep & IBV_QP_PKEY_INDEX) attr_.pkey_index = attr.pkey_index;
  if (keep & IBV_QP_PORT) attr_.port_num = attr.port_num;
  if (keep & IBV_QP_ACCESS_FLAGS) attr_.qp_access_flags = attr.qp_access_flags;
  if (keep & IBV_QP_QKEY) attr_.qkey = attr.qkey;
  if (keep & IBV_QP_AV) attr_.ah_attr = attr.ah_attr;
  if (keep & IBV_QP_PATH_MTU) attr_.path_mtu = attr.path_mtu;
  if (keep & IBV_QP_DEST_QPN) {
    attr_.dest_qp_num = attr.dest_qp_num;
    recv_source_.peer_qpn.store(attr.dest_qp_num, std::memory_order_relaxed);
  }
  if (keep & IBV_QP_RQ_PSN) attr_.rq_psn = attr.rq_psn;
  if (keep & IBV_QP_SQ_PSN) attr_.sq_psn = attr.sq_psn;
  if (keep & IBV_QP_MAX_DEST_RD_ATOMIC) attr_.max_dest_rd_atomic = attr.max_dest_rd_atomic;
  if (keep & IBV_QP_MAX_QP_RD_ATOMIC) attr_.max_rd_atomic = attr.max_rd_atomic;
  if (keep & IBV_QP_MIN_RNR_TIMER) attr_.min_rnr_timer = attr.min_rnr_timer;
  if (keep & IBV_QP_TIMEOUT) attr_.timeout = attr.timeout;
  if (keep & IBV_QP_RETRY_CNT) attr_.retry_cnt = attr.retry_cnt;
  if (keep & IBV_QP_RNR_RETRY) attr_.rnr_retry = attr.rnr_retry;
}

// INIT -> RTR of a connected QP: find its destination. An unknown destination is not an
// error here: as on a fabric, sends to it will time out. The connection is retried at the
// first send.
void Qp::connect_destination(const ibv_qp_attr& attr) {
  // The address's class first: a router connecting the QP to another host takes its lane there.
  shared_->traffic_class.store(uint32_t(attr.ah_attr.sl & 15) << 8 |
                               (attr.ah_attr.is_global ? attr.ah_attr.grh.traffic_class : 0));
  memset(dest_gid_, 0, sizeof(dest_gid_));
  uint32_t ip = 0;
  if (attr.ah_attr.is_global) {
    memcpy(dest_gid_, attr.ah_attr.grh.dgid.raw, 16);
    gid_to_ipv4(dest_gid_, &ip);
  }
  dest_ipv4_.store(ip, std::memory_order_relaxed);
  shm::PeerQp p;
  peer_wanted_ = true;
  DirectJoin direct;
  if (connect_peer(attr.dest_qp_num, dest_gid_, p, &direct) == 0) {
    std::lock_guard lock(lock_);
    if (direct.direct && join_direct(direct, attr.dest_qp_num) != 0) return;
    peer_ = std::move(p);
    routed_ = peer_.routed;
  }
}

int Qp::modify(const ibv_qp_attr& attr, int mask) {
  const ibv_qp_state cur = state();
  if (int err = check_modify(attr, mask, cur)) return err;
  const ibv_qp_state next = (mask & IBV_QP_STATE) ? attr.qp_state : cur;
  if (next == IBV_QPS_RTR && cur == IBV_QPS_INIT && type_ != IBV_QPT_UD) connect_destination(attr);

  std::lock_guard lock(lock_);
  if (next == IBV_QPS_RESET && cur != IBV_QPS_RESET) {
    // Whoever reached the old QP reaches nothing of what comes next: a new object, in which the
    // posted receives are dropped silently, as a reset does. Without a new object the QP stays
    // as it was. Its direct connections end.
    set_state(IBV_QPS_RESET);
    close_direct();
    if (int e = new_object()) return e;
    proto::SetQpObjectReq req{qpn_, object_->fd_id(), object_->notify_fd_id(), 0};
    if (int e = context().device().control().call(proto::Op::kSetQpObject, req)) return e;
  }
  store_attributes(attr, mask);
  if (!(mask & IBV_QP_STATE)) return 0;
  if (next == IBV_QPS_RESET) {
    flush_locked();
    send_cq_->remove_qp(qpn_);
    if (recv_cq_ != send_cq_) recv_cq_->remove_qp(qpn_);
    pend_head_ = pend_count_ = 0;
    block_ = Block::kNone;
    peer_ = shm::PeerQp{};
    peer_wanted_ = false;
    routed_ = false;
    ud_peers_.clear();
    xrc_srqs_.clear();
    xrc_target_ = shm::PeerQp{};
    mcast_groups_.clear();
  }
  set_state(next);
  if (next == IBV_QPS_ERR) {
    flush_locked();
    flush_recv();
  }
  return 0;
}

void Qp::query(ibv_qp_attr& attr, ibv_qp_init_attr& init) const {
  attr = attr_;
  attr.qp_state = state();
  attr.cur_qp_state = attr.qp_state;
  attr.cap = cap_;
  attr.path_mig_state = IBV_MIG_MIGRATED;
  attr.sq_draining = 0;
  memset(&init, 0, sizeof(init));
  init.qp_context = nullptr;
  init.send_cq = nullptr;
  init.recv_cq = nullptr;
  init.cap = cap_;
  init.qp_type = type_;
  init.sq_sig_all = sq_sig_all_;
}

int Qp::connect_peer(uint32_t dest_qpn, const uint8_t* gid, shm::PeerQp& out, DirectJoin* direct,
                     uint32_t flags) {
  Device& dev = context().device();
  proto::ConnectQpReq req{qpn_, dest_qpn, {}, flags, 0};
  memcpy(req.dest_gid, gid, 16);
  auto reply = std::make_unique<Packet>();
  if (int e = dev.control().call(proto::Op::kConnectQp, req, reply.get())) return e;
  auto* rep = reply->as<proto::ConnectQpRep>();
  if (!rep) {
    reply->close_fds();
    return EPROTO;
  }
  if (rep->direct) {
    // A container of another host: the connection vrdmad opened to it is the reply's, or the
    // process has one to join.
    if (!direct || reply->nfds > 1) {
      reply->close_fds();
      return EPROTO;
    }
    direct->direct = true;
    if (reply->nfds == 1) direct->fd.reset(reply->fds[0]);
    reply->nfds = 0;
    direct->key = rep->link_key;
    memcpy(direct->ticket, rep->ticket, sizeof(direct->ticket));
    out = shm::PeerQp{};
    out.routed = true;
    out.qpn = dest_qpn;
    out.type = rep->peer_qp_type;
    return 0;
  }
  if (rep->routed) {
    if (reply->nfds == 1) {
      dev.set_router_doorbell(reply->fds[0]);
      reply->nfds = 0;
    }
    reply->close_fds();
    if (dev.router_doorbell() < 0) return EPROTO;
    out = shm::PeerQp{};
    out.routed = true;
    out.qpn = dest_qpn;
    out.type = rep->peer_qp_type;
    return 0;
  }
  reply->close_fds();
  int err = 0;
  auto peer = dev.peer(rep->peer_client, err);
  if (!peer) return err;
  if (int e = shm::attach_peer_qp(peer, rep->peer_object_fd_id, qpn_, out)) return e;
  return out.qpn == dest_qpn ? 0 : EPROTO;
}

// ---- receive side -------------------------------------------------------

int Qp::post_recv(ibv_recv_wr* wr, ibv_recv_wr** bad) {
  if (srq_ || type_ == IBV_QPT_XRC_SEND || type_ == IBV_QPT_XRC_RECV) {
    *bad = wr;
    return EINVAL;
  }
  if (state() == IBV_QPS_RESET) {
    *bad = wr;
    return EINVAL;
  }
  MemoryRegistry& mem = context().device().memory();
  {
    std::lock_guard lock(recv_lock_);
    for (; wr; wr = wr->next) {
      OdpRecvCopy odp;
      const ibv_recv_wr& w = resolve_implicit(mem, *wr, odp);
      if (w.num_sge > 0 && static_cast<uint32_t>(w.num_sge) <= cap_.max_recv_sge)
        mem.prepare_receive(w.sg_list, w.num_sge);
      if (int e = own_recvs_.post(w)) {
        *bad = wr;
        return e;
      }
    }
  }
  if (state() == IBV_QPS_ERR) flush_recv();
  return 0;
}

// Receives a sender already filled and reported complete before the error stay complete: their
// reports, not yet polled, go ahead of the flushes (Cq::settle), and only the receives left
// outstanding after them are flushed.
void Qp::flush_recv() {
  if (srq_) return;
  if (recv_source_.ring.ring) recv_cq_->settle(recv_source_);
  std::lock_guard lock(recv_lock_);
  own_recvs_.flush([&](uint64_t wr_id) {
    ibv_wc wc{};
    wc.wr_id = wr_id;
    wc.status = IBV_WC_WR_FLUSH_ERR;
    wc.opcode = IBV_WC_RECV;
    wc.qp_num = qpn_;
    recv_cq_->push(wc, false);
  });
}

// ---- send side ----------------------------------------------------------

int Qp::validate(const ibv_send_wr& wr) const {
  if (wr.num_sge < 0 || static_cast<uint32_t>(wr.num_sge) > cap_.max_send_sge) return EINVAL;
  if (!shm::opcode_allowed(type_, wr.opcode) && !shm::is_local_memory_op(type_, wr.opcode))
    return EINVAL;
  if (wr.send_flags & IBV_SEND_INLINE) {
    if (shm::returns_data(wr.opcode)) return EINVAL;
    uint64_t len = 0;
    for (int i = 0; i < wr.num_sge; ++i) len += wr.sg_list[i].length;
    if (len > cap_.max_inline_data) return EINVAL;
  }
  if (type_ == IBV_QPT_UD && !wr.wr.ud.ah) return EINVAL;
  return 0;
}

void Qp::complete(const ibv_send_wr& wr, const Result& r) {
  shm::count_send_completion(shared_->counters, wr.opcode, r.status, r.byte_len);
  if (r.status == IBV_WC_SUCCESS && !(sq_sig_all_ || (wr.send_flags & IBV_SEND_SIGNALED))) return;
  ibv_wc wc{};
  wc.wr_id = wr.wr_id;
  wc.status = r.status;
  wc.qp_num = qpn_;
  wc.opcode = shm::completion_opcode(wr.opcode);
  if (wr.opcode == IBV_WR_RDMA_READ) wc.byte_len = r.byte_len;
  if (shm::is_atomic(wr.opcode)) wc.byte_len = 8;
  send_cq_->push(wc, false);
}

void Qp::enqueue(const ibv_send_wr& wr) {
  uint32_t idx = (pend_head_ + pend_count_) % cap_.max_send_wr;
  Pending& p = pend_[idx];
  p.wr = wr;
  p.wr.next = nullptr;
  if (wr.send_flags & IBV_SEND_INLINE) {
    uint8_t* buf = inline_ + size_t(idx) * cap_.max_inline_data;
    uint32_t len = 0;
    for (int i = 0; i < wr.num_sge; ++i) {
      memcpy(buf + len, reinterpret_cast<void*>(wr.sg_list[i].addr), wr.sg_list[i].length);
      len += wr.sg_list[i].length;
    }
    p.sge[0] = ibv_sge{reinterpret_cast<uint64_t>(buf), len, 0};
    p.wr.num_sge = 1;
  } else {
    for (int i = 0; i < wr.num_sge; ++i) p.sge[i] = wr.sg_list[i];
  }
  p.wr.sg_list = p.sge;
  ++pend_count_;
}

int Qp::post_send(ibv_send_wr* wr, ibv_send_wr** bad) {
  std::lock_guard lock(lock_);
  // What went to the direct connection leaves once the whole list is queued.
  struct Kick {
    Qp& qp;
    ~Kick() { qp.kick_direct(); }
  } kick{*this};
  ibv_qp_state st = state();
  if (st == IBV_QPS_RESET || st == IBV_QPS_INIT || st == IBV_QPS_RTR) {
    *bad = wr;
    return EINVAL;
  }
  bool newly_blocked = false;
  MemoryRegistry& mem = context().device().memory();
  for (; wr; wr = wr->next) {
    if (int e = validate(*wr)) {
      *bad = wr;
      return e;
    }
    OdpSendCopy odp;
    const ibv_send_wr& w = resolve_implicit(mem, *wr, odp);
    if (state() == IBV_QPS_ERR && !routed_) {
      complete(w, Result{IBV_WC_WR_FLUSH_ERR, 0, Block::kNone});
      continue;
    }
    if (pend_count_) {
      if (pend_count_ >= cap_.max_send_wr) {
        *bad = wr;
        return ENOMEM;
      }
      enqueue(w);
      continue;
    }
    Result r = execute(w);
    if (r.block == Block::kRouted) continue;
    if (r.block == Block::kFull) {
      *bad = wr;
      return ENOMEM;
    }
    if (r.block != Block::kNone) {
      enqueue(w);
      block_ = r.block;
      retries_left_ = r.block == Block::kRnr ? attr_.rnr_retry : attr_.retry_cnt;
      deadline_ns_ =
          r.block == Block::kPaced ? r.not_before : now_ns() + block_interval_ns(r.block);
      newly_blocked = true;
      continue;
    }
    complete(w, r);
    if (r.status != IBV_WC_SUCCESS) set_error();
  }
  if (newly_blocked) context().device().mark_blocked(this);
  return 0;
}

int64_t Qp::block_interval_ns(Block b) const {
  if (b == Block::kRnr) {
    uint32_t t = peer_.attrs ? peer_.attrs->min_rnr_timer.load(std::memory_order_relaxed) & 31
                          : attr_.min_rnr_timer & 31;
    return shm::rnr_timer_ns(t);
  }
  // Local ACK timeout: 4.096 us * 2^timeout; 0 means infinite (retry each second).
  return shm::ack_timeout_ns(attr_.timeout);
}

int64_t Qp::retry(int64_t now, bool wait_for_lock) {
  if (wait_for_lock) {
    lock_.lock();
  } else if (!lock_.try_lock()) {
    return now;  // someone else is working on it; look again soon
  }
  int64_t r = retry_locked(now);
  kick_direct();
  lock_.unlock();
  return r;
}

int64_t Qp::retry_locked(int64_t now) {
  while (pend_count_) {
    if (state() == IBV_QPS_ERR) {
      flush_locked();
      return -1;
    }
    Pending& p = pend_[pend_head_];
    Result r = execute(p.wr);
    if (r.block == Block::kFull) return now + 1000000;
    if (r.block == Block::kRouted) {
      pend_head_ = (pend_head_ + 1) % cap_.max_send_wr;
      --pend_count_;
      block_ = Block::kNone;
      continue;
    }
    if (r.block == Block::kPaced) {  // waits for its rate limit: no retry is used up
      block_ = Block::kPaced;
      deadline_ns_ = r.not_before;
      return deadline_ns_;
    }
    if (r.block != Block::kNone) {
      if (r.block != block_) {
        block_ = r.block;
        retries_left_ = r.block == Block::kRnr ? attr_.rnr_retry : attr_.retry_cnt;
        deadline_ns_ = now + block_interval_ns(r.block);
        return deadline_ns_;
      }
      if (now < deadline_ns_) return deadline_ns_;
      bool infinite = block_ == Block::kRnr && attr_.rnr_retry == 7;
      if (!infinite && retries_left_ <= 0) {
        r.status = block_ == Block::kRnr ? IBV_WC_RNR_RETRY_EXC_ERR : IBV_WC_RETRY_EXC_ERR;
        r.block = Block::kNone;
      } else {
        if (!infinite) --retries_left_;
        shm::bump(block_ == Block::kRnr ? shared_->counters.rnr_retries
                                        : shared_->counters.transport_retries);
        deadline_ns_ = now + block_interval_ns(block_);
        return deadline_ns_;
      }
    }
    ibv_send_wr wr = p.wr;
    pend_head_ = (pend_head_ + 1) % cap_.max_send_wr;
    --pend_count_;
    block_ = Block::kNone;
    complete(wr, r);
    if (r.status != IBV_WC_SUCCESS) {
      set_error();
      return -1;
    }
  }
  return -1;
}

void Qp::set_error() {
  set_state(IBV_QPS_ERR);
  flush_locked();
  flush_recv();
}

void Qp::flush_locked() {
  while (pend_count_) {
    ibv_send_wr wr = pend_[pend_head_].wr;
    pend_head_ = (pend_head_ + 1) % cap_.max_send_wr;
    --pend_count_;
    complete(wr, Result{IBV_WC_WR_FLUSH_ERR, 0, Block::kNone});
  }
  block_ = Block::kNone;
}

void Qp::fatal(ibv_event_type event, bool raise) {
  {
    std::lock_guard lock(lock_);
    if (state() == IBV_QPS_RESET) return;
    if (state() == IBV_QPS_ERR && !routed_) return;
    set_error();
  }
  if (raise) context().push_event(event, user);
}

}  // namespace vrdma
