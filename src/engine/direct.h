// The direct path: a QP whose destination is a QP of another host's container (of its tenant)
// exchanges its work with it over a TCP connection between the two containers' own addresses,
// with no daemon in between. A process has one such connection to each process whose QPs its
// QPs send to, and carries the work of all those QPs on it, taking each in turn (as a device
// serves its QPs): a program's QPs progress together, and small messages of many QPs leave in
// one write. The other process's QPs that send to this one's use a connection of their own,
// made from their side: the pod network's rules apply to each direction.
//
// vrdmad sets each connection up: it opens it from this container, the destination's vrdmad
// checks the ticket it presents and hands the other end to the destination's process; each
// further QP pair joins the connection with a ticket of its own (wire::DirectAdd), which the
// destination's vrdmad takes before the destination's library accepts it. From then on the
// two libraries speak the frames of transport/wire.h on it. One class, DirectLink, is either
// end: at the opening end a transport::Requester carries this process's QPs' requests from
// their SendQueues (route.cc) and completes them as responses come back; at the other a
// transport::Responder checks and executes them (the same code vrdmad's router uses), placing
// the data straight from the socket into this process's memory.
//
// Whoever is here drives a connection: the thread that posts, a thread polling a CQ the
// connection completes into, or the progress thread when the socket has bytes or a timer is due
// (so one-sided operations complete while the target program never calls the library). While
// a program polls, the progress thread stands down: it stops watching the socket for bytes and
// only looks every kPolledNs, so that it takes no core from the poller; a poll that finds
// requests to answer leaves the responses for the next write (its next poll, after the program
// has posted what the requests made it post, or that look at the latest). A stand-down that
// ends with requests waiting (the program polled its CQ, then waited on memory for the other
// side's WRITE, as ib_write_lat does) keeps the thread awake for the connection for a second.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>

#include "common/unique_fd.h"
#include "shm/peer.h"
#include "transport/link.h"
#include "transport/requester.h"
#include "transport/responder.h"

namespace vrdma {

class Device;
class Qp;

class DirectLink final : public transport::LinkHandler,
                         private transport::RequesterEnv,
                         private transport::ResponderEnv,
                         public std::enable_shared_from_this<DirectLink> {
 public:
  // `outbound`: this side opened it, to the process `key` (as its host numbers it; 0 for the
  // other end).
  DirectLink(Device& dev, UniqueFd fd, uint64_t key, bool outbound);
  ~DirectLink() override;
  DirectLink(const DirectLink&) = delete;
  DirectLink& operator=(const DirectLink&) = delete;

  // Who drives: the posting thread, or the progress thread ending a stand-down (waits for the
  // lock, writes at once); a poller (only tries the lock; may leave responses for the next
  // write while the progress thread stands down); the progress thread (only tries the lock).
  enum class Driver { kPost, kPoll, kProgress };
  // Reads what arrived, runs what is due, writes what waits. False once the connection
  // carries nothing more (failed, or the other side closed it): the progress thread lets it go
  // (its QPs keep it while they are attached).
  bool drive(int64_t now, Driver who, bool read = true);
  // A poller's turn (Cq::poll): `readable` says whether the socket has bytes. A connection
  // with nothing to read and nothing to write is only marked polled (no system call).
  void poll(int64_t now, bool readable) {
    last_poll_ns_.store(now, std::memory_order_relaxed);
    if (readable || owed_.load(std::memory_order_relaxed)) drive(now, Driver::kPoll, readable);
  }
  // Its socket could not join a CQ's readiness set: polls read it each time.
  void read_every_poll() { read_every_poll_.store(true, std::memory_order_relaxed); }
  bool reads_every_poll() const { return read_every_poll_.load(std::memory_order_relaxed); }
  // How long a poll keeps the progress thread standing down (ns).
  static constexpr int64_t kPolledNs = 1'000'000;

  uint64_t key() const { return key_; }
  // Whether its socket still carries frames (a connection that failed stays its QPs': its
  // requester completes what is posted to them in error).
  bool live() const { return live_.load(std::memory_order_acquire); }
  int fd() const { return link_.fd(); }
  uint32_t peer_ipv4() const { return peer_ipv4_; }  // the other end's address
  // For the progress thread: whether the socket's room is awaited (EPOLLOUT), the next time
  // the connection needs the clock although nothing arrives (ns; -1: none), and when a poller
  // last drove it.
  bool wants_room() const { return wants_room_.load(std::memory_order_relaxed); }
  int64_t deadline() const { return deadline_.load(std::memory_order_relaxed); }
  int64_t last_poll() const { return last_poll_ns_.load(std::memory_order_relaxed); }
  // Bytes received so far (frames and payload).
  uint64_t received() const { return received_.load(std::memory_order_relaxed); }
  // One-sided requests (WRITE, READ, atomics) received so far: work no poll of this program
  // waits for.
  uint64_t one_sided() const { return one_sided_.load(std::memory_order_relaxed); }
  // The progress thread stands down (looks at the connection every kPolledNs at the latest).
  void stand_down(bool yes) { stood_down_.store(yes, std::memory_order_relaxed); }

  // ---- this process's QPs send (direct_send.cc) ----
  // QP `qpn` (its shared state at `qp_offset` of the arena: its SendQueue and send CQ) sends to
  // `dst_qpn` on the connection from now on; `ticket`: the one to present for the pair (none:
  // the pair for which vrdmad opened the connection). 0 or an errno (ENOTCONN: the connection
  // is over; make another).
  int attach_sender(uint32_t qpn, uint32_t type, uint32_t qp_offset, uint32_t dst_qpn,
                    const uint8_t* ticket);
  // QP `qpn` is going (destroyed, or reset): the other end is told this is no failure (Close),
  // and its work is no longer carried.
  void detach_sender(uint32_t qpn);
  // Sends what a QP posted (the posting thread). It reads nothing: what arrives is for the
  // pollers and the progress thread.
  void kick(int64_t now) { drive(now, Driver::kPost, false); }
  // Writes the responses polls left waiting (after a post: they follow what it sent). Only
  // tries the lock.
  void flush_deferred(int64_t now);
  bool has_deferred() const { return has_deferred_.load(std::memory_order_relaxed); }
  bool has_held() const { return has_held_.load(std::memory_order_relaxed); }
  // Requests of this process's QPs sent on it and not answered yet (as of the last pass).
  uint64_t in_flight() const { return in_flight_.load(std::memory_order_relaxed); }
  // How long polls leave responses waiting for the program's next post (ns): in a ping-pong
  // the answer to a request then follows the program's reply instead of delaying it, and a
  // stream of requests is answered a few at a time.
  static constexpr int64_t kDeferNs = 25'000;
  // Posts that come less than kStreamNs after the previous post's return stream; their
  // requests wait (see pass_locked) until kCorkBytes are queued.
  static constexpr int64_t kStreamNs = 5'000;
  static constexpr uint64_t kCorkBytes = 32 * 1024;
  // Writes what waits (the program arms a CQ: it will sleep, not poll).
  void flush_held(int64_t now);

  // ---- QPs of the other process send to this process's (direct_receive.cc) ----
  // QP `src_qpn` at `src_ipv4` sends to `qp` on the connection (vrdmad took its ticket).
  int attach_receiver(Qp& qp, uint32_t src_ipv4, uint32_t src_qpn);
  // `qp` is going: what is sent to it is no longer taken, and the senders are told (Close).
  void detach_receiver(Qp& qp);

 private:
  // transport::LinkHandler.
  bool on_frame(transport::Link& link, wire::Type type, const uint8_t* body, uint32_t payload,
                transport::PayloadDest& dest, const char** why) override;
  void on_payload_data(transport::Link& link, const uint8_t* data, size_t len) override {
    resp_.on_payload_data(link, data, len);
  }
  void on_payload(transport::Link& link) override {
    if (!resp_.on_payload(link)) req_.on_payload(link, now_);
  }
  void pass_locked(int64_t now, Driver who, bool read);  // under mu_: reads, runs, writes
  void finish(const char* why);               // under mu_: the end of the connection
  void write_held(int64_t now);               // under mu_: what waits leaves

  // Sending side (direct_send.cc), under mu_: the senders' requests, a few of each in turn
  // (how many went), the senders' timers, a receiver of the other side that went away, the
  // senders' end.
  uint32_t pump(int64_t now);
  bool check_senders(int64_t now);
  void receiver_closed(uint32_t dst_qpn);
  void senders_ended();
  // transport::RequesterEnv.
  transport::SendQp* find(uint32_t qpn) override;
  transport::Link* link_for(transport::SendQp&, const transport::Wqe&) override {
    return live_ ? &link_ : nullptr;
  }
  void failed(transport::SendQp& q, proto::FatalReason why) override;

  // Receiving side (direct_receive.cc), under mu_.
  bool add(const wire::DirectAdd& a);  // another pair joins: vrdmad takes its ticket
  int attach_receiver_locked(Qp& qp, uint32_t src_ipv4, uint32_t src_qpn);
  void sender_closed(uint32_t src_qpn);
  void receivers_ended();
  // transport::ResponderEnv.
  bool names_peer(uint32_t qpn, uint32_t ipv4, uint32_t peer_qpn) override;
  bool target(uint32_t qpn, shm::PeerQp& out) override;
  const char* who() const override { return "direct: peer"; }

  Device& dev_;
  const uint64_t key_;
  transport::Link link_;
  uint32_t peer_ipv4_ = 0;           // the other end's address (its socket's peer)
  std::shared_ptr<shm::Peer> self_;  // this process, as its direct connections reach it
  int64_t now_ = 0;
  std::mutex mu_;
  std::atomic<bool> live_{true};  // the connection carries frames
  std::atomic<bool> wants_room_{false};
  std::atomic<int64_t> deadline_{-1};
  std::atomic<int64_t> last_poll_ns_{0};
  std::atomic<uint64_t> received_{0};
  std::atomic<uint64_t> one_sided_{0};
  std::atomic<bool> stood_down_{false};
  std::atomic<bool> again_{false};  // the progress thread was woken while another drove it
  // A pass is owed without new bytes: frames wait to be written (or deferred), bytes wait in
  // the socket beyond a pass's budget, or requests are held.
  std::atomic<bool> owed_{false};
  std::atomic<bool> read_every_poll_{false};
  bool deferred_ = false;  // a poll left what it queued for the next write
  int64_t deferred_since_ = 0;
  bool corked_ = false;            // what waits includes requests (they wait for answers)
  int64_t last_post_end_ns_ = 0;   // when the last post's pass ended
  uint64_t bytes_in_seen_ = 0;     // link_.bytes_in at the last pass
  std::atomic<bool> has_deferred_{false};  // responses wait (deferred_ && !corked_)
  std::atomic<bool> has_held_{false};      // anything waits (deferred_)
  std::atomic<uint64_t> in_flight_{0};

  // Sending side.
  std::map<uint32_t, transport::SendQp> senders_;  // by QPN (node-stable)
  std::set<uint32_t> closed_;  // the other side's QPs that said Close as receivers
  transport::Requester req_;
  uint32_t turn_ = 0;  // the QPN whose turn comes first at the next pass

  // Receiving side.
  transport::Responder resp_;
  std::map<uint32_t, Qp*> receivers_;  // this process's QPs it serves, valid until detached
};

}  // namespace vrdma
