#include "engine/direct.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>
#include <sys/socket.h>

#include "common/address.h"
#include "common/log.h"
#include "engine/device.h"

namespace vrdma {

namespace {

// A connection's frames: a ring as deep as a few send queues, and a small receive buffer
// (large payloads are read straight into their destination).
constexpr transport::LinkSizes kSizes{2048, 0, 64 * 1024};
// Bytes of frames one drive reads through the buffer: at most 64 KiB / 40 bytes (the smallest
// frame) = 1 639 frames, each answered by at most one, for which the ring must have room before
// it reads.
constexpr size_t kReceiveBudget = 64 * 1024;
constexpr uint32_t kRoomToReceive = 1700;
static_assert(kReceiveBudget / (sizeof(wire::Header) + sizeof(wire::Response)) < kRoomToReceive);
// Payload bytes one drive reads straight into memory: then the progress thread serves the next
// connection.
constexpr size_t kDirectReadBudget = 256 * 1024;
constexpr int64_t kTimerNs = 10'000'000;     // how often outstanding work is looked at
constexpr int64_t kHeldRetryNs = 1'000'000;  // how often held requests are tried again

uint32_t socket_peer(int fd) {
  sockaddr_in peer{};
  socklen_t len = sizeof(peer);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &len) < 0 ||
      peer.sin_family != AF_INET)
    return 0;
  return peer.sin_addr.s_addr;
}

}  // namespace

DirectLink::DirectLink(Device& dev, UniqueFd fd, uint64_t key, bool outbound)
    : dev_(dev),
      key_(key),
      link_(1, std::move(fd), outbound, kSizes),
      self_(dev.self_peer()),
      req_(*this),
      resp_(*this, transport::ResponderLimits{65536, 16384, 16ull << 20, 65536, 64ull << 20}) {
  // vrdmad handed the connection over connected, its handshake done: frames flow at once.
  link_.connected();
  int one = 1;
  ::setsockopt(link_.fd(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  link_.last_rx_ns = now_ns();
  link_.last_outq_ns = link_.last_rx_ns;
  peer_ipv4_ = socket_peer(link_.fd());
}

DirectLink::~DirectLink() = default;

bool DirectLink::drive(int64_t now, Driver who, bool read) {
  if (who == Driver::kPoll) last_poll_ns_.store(now, std::memory_order_relaxed);
  std::unique_lock lock(mu_, std::defer_lock);
  if (who == Driver::kPost) {
    lock.lock();
  } else {
    // The progress thread's socket is edge-triggered: an arrival it was woken for and that
    // finds another thread driving is that thread's to read (it looks at `again_` once it has
    // let go), never dropped.
    if (who == Driver::kProgress) again_.store(true, std::memory_order_seq_cst);
    if (!lock.try_lock()) return true;
  }
  // Bounded: each pass reads what arrived meanwhile; a last arrival still unread after them
  // is the progress thread's at once (deadline now).
  for (int pass = 0;; ++pass) {
    // Whichever pass takes the flag reads, whatever its driver meant to do (a post reads
    // nothing of its own accord).
    if (again_.exchange(false, std::memory_order_acq_rel)) read = true;
    pass_locked(now, who, read);
    read = true;
    lock.unlock();
    if (!again_.load(std::memory_order_seq_cst)) break;
    if (pass == 3) {
      deadline_.store(now, std::memory_order_relaxed);
      dev_.wake();
      break;
    }
    if (!lock.try_lock()) break;  // the thread that has it looks at again_ after it
    now = now_ns();
  }
  return live_;
}

void DirectLink::pass_locked(int64_t now, Driver who, bool read) {
  now_ = now;
  bool rx_owed = false;
  if (live_ && link_.has_room(kRoomToReceive)) {
    const char* why = nullptr;
    const uint64_t before = link_.bytes_in;
    // Nobody tells this thread whether bytes came: a read finds out (a poller was told none
    // came; a budget spent earlier left rx_ready set).
    if (read) link_.rx_ready = true;
    if (!link_.receive(*this, kReceiveBudget, &why, kDirectReadBudget)) {
      finish(why ? why : "receive failed");
    } else if (link_.bytes_in != before) {
      link_.last_rx_ns = now;
      received_.store(link_.bytes_in, std::memory_order_relaxed);
    }
    // A budget spent with bytes still in the socket: no new edge says so.
    rx_owed = live_ && link_.rx_ready;
  } else if (live_) {
    rx_owed = true;  // the ring's room comes back as its frames are written
  }
  resp_.retry_held(now, [this](uint32_t) { return &link_; });
  const bool answers_came = link_.bytes_in != bytes_in_seen_;
  bytes_in_seen_ = link_.bytes_in;
  // Requests unanswered before this pass (as the last pass counted them).
  const bool in_flight = in_flight_.load(std::memory_order_relaxed) != 0;
  // Once the connection is over, a pass still flushes what was posted meanwhile (a post that
  // raced the end: its QP failed after the poster looked).
  const uint32_t sent = pump(now);
  if (live_ && !check_senders(now)) {
    LOG_WARN("direct connection to %s: no answer within the QPs' timeout (%llu frame bytes "
             "unwritten%s, %llu received)",
             ipv4_text(peer_ipv4_).c_str(), static_cast<unsigned long long>(link_.unwritten_bytes()),
             deferred_ ? ", held" : "", static_cast<unsigned long long>(link_.bytes_in));
    finish("no answer within the QPs' timeout");
  }
  if (live_ && link_.tx_pending()) {
    // While the program polls (the progress thread stands down), frames may wait a little to
    // leave together, at most kDeferNs: responses a poll made wait for the program's next post
    // (and follow it) or a later poll; requests a program streams (posts coming one right
    // after another while earlier ones are unanswered) wait for their answers, a poll that
    // finds some, or kCorkBytes. A standing-down progress thread writes what nobody comes for.
    bool hold = stood_down_.load(std::memory_order_relaxed) &&
                (!deferred_ || now - deferred_since_ < kDeferNs);
    if (who == Driver::kPost) {
      hold = hold && sent && in_flight && now - last_post_end_ns_ < kStreamNs &&
             link_.unwritten_bytes() < kCorkBytes;
      if (hold) corked_ = true;
    } else if (who == Driver::kPoll) {
      hold = hold && !sent && !(corked_ && answers_came);
    } else {
      hold = false;
    }
    if (hold) {
      if (!deferred_) deferred_since_ = now;
      deferred_ = true;
    } else {
      deferred_ = corked_ = false;
      if (!link_.flush(now)) finish("send failed");
    }
  }
  if (who == Driver::kPost) last_post_end_ns_ = now_ns();
  if (self_->has_retired() && !link_.tx_pending() && !req_.placing() && !resp_.placing())
    self_->reclaim();
  wants_room_.store(live_ && link_.tx_pending() && !deferred_, std::memory_order_relaxed);
  // (Requests held are not written after the program's next post: they wait for answers.)
  has_deferred_.store(live_ && deferred_ && !corked_, std::memory_order_relaxed);
  has_held_.store(live_ && deferred_, std::memory_order_relaxed);
  int64_t due = -1;
  uint64_t unanswered = 0;
  for (const auto& [qpn, q] : senders_) unanswered += q.sent - q.done;
  in_flight_.store(live_ ? unanswered : 0, std::memory_order_relaxed);
  if (live_) {
    if (unanswered) due = now + kTimerNs;
    if (resp_.held_count() && (due < 0 || now + kHeldRetryNs < due)) due = now + kHeldRetryNs;
    // What is left in the socket is read at once, unless the writes wait for the socket's
    // room (its EPOLLOUT edge comes first). No new edge will say so: a progress thread asleep
    // is woken for it.
    if (rx_owed && !wants_room_.load(std::memory_order_relaxed)) {
      due = now;
      if (who != Driver::kProgress) dev_.wake();
    }
    // Frames held for a poller are the progress thread's once they have waited kPolledNs,
    // whoever was to come for them.
    if (deferred_ && (due < 0 || deferred_since_ + kPolledNs < due)) due = deferred_since_ + kPolledNs;
  }
  deadline_.store(due, std::memory_order_relaxed);
  owed_.store(live_ && (rx_owed || link_.tx_pending() || resp_.held_count() != 0),
              std::memory_order_relaxed);
}

void DirectLink::flush_deferred(int64_t now) {
  if (!has_deferred_.load(std::memory_order_relaxed)) return;
  std::unique_lock lock(mu_, std::try_to_lock);
  if (!lock.owns_lock() || !deferred_ || corked_) return;  // whoever has it writes them
  write_held(now);
}

void DirectLink::flush_held(int64_t now) {
  if (!has_held_.load(std::memory_order_relaxed)) return;
  std::lock_guard lock(mu_);
  if (deferred_) write_held(now);
}

void DirectLink::write_held(int64_t now) {
  deferred_ = corked_ = false;
  has_deferred_.store(false, std::memory_order_relaxed);
  has_held_.store(false, std::memory_order_relaxed);
  if (live_ && !link_.flush(now)) finish("send failed");
  wants_room_.store(live_ && link_.tx_pending(), std::memory_order_relaxed);
}

void DirectLink::finish(const char* why) {
  if (!live_) return;
  LOG_INFO("direct connection %s %s ended: %s", link_.outbound() ? "to" : "from",
           ipv4_text(peer_ipv4_).c_str(), why);
  live_ = false;
  ::shutdown(link_.fd(), SHUT_RDWR);  // the other end learns it at once
  senders_ended();
  receivers_ended();
}

bool DirectLink::on_frame(transport::Link& link, wire::Type type, const uint8_t* body,
                          uint32_t payload, transport::PayloadDest& dest, const char** why) {
  switch (type) {
    case wire::Type::kRequest: {
      const auto r = wire::read<wire::Request>(body);
      if (r.qp_type == IBV_QPT_UD) {
        *why = "a datagram on a direct connection";
        return false;
      }
      if (r.opcode == IBV_WR_RDMA_WRITE || r.opcode == IBV_WR_RDMA_READ ||
          r.opcode == IBV_WR_ATOMIC_CMP_AND_SWP || r.opcode == IBV_WR_ATOMIC_FETCH_AND_ADD)
        one_sided_.fetch_add(1, std::memory_order_relaxed);
      // A request of a QP that never joined (or left) is answered REM_INV_REQ_ERR.
      resp_.on_request(link, r, payload, dest, now_);
      return true;
    }
    case wire::Type::kResponse:
      req_.on_response(link, wire::read<wire::Response>(body), payload, dest, now_);
      return true;
    case wire::Type::kDirectAdd:
      add(wire::read<wire::DirectAdd>(body));
      return true;
    case wire::Type::kClose: {
      const auto c = wire::read<wire::Close>(body);
      if (c.role == wire::kCloseSender)
        sender_closed(c.qpn);
      else
        receiver_closed(c.qpn);
      return true;
    }
    case wire::Type::kPing:
      link_.send(wire::Type::kPong, body, sizeof(wire::Ping));
      return true;
    case wire::Type::kPong: {
      // The token of our pings is the time they were sent (requester.h).
      const auto sent = static_cast<int64_t>(wire::read<wire::Ping>(body).token);
      if (sent > 0 && sent <= now_ && sent == link_.last_ping_ns) link_.rtt_ns = now_ - sent;
      return true;
    }
    default:
      *why = "a frame a direct connection does not carry";
      return false;
  }
}

}  // namespace vrdma
