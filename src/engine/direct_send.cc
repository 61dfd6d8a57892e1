// The sending side of a direct connection (direct.h): this process's QPs' requests, taken from
// their SendQueues in turn, and their completions.
#include <string.h>

#include "common/clock.h"
#include "engine/device.h"
#include "engine/direct.h"

namespace vrdma {

namespace {

constexpr uint32_t kPerTurn = 16;      // requests of one QP per turn (then the next QP's)
constexpr uint32_t kPumpBudget = 512;  // requests one drive sends in all

}  // namespace

int DirectLink::attach_sender(uint32_t qpn, uint32_t type, uint32_t qp_offset, uint32_t dst_qpn,
                              const uint8_t* ticket) {
  std::lock_guard lock(mu_);
  if (!live_) return ENOTCONN;
  if (senders_.count(qpn)) return EEXIST;
  transport::SendQp& q = senders_[qpn];
  q.qpn = qpn;
  q.owner = dev_.info().client_id;
  q.type = type;
  q.ipv4 = dev_.info().ipv4;
  q.dst_qpn = dst_qpn;
  q.link_id = link_.id();
  q.peer = self_;
  if (int err = transport::Requester::attach(q, qp_offset)) {
    senders_.erase(qpn);
    return err;
  }
  closed_.erase(dst_qpn);
  if (ticket) {
    wire::DirectAdd a{{}, qpn, dst_qpn, type, 0};
    memcpy(a.ticket, ticket, sizeof(a.ticket));
    if (!link_.send(wire::Type::kDirectAdd, &a, sizeof(a))) {
      senders_.erase(qpn);
      return ENOBUFS;
    }
    if (!link_.flush(now_ns())) finish("send failed");
  }
  return 0;
}

void DirectLink::detach_sender(uint32_t qpn) {
  std::lock_guard lock(mu_);
  if (!senders_.erase(qpn) || !live_) return;
  wire::Close c{qpn, wire::kCloseSender};
  link_.send(wire::Type::kClose, &c, sizeof(c));
  if (!link_.flush(now_ns())) finish("send failed");
}

transport::SendQp* DirectLink::find(uint32_t qpn) {
  auto it = senders_.find(qpn);
  return it == senders_.end() ? nullptr : &it->second;
}

uint32_t DirectLink::pump(int64_t now) {
  if (senders_.empty()) return 0;
  // The QPs take turns, a few requests each, from a turning start: a program's QPs progress
  // together, as a device serves them.
  uint32_t budget = kPumpBudget;
  bool more = true;
  auto first = senders_.lower_bound(turn_);
  if (first == senders_.end()) first = senders_.begin();
  while (more && budget >= kPerTurn) {
    more = false;
    auto it = first;
    do {
      transport::SendQp& q = it->second;
      const uint64_t before = q.sent;
      if (req_.pump(q, now, kPerTurn) && q.sent != before) more = true;
      budget -= std::min<uint32_t>(budget, static_cast<uint32_t>(q.sent - before));
      if (++it == senders_.end()) it = senders_.begin();
    } while (it != first && budget >= kPerTurn);
  }
  if (++first == senders_.end()) first = senders_.begin();
  turn_ = first->first;
  return kPumpBudget - budget;
}

bool DirectLink::check_senders(int64_t now) {
  // A connection whose other end stopped answering fails its QPs (RETRY_EXC_ERR).
  for (auto& [qpn, q] : senders_)
    if (!q.failed && q.done != q.sent && transport::Requester::check_silence(q, link_, now))
      return false;
  return true;
}

void DirectLink::receiver_closed(uint32_t dst_qpn) {
  // A destination QP went away on purpose: what its senders post from now on finds nobody.
  closed_.insert(dst_qpn);
  for (auto& [qpn, q] : senders_)
    if (q.dst_qpn == dst_qpn && !q.failed && q.done != q.sent)
      req_.abort(q, IBV_WC_RETRY_EXC_ERR, true);
}

void DirectLink::senders_ended() {
  // What is posted from now on finds nobody (link_for): RETRY_EXC_ERR, in order. What was
  // outstanding fails so; a QP with nothing outstanding lost its peer (unless that peer went
  // away on purpose: its QP said Close, and only what it never answered fails).
  for (auto& [qpn, q] : senders_) {
    if (q.failed) continue;
    const bool outstanding = q.done < q.sent;
    if (!outstanding && closed_.count(q.dst_qpn)) continue;
    req_.abort(q, outstanding ? IBV_WC_RETRY_EXC_ERR : IBV_WC_WR_FLUSH_ERR, true,
               outstanding ? proto::FatalReason::kRouted : proto::FatalReason::kPeerGone);
  }
}

void DirectLink::failed(transport::SendQp& q, proto::FatalReason why) {
  dev_.queue_fatal(q.qpn, why);
}

}  // namespace vrdma
