#include "engine/direct.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>
#include <sys/socket.h>

#include "common/address.h"
#include "common/clock.h"
#include "common/log.h"
#include "engine/device.h"
#include "engine/qp.h"
#include "shm/work_request.h"

namespace vrdma {

namespace {

// A connection's frames: a ring as deep as a few send queues, and a small receive buffer
// (large payloads are read straight into their destination).
constexpr transport::LinkSizes kSizes{2048, 0, 64 * 1024};
// Bytes of frames one drive reads through the buffer: at most 64 KiB / 40 bytes (the smallest
// frame) = 1 639 replies, for which the ring must have room before it reads.
constexpr size_t kReceiveBudget = 64 * 1024;
constexpr uint32_t kRoomToReceive = 1700;
static_assert(kReceiveBudget / (sizeof(wire::Header) + sizeof(wire::Response)) < kRoomToReceive);
// Payload bytes one drive reads straight into memory: then the progress thread serves the next
// connection.
constexpr size_t kDirectReadBudget = 256 * 1024;
constexpr uint32_t kPerTurn = 16;      // requests of one QP per turn (then the next QP's)
constexpr uint32_t kPumpBudget = 512;  // requests one drive sends in all
constexpr int64_t kTimerNs = 10'000'000;  // how often outstanding work is looked at

}  // namespace

// ---- DirectConn --------------------------------------------------------------------------------

DirectConn::DirectConn(Device& dev, UniqueFd fd, bool outbound)
    : dev_(dev), link_(1, std::move(fd), outbound, kSizes), self_(dev.self_peer()) {
  // vrdmad handed the connection over connected, its handshake done: frames flow at once.
  link_.connected();
  int one = 1;
  ::setsockopt(link_.fd(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  link_.last_rx_ns = now_ns();
  link_.last_outq_ns = link_.last_rx_ns;
}

DirectConn::~DirectConn() = default;

uint32_t DirectConn::peer_ipv4() const {
  sockaddr_in peer{};
  socklen_t len = sizeof(peer);
  if (::getpeername(link_.fd(), reinterpret_cast<sockaddr*>(&peer), &len) < 0 ||
      peer.sin_family != AF_INET)
    return 0;
  return peer.sin_addr.s_addr;
}

bool DirectConn::drive(int64_t now, bool wait) {
  std::unique_lock lock(mu_, std::defer_lock);
  if (wait) {
    lock.lock();
  } else if (!lock.try_lock()) {
    return true;  // another thread drives it now
  }
  now_ = now;
  if (live_ && link_.has_room(kRoomToReceive)) {
    const char* why = nullptr;
    const uint64_t before = link_.bytes_in;
    link_.rx_ready = true;  // nobody tells this thread: a read finds out
    if (!link_.receive(*this, kReceiveBudget, &why, kDirectReadBudget)) {
      finish(why ? why : "receive failed");
    } else if (link_.bytes_in != before) {
      link_.last_rx_ns = now;
    }
  }
  run(now);
  if (live_ && link_.tx_pending() && !link_.flush(now)) finish("send failed");
  if (self_->has_retired() && !link_.tx_pending() && !placing()) self_->reclaim();
  wants_room_.store(live_ && link_.tx_pending(), std::memory_order_relaxed);
  deadline_.store(live_ ? next_deadline(now) : -1, std::memory_order_relaxed);
  return live_;
}

void DirectConn::finish(const char* why) {
  if (!live_) return;
  LOG_INFO("direct connection %s %s ended: %s", link_.outbound() ? "to" : "from",
           ipv4_text(peer_ipv4()).c_str(), why);
  live_ = false;
  ::shutdown(link_.fd(), SHUT_RDWR);  // the other end learns it at once
  ended(why);
}

void DirectConn::retire() {
  if (!live_) return;
  link_.flush(now_ns());
  live_ = false;
  ::shutdown(link_.fd(), SHUT_RDWR);
}

bool DirectConn::common_frame(wire::Type type, const uint8_t* body, int64_t now) {
  switch (type) {
    case wire::Type::kPing:
      link_.send(wire::Type::kPong, body, sizeof(wire::Ping));
      return true;
    case wire::Type::kPong: {
      // The token of our pings is the time they were sent (requester.h).
      const auto sent = static_cast<int64_t>(wire::read<wire::Ping>(body).token);
      if (sent > 0 && sent <= now && sent == link_.last_ping_ns) link_.rtt_ns = now - sent;
      return true;
    }
    default:
      return false;
  }
}

// ---- DirectOut ---------------------------------------------------------------------------------

DirectOut::DirectOut(Device& dev, UniqueFd fd, uint64_t key)
    : DirectConn(dev, std::move(fd), true), key_(key), req_(*this) {}

int DirectOut::attach(uint32_t qpn, uint32_t type, uint32_t qp_offset, uint32_t dst_qpn,
                      const uint8_t* ticket) {
  std::lock_guard lock(mu_);
  if (!live_) return ENOTCONN;
  if (qps_.count(qpn)) return EEXIST;
  transport::SendQp& q = qps_[qpn];
  q.qpn = qpn;
  q.owner = dev_.info().client_id;
  q.type = type;
  q.ipv4 = dev_.info().ipv4;
  q.dst_qpn = dst_qpn;
  q.link_id = link_.id();
  q.peer = self_;
  if (int err = transport::Requester::attach(q, qp_offset)) {
    qps_.erase(qpn);
    return err;
  }
  if (ticket) {
    wire::DirectAdd a{{}, qpn, dst_qpn, type, 0};
    memcpy(a.ticket, ticket, sizeof(a.ticket));
    if (!link_.send(wire::Type::kDirectAdd, &a, sizeof(a))) {
      qps_.erase(qpn);
      return ENOBUFS;
    }
    if (!link_.flush(now_ns())) finish("send failed");
  }
  return 0;
}

void DirectOut::detach(uint32_t qpn) {
  std::lock_guard lock(mu_);
  if (!qps_.erase(qpn)) return;
  if (live_) {
    wire::Close c{qpn, 0};
    link_.send(wire::Type::kClose, &c, sizeof(c));
    if (qps_.empty()) return retire();
    if (!link_.flush(now_ns())) finish("send failed");
  }
}

transport::SendQp* DirectOut::find(uint32_t qpn) {
  auto it = qps_.find(qpn);
  return it == qps_.end() ? nullptr : &it->second;
}

void DirectOut::run(int64_t now) {
  if (qps_.empty()) return;
  // The QPs take turns, a few requests each, from a turning start: a program's QPs progress
  // together, as a device serves them.
  uint32_t budget = kPumpBudget;
  bool more = true;
  auto first = qps_.lower_bound(turn_);
  if (first == qps_.end()) first = qps_.begin();
  while (more && budget >= kPerTurn) {
    more = false;
    auto it = first;
    do {
      transport::SendQp& q = it->second;
      const uint64_t before = q.sent;
      if (req_.pump(q, now, kPerTurn) && q.sent != before) more = true;
      budget -= std::min<uint32_t>(budget, static_cast<uint32_t>(q.sent - before));
      if (++it == qps_.end()) it = qps_.begin();
    } while (it != first && budget >= kPerTurn);
    if (!live_) return;
  }
  if (++first == qps_.end()) first = qps_.begin();
  turn_ = first->first;
  // A connection whose other end stopped answering fails its QPs (RETRY_EXC_ERR).
  for (auto& [qpn, q] : qps_)
    if (live_ && !q.failed && q.done != q.sent &&
        transport::Requester::check_silence(q, link_, now))
      return finish("no answer within the QPs' timeout");
}

void DirectOut::ended(const char* /*why*/) {
  // What is posted from now on finds nobody (link_for): RETRY_EXC_ERR, in order. What was
  // outstanding fails so; a QP with nothing outstanding lost its peer (unless that peer went
  // away on purpose: its QP said Close, and only what it never answered fails).
  for (auto& [qpn, q] : qps_) {
    if (q.failed) continue;
    const bool outstanding = q.done < q.sent;
    if (!outstanding && closed_.count(q.dst_qpn)) continue;
    req_.abort(q, outstanding ? IBV_WC_RETRY_EXC_ERR : IBV_WC_WR_FLUSH_ERR, true,
               outstanding ? proto::FatalReason::kRouted : proto::FatalReason::kPeerGone);
  }
}

int64_t DirectOut::next_deadline(int64_t now) const {
  for (const auto& [qpn, q] : qps_)
    if (q.done != q.sent) return now + kTimerNs;
  return -1;
}

bool DirectOut::on_frame(transport::Link& link, wire::Type type, const uint8_t* body,
                         uint32_t payload, transport::PayloadDest& dest, const char** why) {
  if (type == wire::Type::kResponse) {
    req_.on_response(link, wire::read<wire::Response>(body), payload, dest, now_);
    return true;
  }
  if (type == wire::Type::kClose) {
    // A destination QP went away on purpose: what its senders post from now on finds nobody.
    const uint32_t dst = wire::read<wire::Close>(body).qpn;
    closed_.insert(dst);
    for (auto& [qpn, q] : qps_)
      if (q.dst_qpn == dst && !q.failed && q.done != q.sent)
        req_.abort(q, IBV_WC_RETRY_EXC_ERR, true);
    return true;
  }
  if (common_frame(type, body, now_)) return true;
  *why = "a frame a direct connection's requester does not take";
  return false;
}

void DirectOut::failed(transport::SendQp& q, proto::FatalReason why) {
  dev_.queue_fatal(q.qpn, why);
}

// ---- DirectIn ----------------------------------------------------------------------------------

DirectIn::DirectIn(Device& dev, UniqueFd fd)
    : DirectConn(dev, std::move(fd), false),
      resp_(*this, transport::ResponderLimits{65536, 16384, 16ull << 20, 65536, 64ull << 20}) {
  peer_ipv4_ = peer_ipv4();
}

int DirectIn::attach(Qp& qp, uint32_t src_ipv4, uint32_t src_qpn) {
  std::lock_guard lock(mu_);
  return attach_locked(qp, src_ipv4, src_qpn);
}

int DirectIn::attach_locked(Qp& qp, uint32_t src_ipv4, uint32_t src_qpn) {
  if (!live_) return ENOTCONN;
  if (!resp_.connect(link_, 0, src_ipv4, src_qpn, qp.qpn(), qp.type(), dev_.info().client_id))
    return ENOMEM;
  qps_[qp.qpn()] = &qp;
  src_of_[src_qpn] = qp.qpn();
  qp.joined_direct_in(std::static_pointer_cast<DirectIn>(shared_from_this()));
  return 0;
}

void DirectIn::detach(Qp& qp) {
  std::lock_guard lock(mu_);
  if (!qps_.erase(qp.qpn())) return;
  auto& conns = resp_.conns();
  for (auto it = conns.begin(); it != conns.end();) {
    if (it->second->dst_qpn != qp.qpn()) {
      ++it;
      continue;
    }
    src_of_.erase(it->second->src_qpn);
    resp_.release_held(*it->second, &link_);
    it = conns.erase(it);
  }
  if (live_) {
    wire::Close c{qp.qpn(), 0};
    link_.send(wire::Type::kClose, &c, sizeof(c));
    if (!link_.flush(now_ns())) finish("send failed");
  }
}

void DirectIn::run(int64_t now) {
  resp_.retry_held(now, [this](uint32_t) { return &link_; });
}

void DirectIn::ended(const char* /*why*/) {
  // The source's process died (its end closed without a word for these QPs): the QPs that
  // agreed to its QPs lost their peers, as on one host.
  for (const auto& [key, c] : resp_.conns())
    if (names_peer(c->dst_qpn, c->src_ipv4, c->src_qpn))
      dev_.queue_fatal(c->dst_qpn, proto::FatalReason::kPeerGone);
  resp_.forget_link(link_);
  src_of_.clear();
}

int64_t DirectIn::next_deadline(int64_t now) const {
  return resp_.held_count() ? now + 1'000'000 : -1;
}

bool DirectIn::on_frame(transport::Link& link, wire::Type type, const uint8_t* body,
                        uint32_t payload, transport::PayloadDest& dest, const char** why) {
  switch (type) {
    case wire::Type::kRequest: {
      const auto r = wire::read<wire::Request>(body);
      if (r.qp_type == IBV_QPT_UD) {
        *why = "a datagram on a direct connection";
        return false;
      }
      // A request of a QP that never joined (or left) is answered REM_INV_REQ_ERR.
      resp_.on_request(link, r, payload, dest, now_);
      return true;
    }
    case wire::Type::kDirectAdd:
      add(wire::read<wire::DirectAdd>(body));
      return true;
    case wire::Type::kClose: {
      // A source QP went away on purpose: its connection ends without failing ours.
      const uint32_t src = wire::read<wire::Close>(body).qpn;
      if (transport::InConn* c = resp_.find(link_.id(), src)) {
        resp_.release_held(*c, &link_);
        resp_.conns().erase(transport::conn_key(link_.id(), src));
      }
      src_of_.erase(src);
      return true;
    }
    default:
      break;
  }
  if (common_frame(type, body, now_)) return true;
  *why = "a frame a direct connection's responder does not take";
  return false;
}

bool DirectIn::add(const wire::DirectAdd& a) {
  // The destination's vrdmad kept the ticket for exactly this pair, from this connection's
  // source address, to a QP of this process: it says so by taking it.
  proto::DirectTakeReq req{};
  memcpy(req.ticket, a.ticket, sizeof(req.ticket));
  req.peer_ipv4 = peer_ipv4_;
  req.src_qpn = a.src_qpn;
  req.dst_qpn = a.dst_qpn;
  req.qp_type = a.qp_type;
  if (dev_.control().call(proto::Op::kDirectTake, req) != 0) return false;
  Qp* qp = dev_.pin_qp(a.dst_qpn);
  if (!qp) return false;
  const bool ok = attach_locked(*qp, peer_ipv4_, a.src_qpn) == 0;
  dev_.unpin_qp(qp);
  return ok;
}

bool DirectIn::names_peer(uint32_t qpn, uint32_t ipv4, uint32_t peer_qpn) {
  auto it = qps_.find(qpn);
  return it != qps_.end() && it->second->names_peer(ipv4, peer_qpn);
}

bool DirectIn::target(uint32_t qpn, shm::PeerQp& out) {
  auto it = qps_.find(qpn);
  if (it == qps_.end()) return false;
  return shm::attach_peer_qp(self_, it->second->object_fd_id(), 0, out) == 0 && out.qpn == qpn;
}

}  // namespace vrdma
