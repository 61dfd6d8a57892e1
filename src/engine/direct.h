// The direct path: a QP whose destination is a QP of another host's container (of its tenant)
// exchanges its work with it on a TCP connection between the two containers' own addresses,
// with no daemon in between. vrdmad sets each connection up (it opens it from this container,
// the destination's vrdmad checks the ticket it presents and hands the other end to the
// destination's process) and hands it over; from then on the two libraries speak the frames of
// transport/wire.h on it:
//
//   DirectOut  this process's QP sends: its requests go from its SendQueue (route.cc) through a
//              transport::Requester to the connection, their completions come back on it.
//   DirectIn   a QP of the other host sends to this process's QP: a transport::Responder checks
//              and executes its requests against the QP (the same code vrdmad's router uses),
//              placing the data straight from the socket into this process's memory.
//
// Whoever is here drives a connection: the thread that posts (DirectOut), a thread polling a CQ
// the connection completes into, or the progress thread when the socket has bytes or a timer
// is due (so one-sided operations complete while the target program never calls the library).
// Each connection has its lock; pollers and the progress thread only try it.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>

#include "common/unique_fd.h"
#include "shm/peer.h"
#include "transport/link.h"
#include "transport/requester.h"
#include "transport/responder.h"

namespace vrdma {

class Device;
class Qp;

class DirectConn : public transport::LinkHandler {
 public:
  ~DirectConn() override;
  DirectConn(const DirectConn&) = delete;
  DirectConn& operator=(const DirectConn&) = delete;

  // Reads what arrived, runs what is due, writes what waits; `wait`: take the lock even if
  // another thread holds it (the posting thread), else leave it to that thread. False once the
  // connection is over (closed, or failed): its owners let it go.
  bool drive(int64_t now, bool wait);
  // The QP is going (destroyed, or reset): a Close frame tells the other end this is no
  // failure, and nothing more happens on the connection. Waits for a drive in progress.
  void close();
  bool over() const { return over_.load(std::memory_order_acquire); }
  // Whether its socket still carries frames (a connection that failed stays the QP's: its
  // requester completes what is posted to it in error).
  bool live() const { return live_.load(std::memory_order_acquire); }
  int fd() const { return link_.fd(); }
  uint32_t qpn() const { return qpn_; }
  // For the progress thread: whether the socket's room is awaited (EPOLLOUT), and the next
  // time the connection needs the clock although nothing arrives (ns; -1: none).
  bool wants_room() const { return wants_room_.load(std::memory_order_relaxed); }
  int64_t deadline() const { return deadline_.load(std::memory_order_relaxed); }

 protected:
  DirectConn(Device& dev, UniqueFd fd, bool outbound, uint32_t qpn,
             const transport::LinkSizes& sizes);
  // The role's work after reading (requests sent, held requests retried, timers); false when
  // the connection failed. Under mu_.
  virtual bool run(int64_t now) = 0;
  // The connection ended (*why); `peer_closed`: the other end said Close first. Under mu_.
  virtual void ended(const char* why, bool peer_closed) = 0;
  virtual int64_t next_deadline(int64_t now) const = 0;
  // Whether a frame's payload is being placed into this process's memory now (what reclaim
  // must not unmap).
  virtual bool placing() const = 0;
  // Pings and pongs; every other frame is the role's (on_frame). Returns false for a frame this
  // end does not take.
  bool common_frame(wire::Type type, const uint8_t* body, int64_t now);
  void finish(const char* why);  // under mu_: the end of the connection

  Device& dev_;
  transport::Link link_;
  std::shared_ptr<shm::Peer> self_;  // this process, as its direct connections reach it
  uint32_t qpn_;
  int64_t now_ = 0;
  std::atomic<bool> live_{true};  // the connection carries frames (else: over, or failed)
  bool peer_closed_ = false;
  std::mutex mu_;

 private:
  std::atomic<bool> over_{false};
  std::atomic<bool> wants_room_{false};
  std::atomic<int64_t> deadline_{-1};
};

// This process's QP `qpn` sends on the connection.
class DirectOut final : public DirectConn, private transport::RequesterEnv {
 public:
  // `qp_offset`: the QP's shared state in the arena (its SendQueue, its send CQ).
  static std::shared_ptr<DirectOut> make(Device& dev, UniqueFd fd, uint32_t qpn, uint32_t type,
                                         uint32_t qp_offset, uint32_t dst_qpn, int* err);

 private:
  DirectOut(Device& dev, UniqueFd fd, uint32_t qpn);
  bool run(int64_t now) override;
  void ended(const char* why, bool peer_closed) override;
  int64_t next_deadline(int64_t now) const override;
  bool placing() const override { return req_.placing(); }
  bool on_frame(transport::Link& link, wire::Type type, const uint8_t* body, uint32_t payload,
                transport::PayloadDest& dest, const char** why) override;
  void on_payload_data(transport::Link&, const uint8_t*, size_t) override {}
  void on_payload(transport::Link& link) override { req_.on_payload(link, now_); }
  // RequesterEnv.
  transport::SendQp* find(uint32_t qpn) override { return qpn == q_.qpn ? &q_ : nullptr; }
  transport::Link* link_for(transport::SendQp&, const transport::Wqe&) override {
    return link_usable_ ? &link_ : nullptr;
  }
  void failed(transport::SendQp& q, proto::FatalReason why) override;

  transport::SendQp q_;
  transport::Requester req_;
  bool link_usable_ = true;
};

// The other host's QP `src_qpn` sends to this process's QP on the connection.
class DirectIn final : public DirectConn, private transport::ResponderEnv {
 public:
  static std::shared_ptr<DirectIn> make(Device& dev, UniqueFd fd, Qp& qp, uint32_t src_ipv4,
                                        uint32_t src_qpn, int* err);

 private:
  DirectIn(Device& dev, UniqueFd fd, Qp& qp);
  bool run(int64_t now) override;
  void ended(const char* why, bool peer_closed) override;
  int64_t next_deadline(int64_t now) const override;
  bool placing() const override { return resp_.placing(); }
  bool on_frame(transport::Link& link, wire::Type type, const uint8_t* body, uint32_t payload,
                transport::PayloadDest& dest, const char** why) override;
  void on_payload_data(transport::Link& link, const uint8_t* data, size_t len) override {
    resp_.on_payload_data(link, data, len);
  }
  void on_payload(transport::Link& link) override { resp_.on_payload(link); }
  // ResponderEnv.
  bool names_peer(uint32_t qpn, uint32_t ipv4, uint32_t peer_qpn) override;
  bool target(uint32_t qpn, shm::PeerQp& out) override;
  const char* who() const override { return "direct: peer"; }

  Qp& qp_;  // valid until close(), which the QP calls before it goes
  transport::Responder resp_;
  uint32_t src_ipv4_ = 0, src_qpn_ = 0;
};

}  // namespace vrdma
