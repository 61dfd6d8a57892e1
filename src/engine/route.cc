// Work for a destination on another host: the QP writes it into its SendQueue in the arena,
// where this host's router (in vrdmad) picks it up, carries it to the destination host and
// completes it into the QP's send CQ. The router sleeps when idle; then the QP rings its
// doorbell (an eventfd) after posting, and only then.
#include <string.h>
#include <unistd.h>

#include "engine/direct.h"
#include "engine/qp.h"

namespace vrdma {

int Qp::init_route_queue() {
  Device& dev = context().device();
  uint32_t cap = shm::pow2_at_least(cap_.max_send_wr);
  uint32_t esz = shm::route_wqe_size(cap_.max_send_sge, cap_.max_inline_data);
  uint32_t off = dev.arena().alloc(sizeof(shm::SendQueue) + size_t(cap) * esz);
  if (!off) return ENOMEM;
  sq_ = dev.arena().at<shm::SendQueue>(off);
  sq_->capacity = cap;
  sq_->entry_size = esz;
  sq_->max_sge = cap_.max_send_sge;
  sq_->max_inline = cap_.max_inline_data;
  sq_->tail.store(0, std::memory_order_relaxed);
  sq_->done.store(0, std::memory_order_relaxed);
  sq_->doorbell.store(0, std::memory_order_relaxed);
  sq_mask_ = cap - 1;
  sq_entry_size_ = esz;
  shared_->sq_offset = off;
  return 0;
}

Qp::Result Qp::route(const ibv_send_wr& wr, const shm::PeerQp& peer) {
  Result res;
  uint64_t tail = sq_->tail.load(std::memory_order_relaxed);
  // The router completes in order; a full queue means the application posted more than
  // max_send_wr without reaping completions.
  if (tail - sq_->done.load(std::memory_order_acquire) >= cap_.max_send_wr) {
    res.block = Block::kFull;
    return res;
  }
  auto* e = reinterpret_cast<shm::RouteWqe*>(sq_->entries + (tail & sq_mask_) * sq_entry_size_);
  e->wr_id = wr.wr_id;
  e->opcode = wr.opcode;
  e->send_flags = wr.send_flags;
  e->imm_data = wr.imm_data;
  e->status = IBV_WC_SUCCESS;
  e->inline_len = 0;
  e->num_sge = 0;
  shm::Incoming in = incoming(wr, 0);
  e->rkey = in.rkey;
  e->remote_addr = in.remote_addr;
  e->compare_add = in.compare_add;
  e->swap = in.swap;
  if (type_ == IBV_QPT_UD) {
    const Ah* ah = reinterpret_cast<const Ah*>(wr.wr.ud.ah);
    e->ud_qpn = wr.wr.ud.remote_qpn;
    e->ud_qkey = in.qkey;
    memcpy(e->dgid, ah->attr.grh.dgid.raw, 16);
  } else {
    e->ud_qpn = peer.qpn;
  }
  e->xrc_srqn = type_ == IBV_QPT_XRC_SEND ? wr.qp_type.xrc.remote_srqn : 0;
  // The gather list is checked here, against this process's MRs and PD; the router then
  // finds the same memory through the keys.
  shm::Seg local[shm::kMaxSendSge];
  int nl;
  uint64_t total;
  ibv_wc_status st = gather(wr, local, nl, total);
  if (st != IBV_WC_SUCCESS) {
    e->status = st;
  } else if (wr.send_flags & IBV_SEND_INLINE) {
    auto* data = reinterpret_cast<uint8_t*>(e->sge + sq_->max_sge);
    uint32_t len = 0;
    for (int i = 0; i < nl; ++i) {
      memcpy(data + len, local[i].p, local[i].len);
      len += static_cast<uint32_t>(local[i].len);
    }
    e->inline_len = len;
  } else {
    e->num_sge = static_cast<uint32_t>(wr.num_sge);
    memcpy(e->sge, wr.sg_list, sizeof(ibv_sge) * wr.num_sge);
  }
  sq_->tail.store(tail + 1, std::memory_order_release);
  res.block = Block::kRouted;
  if (direct_out_) {
    // This process's requester carries it (direct.h): sent when the list is queued.
    kick_ = true;
    return res;
  }
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (sq_->doorbell.load(std::memory_order_relaxed) &&
      sq_->doorbell.exchange(0, std::memory_order_relaxed)) {
    uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(context().device().router_doorbell(), &one, sizeof(one));
  }
  return res;
}

int Qp::join_direct(DirectJoin& j, uint32_t dst_qpn) {
  Device& dev = context().device();
  std::shared_ptr<DirectLink> link;
  const uint8_t* ticket = nullptr;
  if (j.fd) {
    link = std::make_shared<DirectLink>(dev, std::move(j.fd), j.key, true);
    dev.add_direct_link(link);
  } else {
    link = dev.direct_link(j.key);
    ticket = j.ticket;
  }
  if (!link || link->attach_sender(qpn_, type_, offset_, dst_qpn, ticket) != 0) {
    // None to join (it ended meanwhile): vrdmad makes one for this QP.
    shm::PeerQp p;
    DirectJoin again;
    if (int e = connect_peer(dst_qpn, dest_gid_, p, &again, proto::kConnectNewLink)) return e;
    if (!again.fd) return EPROTO;
    link = std::make_shared<DirectLink>(dev, std::move(again.fd), again.key, true);
    dev.add_direct_link(link);
    if (int e = link->attach_sender(qpn_, type_, offset_, dst_qpn, nullptr)) return e;
  }
  if (direct_out_ && direct_out_ != link) {
    direct_out_->detach_sender(qpn_);  // an earlier connection (before a reset)
    send_cq_->detach_direct(direct_out_.get());
    recv_cq_->detach_direct(direct_out_.get());
  }
  direct_out_ = link;
  send_cq_->attach_direct(link);
  recv_cq_->attach_direct(link);
  return 0;
}

void Qp::joined_direct_in(std::shared_ptr<DirectLink> c) {
  {
    std::lock_guard lock(direct_lock_);
    for (auto& in : direct_in_)
      if (in == c) return;
    direct_in_.push_back(c);
  }
  recv_cq_->attach_direct(c);
  send_cq_->attach_direct(c);
}

bool Qp::on_router() {
  bool routed;
  {
    std::lock_guard lock(lock_);
    routed = routed_;
  }
  std::lock_guard lock(direct_lock_);
  return routed && !direct_out_;
}

void Qp::drain_direct_in() {
  std::vector<std::shared_ptr<DirectLink>> in;
  {
    std::lock_guard lock(direct_lock_);
    in = direct_in_;
  }
  for (auto& c : in) c->drive(now_ns(), DirectLink::Driver::kPost);
}

void Qp::close_direct() {
  std::vector<std::shared_ptr<DirectLink>> in;
  {
    std::lock_guard lock(direct_lock_);
    in.swap(direct_in_);
  }
  for (auto& c : in) {
    c->detach_receiver(*this);
    recv_cq_->detach_direct(c.get());
    send_cq_->detach_direct(c.get());
  }
  if (direct_out_) {
    direct_out_->detach_sender(qpn_);
    send_cq_->detach_direct(direct_out_.get());
    recv_cq_->detach_direct(direct_out_.get());
    direct_out_.reset();
  }
}

void Qp::kick_direct() {
  if (!kick_) return;
  kick_ = false;
  if (!direct_out_) return;
  const int64_t now = now_ns();
  direct_out_->kick(now);
  // Answers this program's polls held back go after what it just sent.
  recv_cq_->flush_deferred_direct(now);
  if (send_cq_ != recv_cq_) send_cq_->flush_deferred_direct(now);
}

}  // namespace vrdma
