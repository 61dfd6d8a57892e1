// The work list: the routed QPs a pass of the router serves, so that a pass costs what the
// QPs with work cost, not what every routed QP costs.
//
// A QP is on the list while it has something to do (entries posted and not yet sent,
// requests outstanding, a flow held by its rate limit, a state change not yet seen) and for
// a few idle passes after. It then leaves with its doorbell armed: its owner rings the
// client's doorbell eventfd after its next post (engine/route.cc), and the ring puts the
// client's armed QPs back on the list. Arming and the owner's post are ordered as in
// prepare_sleep(): the router stores the doorbell flag, fences, then reads the tail; the
// owner stores the tail, fences, then reads the flag, so one of them sees the other.
// State changes (modify_qp) ring nothing: a sweep over every routed QP every 100 ms
// (check_links' cadence) puts those back.
//
// A pass serves the list in order; when a full link turns a QP away, the list is turned to
// start there (work_rotate), so that each QP's turn comes round as on a NIC.
//
// The list runs through the QPs themselves (Outbound::work_prev/work_next): nothing here
// allocates. A QP leaves it before it is destroyed (erase_outbound).
#include "daemon/router/router_state.h"

namespace vrdma::daemon {

namespace {
// Passes in a row a QP may have nothing to do before it leaves the list.
constexpr uint32_t kIdlePasses = 64;
}  // namespace

bool Router::has_work(const Outbound& o) const {
  if (o.qp->gone.load(std::memory_order_relaxed)) return false;
  if (o.qp->state.load(std::memory_order_relaxed) != o.last_state) return true;
  if (o.done != o.sent || o.qos_held) return true;
  // Posted entries (within what the queue can hold: a nonsense tail is not work).
  return o.has_posted(o.sq->tail.load(std::memory_order_relaxed));
}

void Router::work_add(Outbound& o) {
  o.idle_passes = 0;
  if (o.on_work) return;
  // Served by polling now: its owner need not ring.
  o.sq->doorbell.store(0, std::memory_order_relaxed);
  o.on_work = true;
  o.work_next = nullptr;
  o.work_prev = work_tail_;
  if (work_tail_)
    work_tail_->work_next = &o;
  else
    work_head_ = &o;
  work_tail_ = &o;
  ++work_count_;
}

void Router::work_remove(Outbound& o) {
  if (!o.on_work) return;
  if (o.work_prev)
    o.work_prev->work_next = o.work_next;
  else
    work_head_ = o.work_next;
  if (o.work_next)
    o.work_next->work_prev = o.work_prev;
  else
    work_tail_ = o.work_prev;
  o.work_prev = o.work_next = nullptr;
  o.on_work = false;
  --work_count_;
}

void Router::work_rotate(Outbound& o) {
  if (!o.on_work || work_head_ == &o) return;
  // The list becomes a ring, opened before `o`.
  work_tail_->work_next = work_head_;
  work_head_->work_prev = work_tail_;
  work_tail_ = o.work_prev;
  work_tail_->work_next = nullptr;
  o.work_prev = nullptr;
  work_head_ = &o;
}

bool Router::work_retire(Outbound& o) {
  o.sq->doorbell.store(1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (has_work(o)) {
    o.idle_passes = 0;
    return false;
  }
  work_remove(o);
  return true;
}

void Router::work_pass_done() {
  for (Outbound* o = work_head_; o;) {
    Outbound* next = o->work_next;
    if (has_work(*o))
      o->idle_passes = 0;
    else if (++o->idle_passes >= kIdlePasses)
      work_retire(*o);
    o = next;
  }
}

void Router::work_ring(uint32_t client) {
  // The client's QPs whose armed doorbell was taken (rung), or that were never armed; only
  // that client's QPs are looked at.
  auto it = client_qps_.find(client);
  if (it == client_qps_.end()) return;
  for (Outbound* o = it->second; o; o = o->client_next)
    if (!o->on_work && o->sq->doorbell.load(std::memory_order_relaxed) == 0) work_add(*o);
}

void Router::work_sweep() {
  for (auto& [qpn, o] : outbound_)
    if (!o->on_work && has_work(*o)) work_add(*o);
}

void Router::client_link(Outbound& o) {
  Outbound*& first = client_qps_[o.owner];
  o.client_prev = nullptr;
  o.client_next = first;
  if (first) first->client_prev = &o;
  first = &o;
}

void Router::client_unlink(Outbound& o) {
  if (o.client_next) o.client_next->client_prev = o.client_prev;
  if (o.client_prev) {
    o.client_prev->client_next = o.client_next;
  } else if (o.client_next) {
    client_qps_[o.owner] = o.client_next;
  } else {
    client_qps_.erase(o.owner);
  }
  o.client_prev = o.client_next = nullptr;
}

void Router::put_outbound(std::unique_ptr<Outbound> o) {
  const uint32_t qpn = o->qpn;
  o->last_state = o->qp->state.load(std::memory_order_relaxed);
  if (auto ex = outbound_.find(qpn); ex != outbound_.end()) {
    work_remove(*ex->second);
    client_unlink(*ex->second);
    qos_release(ex->second->qos_container);
  }
  qos_hold(o->qos_container);
  Outbound& ref = *o;
  outbound_[qpn] = std::move(o);
  client_link(ref);
  work_add(ref);
}

std::map<uint32_t, std::unique_ptr<Router::Outbound>>::iterator Router::erase_outbound(
    std::map<uint32_t, std::unique_ptr<Outbound>>::iterator it) {
  work_remove(*it->second);
  client_unlink(*it->second);
  qos_release(it->second->qos_container);
  return outbound_.erase(it);
}

}  // namespace vrdma::daemon
