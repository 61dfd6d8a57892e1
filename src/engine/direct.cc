#include "engine/direct.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include "engine/device.h"
#include "common/clock.h"
#include "engine/qp.h"
#include "shm/work_request.h"

namespace vrdma {

namespace {

// One QP's work on a connection: a ring of frames as deep as a send queue takes, and a small
// receive buffer (large payloads are read straight into their destination).
constexpr transport::LinkSizes kSizes{1024, 0, 64 * 1024};
// Bytes of frames one drive reads through the buffer: at most 64 KiB / 40 bytes (the smallest
// frame) = 1 639 replies, for which the ring must have room before it reads.
constexpr size_t kReceiveBudget = 64 * 1024;
constexpr uint32_t kRoomToReceive = 1024 - 320;
static_assert(kReceiveBudget / (sizeof(wire::Header) + sizeof(wire::Response)) <= 1640);
constexpr uint32_t kPumpBatch = 256;  // requests taken from the send queue per drive
// Payload bytes one drive reads straight into memory: then the next connection has its turn
// (the QPs of a program progress together).
constexpr size_t kDirectReadBudget = 16 * 1024;
constexpr int64_t kTimerNs = 10'000'000;  // how often outstanding work is looked at

}  // namespace

DirectConn::DirectConn(Device& dev, UniqueFd fd, bool outbound, uint32_t qpn,
                       const transport::LinkSizes& sizes)
    : dev_(dev), link_(1, std::move(fd), outbound, sizes), self_(dev.self_peer()), qpn_(qpn) {
  // vrdmad handed the connection over connected, its handshake done: frames flow at once.
  link_.connected();
  int one = 1;
  ::setsockopt(link_.fd(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  link_.last_rx_ns = now_ns();
  link_.last_outq_ns = link_.last_rx_ns;
}

DirectConn::~DirectConn() = default;

bool DirectConn::drive(int64_t now, bool wait) {
  if (over()) return false;
  std::unique_lock lock(mu_, std::defer_lock);
  if (wait) {
    lock.lock();
  } else if (!lock.try_lock()) {
    return true;  // another thread drives it now
  }
  if (over()) return false;
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
  if (!run(now)) finish("failed");
  if (live_ && link_.tx_pending() && !link_.flush(now)) finish("send failed");
  if (self_->has_retired() && !link_.tx_pending() && !placing()) self_->reclaim();
  wants_room_.store(live_ && link_.tx_pending(), std::memory_order_relaxed);
  deadline_.store(next_deadline(now), std::memory_order_relaxed);
  return live_;
}

void DirectConn::finish(const char* why) {
  if (!live_) return;
  live_ = false;
  ::shutdown(link_.fd(), SHUT_RDWR);  // the other end learns it at once
  ended(why, peer_closed_);
}

void DirectConn::close() {
  std::lock_guard lock(mu_);
  if (over()) return;
  if (live_) {
    wire::Close c{qpn_, 0};
    if (link_.send(wire::Type::kClose, &c, sizeof(c))) link_.flush(now_ns());
    live_ = false;
  }
  over_.store(true, std::memory_order_release);
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
    case wire::Type::kClose:
      peer_closed_ = true;
      return true;
    default:
      return false;
  }
}

// ---- DirectOut ---------------------------------------------------------------------------------

DirectOut::DirectOut(Device& dev, UniqueFd fd, uint32_t qpn)
    : DirectConn(dev, std::move(fd), true, qpn, kSizes), req_(*this) {}

std::shared_ptr<DirectOut> DirectOut::make(Device& dev, UniqueFd fd, uint32_t qpn, uint32_t type,
                                           uint32_t qp_offset, uint32_t dst_qpn, int* err) {
  std::shared_ptr<DirectOut> c(new DirectOut(dev, std::move(fd), qpn));
  transport::SendQp& q = c->q_;
  q.qpn = qpn;
  q.owner = dev.info().client_id;
  q.type = type;
  q.ipv4 = dev.info().ipv4;
  q.dst_qpn = dst_qpn;
  q.link_id = c->link_.id();
  q.peer = c->self_;
  if ((*err = transport::Requester::attach(q, qp_offset))) return nullptr;
  return c;
}

bool DirectOut::run(int64_t now) {
  req_.pump(q_, now, kPumpBatch);
  if (live_ && !q_.failed && q_.done != q_.sent &&
      transport::Requester::check_silence(q_, link_, now)) {
    req_.abort(q_, IBV_WC_RETRY_EXC_ERR, true);
    return false;
  }
  return true;
}

void DirectOut::ended(const char* /*why*/, bool peer_closed) {
  link_usable_ = false;  // what is posted from now on finds nobody: RETRY_EXC_ERR, in order
  if (q_.failed) return;
  const bool outstanding = q_.done < q_.sent;
  // The destination QP went away on purpose (it said Close): only what it never answered
  // fails. The process died with it: the QP fails as one whose peer is gone.
  if (peer_closed && !outstanding) return;
  req_.abort(q_, outstanding ? IBV_WC_RETRY_EXC_ERR : IBV_WC_WR_FLUSH_ERR, true,
             outstanding ? proto::FatalReason::kRouted : proto::FatalReason::kPeerGone);
}

int64_t DirectOut::next_deadline(int64_t now) const {
  return live_ && q_.done != q_.sent ? now + kTimerNs : -1;
}

bool DirectOut::on_frame(transport::Link& link, wire::Type type, const uint8_t* body,
                         uint32_t payload, transport::PayloadDest& dest, const char** why) {
  if (type == wire::Type::kResponse) {
    req_.on_response(link, wire::read<wire::Response>(body), payload, dest, now_);
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

DirectIn::DirectIn(Device& dev, UniqueFd fd, Qp& qp)
    : DirectConn(dev, std::move(fd), false, qp.qpn(), kSizes),
      qp_(qp),
      resp_(*this, transport::ResponderLimits{1, 16384, 16ull << 20, 16384, 16ull << 20}) {}

std::shared_ptr<DirectIn> DirectIn::make(Device& dev, UniqueFd fd, Qp& qp, uint32_t src_ipv4,
                                         uint32_t src_qpn, int* err) {
  std::shared_ptr<DirectIn> c(new DirectIn(dev, std::move(fd), qp));
  c->src_ipv4_ = src_ipv4;
  c->src_qpn_ = src_qpn;
  if (!c->resp_.connect(c->link_, 0, src_ipv4, src_qpn, qp.qpn(), qp.type(),
                        dev.info().client_id)) {
    *err = ENOMEM;
    return nullptr;
  }
  *err = 0;
  return c;
}

bool DirectIn::run(int64_t now) {
  resp_.retry_held(now, [this](uint32_t) { return &link_; });
  return true;
}

void DirectIn::ended(const char* /*why*/, bool peer_closed) {
  // The source's process died (its end closed without a word): the QP that agreed to it lost
  // its peer, as on one host.
  if (!peer_closed && names_peer(qpn_, src_ipv4_, src_qpn_))
    dev_.queue_fatal(qpn_, proto::FatalReason::kPeerGone);
  resp_.forget_link(link_);
}

int64_t DirectIn::next_deadline(int64_t now) const {
  return live_ && resp_.held_count() ? now + 1'000'000 : -1;
}

bool DirectIn::on_frame(transport::Link& link, wire::Type type, const uint8_t* body,
                        uint32_t payload, transport::PayloadDest& dest, const char** why) {
  if (type == wire::Type::kRequest) {
    const auto r = wire::read<wire::Request>(body);
    // The connection is this pair's only (its ticket said so).
    if (r.qp_type == IBV_QPT_UD || r.src_qpn != src_qpn_ || r.dst_qpn != qpn_) {
      *why = "a request of another connection";
      return false;
    }
    resp_.on_request(link, r, payload, dest, now_);
    return true;
  }
  if (common_frame(type, body, now_)) return true;
  *why = "a frame a direct connection's responder does not take";
  return false;
}

bool DirectIn::names_peer(uint32_t qpn, uint32_t ipv4, uint32_t peer_qpn) {
  return qpn == qpn_ && qp_.names_peer(ipv4, peer_qpn);
}

bool DirectIn::target(uint32_t qpn, shm::PeerQp& out) {
  if (qpn != qpn_) return false;
  return shm::attach_peer_qp(self_, qp_.object_fd_id(), 0, out) == 0 && out.qpn == qpn;
}

}  // namespace vrdma
