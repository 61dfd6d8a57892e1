// The direct path: a QP whose destination is a QP of another host's container (of its tenant)
// exchanges its work with it over a TCP connection between the two containers' own addresses,
// with no daemon in between. A process has one such connection to each process whose QPs its
// QPs send to, and carries the work of all those QPs on it, taking each in turn (as a device
// serves its QPs): a program's QPs progress together, and small messages of many QPs leave in
// one write.
//
// vrdmad sets each connection up: it opens it from this container, the destination's vrdmad
// checks the ticket it presents and hands the other end to the destination's process; each
// further QP pair joins the connection with a ticket of its own (wire::DirectAdd), which the
// destination's vrdmad takes before the destination's library accepts it. From then on the
// two libraries speak the frames of transport/wire.h on it:
//
//   DirectOut  this process's QPs send: their requests go from their SendQueues (route.cc)
//              through a transport::Requester to the connection, their completions come back.
//   DirectIn   QPs of the other process send to this process's QPs: a transport::Responder
//              checks and executes their requests (the same code vrdmad's router uses), placing
//              the data straight from the socket into this process's memory.
//
// Whoever is here drives a connection: the thread that posts (DirectOut), a thread polling a CQ
// the connection completes into, or the progress thread when the socket has bytes or a timer
// is due (so one-sided operations complete while the target program never calls the library).
// Each connection has its lock; pollers and the progress thread only try it.
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

class DirectConn : public transport::LinkHandler,
                   public std::enable_shared_from_this<DirectConn> {
 public:
  ~DirectConn() override;
  DirectConn(const DirectConn&) = delete;
  DirectConn& operator=(const DirectConn&) = delete;

  // Reads what arrived, runs what is due, writes what waits; `wait`: take the lock even if
  // another thread holds it (the posting thread), else leave it to that thread. False once the
  // connection carries nothing more (failed, or its last QP left): the progress thread lets it
  // go (its QPs keep it while they are attached).
  bool drive(int64_t now, bool wait);
  // Whether its socket still carries frames (a connection that failed stays its QPs': its
  // requester completes what is posted to them in error).
  bool live() const { return live_.load(std::memory_order_acquire); }
  int fd() const { return link_.fd(); }
  uint32_t peer_ipv4() const;  // the other end's address (its socket's peer; 0: unknown)
  // For the progress thread: whether the socket's room is awaited (EPOLLOUT), and the next
  // time the connection needs the clock although nothing arrives (ns; -1: none).
  bool wants_room() const { return wants_room_.load(std::memory_order_relaxed); }
  int64_t deadline() const { return deadline_.load(std::memory_order_relaxed); }

 protected:
  DirectConn(Device& dev, UniqueFd fd, bool outbound);
  // The role's work after reading (requests sent, held requests retried, timers). Under mu_.
  virtual void run(int64_t now) = 0;
  // The connection ended (*why); the QPs that used it hear so. Under mu_.
  virtual void ended(const char* why) = 0;
  virtual int64_t next_deadline(int64_t now) const = 0;
  // Whether a frame's payload is being placed into this process's memory now (what reclaim
  // must not unmap).
  virtual bool placing() const = 0;
  // Pings and pongs; false for any other frame.
  bool common_frame(wire::Type type, const uint8_t* body, int64_t now);
  void finish(const char* why);  // under mu_: the end of the connection
  // Its last QP left: the socket closes once what is queued has been written (under mu_).
  void retire();

  Device& dev_;
  transport::Link link_;
  std::shared_ptr<shm::Peer> self_;  // this process, as its direct connections reach it
  int64_t now_ = 0;
  std::mutex mu_;
  std::atomic<bool> live_{true};  // the connection carries frames

 private:
  std::atomic<bool> wants_room_{false};
  std::atomic<int64_t> deadline_{-1};
};

// This process's QPs send to QPs of one other process (`key`) on the connection.
class DirectOut final : public DirectConn, private transport::RequesterEnv {
 public:
  DirectOut(Device& dev, UniqueFd fd, uint64_t key);
  uint64_t key() const { return key_; }
  // QP `qpn` (its shared state at `qp_offset` of the arena: its SendQueue and send CQ) sends to
  // `dst_qpn` on the connection from now on; `ticket`: the one to present for the pair (not the
  // connection's first, whose ticket vrdmad presented). 0 or an errno (ENOTCONN: the connection
  // is over; make another).
  int attach(uint32_t qpn, uint32_t type, uint32_t qp_offset, uint32_t dst_qpn,
             const uint8_t* ticket);
  // QP `qpn` is going (destroyed, or reset): the other end is told this is no failure (Close),
  // and its work is no longer carried. The connection closes after its last QP.
  void detach(uint32_t qpn);
  // Sends what QP `qpn` posted (the posting thread).
  void kick(int64_t now) { drive(now, true); }

 private:
  void run(int64_t now) override;
  void ended(const char* why) override;
  int64_t next_deadline(int64_t now) const override;
  bool placing() const override { return req_.placing(); }
  bool on_frame(transport::Link& link, wire::Type type, const uint8_t* body, uint32_t payload,
                transport::PayloadDest& dest, const char** why) override;
  void on_payload_data(transport::Link&, const uint8_t*, size_t) override {}
  void on_payload(transport::Link& link) override { req_.on_payload(link, now_); }
  // RequesterEnv.
  transport::SendQp* find(uint32_t qpn) override;
  transport::Link* link_for(transport::SendQp&, const transport::Wqe&) override {
    return live_ ? &link_ : nullptr;
  }
  void failed(transport::SendQp& q, proto::FatalReason why) override;

  uint64_t key_;
  std::map<uint32_t, transport::SendQp> qps_;  // by QPN: the QPs it carries (node-stable)
  std::set<uint32_t> closed_;  // destination QPs that said Close
  transport::Requester req_;
  uint32_t turn_ = 0;  // the QPN whose turn comes first at the next pass
};

// QPs of one other process send to this process's QPs on the connection.
class DirectIn final : public DirectConn, private transport::ResponderEnv {
 public:
  DirectIn(Device& dev, UniqueFd fd);
  // QP `src_qpn` at `src_ipv4` sends to `qp` on the connection (vrdmad took its ticket).
  int attach(Qp& qp, uint32_t src_ipv4, uint32_t src_qpn);
  // `qp` is going: what was sent to it is no longer taken.
  void detach(Qp& qp);

 private:
  void run(int64_t now) override;
  void ended(const char* why) override;
  int64_t next_deadline(int64_t now) const override;
  bool placing() const override { return resp_.placing(); }
  bool on_frame(transport::Link& link, wire::Type type, const uint8_t* body, uint32_t payload,
                transport::PayloadDest& dest, const char** why) override;
  void on_payload_data(transport::Link& link, const uint8_t* data, size_t len) override {
    resp_.on_payload_data(link, data, len);
  }
  void on_payload(transport::Link& link) override { resp_.on_payload(link); }
  // Another QP joins (wire::DirectAdd): vrdmad takes its ticket, then it is attached.
  bool add(const wire::DirectAdd& a);
  int attach_locked(Qp& qp, uint32_t src_ipv4, uint32_t src_qpn);
  // ResponderEnv.
  bool names_peer(uint32_t qpn, uint32_t ipv4, uint32_t peer_qpn) override;
  bool target(uint32_t qpn, shm::PeerQp& out) override;
  const char* who() const override { return "direct: peer"; }

  transport::Responder resp_;
  uint32_t peer_ipv4_ = 0;           // the connection's source address (its socket's peer)
  std::map<uint32_t, Qp*> qps_;      // this process's QPs it serves, valid until detached
  std::map<uint32_t, uint32_t> src_of_;  // source QPN -> the QP of ours it sends to
};

}  // namespace vrdma
