// The responder: requests that come on links, executed against the destination QPs of this
// side with the responder logic every path shares (shm/respond.h). vrdmad's router runs one for
// the requests other hosts send (and the mediated path's); the client library runs one per
// direct connection, for the requests a container on another host sends to its QP.
//
// A request belongs to a connection (InConn: a source QP on the other side of a link, and the
// destination QP here it connected to). It reaches its destination only once that QP's RTR
// named the source (address and QPN), in sequence, with the type of the destination QP; its
// payload goes straight from the link into the destination's memory. A request that finds no
// receive (RNR) or a destination not ready (or not agreeing) yet is held, with every later
// request of the same connection behind it, and retried as the QP's attributes say; held
// payloads are stored as they arrive, never allocated at the length a frame announces, within
// per-connection and per-link bounds (and whatever the environment adds: the router, per host).
// Past a bound, a request fails at once with the status its wait would have ended with.
//
// Single-threaded: its user serializes every call.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <unordered_map>
#include <vector>

#include "shm/peer.h"
#include "shm/respond.h"
#include "transport/link.h"
#include "transport/wire.h"

namespace vrdma::transport {

struct HeldRequest {
  wire::Request req;
  uint64_t token = 0;     // which held request a payload in flight is for
  bool complete = true;   // its payload has all arrived
  uint64_t reserved = 0;  // payload bytes counted against the bounds (its length)
  uint64_t received = 0;  // payload bytes stored so far
  // The payload, stored as it arrives, in pieces of at most kHeldChunk bytes.
  std::vector<std::vector<uint8_t>> chunks;
  int64_t next_ns = 0;
  int64_t deadline_ns = 0;  // not ready: give up after this
  int rnr_left = 0;
  ibv_wc_status expiry = IBV_WC_RETRY_EXC_ERR;  // what it fails with when it cannot wait
};
inline constexpr size_t kHeldChunk = 64 * 1024;

// One connection: requests from source QP `src_qpn` (at `src_ipv4`, on the other side of link
// `link_id`) to destination QP `dst_qpn` here.
struct InConn {
  uint32_t link_id = 0;
  uint32_t peer_id = 0;   // who is on the other side (the router: the authenticated host id)
  uint32_t src_ipv4 = 0;  // the source QP's address
  uint32_t src_qpn = 0;
  uint32_t dst_qpn = 0;
  uint32_t type = 0;   // the destination QP's type: what every request is taken as
  uint32_t owner = 0;  // the destination QP's client
  uint64_t next_seq = 0;
  shm::PeerQp target;
  bool failed = false;  // a request failed: later ones are dropped as the requester flushes
  uint64_t held_bytes = 0;
  std::deque<HeldRequest> held;
  // XRC: the SRQs of the XRC_RECV QP's domain reached so far, by number, and the last one as a
  // destination (the SRQ's rings and PD with the QP's attributes).
  std::unordered_map<uint32_t, shm::PeerQp> xrc_srqs;
  shm::PeerQp xrc_target;
};

inline uint64_t conn_key(uint32_t link_id, uint32_t src_qpn) {
  return uint64_t(link_id) << 32 | src_qpn;
}

struct ResponderLimits {
  uint32_t connections_per_link = 65536;
  uint32_t held_requests_per_connection = 16384;
  uint64_t held_bytes_per_connection = 16ull << 20;
  uint32_t held_requests_per_link = 65536;
  uint64_t held_bytes_per_link = 64ull << 20;
};

// What the responder asks of its user.
class ResponderEnv {
 public:
  virtual ~ResponderEnv() = default;
  // Whether local QP `qpn`'s RTR names (ipv4, peer_qpn) as its destination: its consent.
  virtual bool names_peer(uint32_t qpn, uint32_t ipv4, uint32_t peer_qpn) = 0;
  // Local QP `qpn` as a destination (its object, rings and memory mapped), or false.
  virtual bool target(uint32_t qpn, shm::PeerQp& out) = 0;
  // XRC: SRQ `srqn` of the domain of the connection's XRC_RECV QP, of its tenant and
  // container, or false.
  virtual bool xrc_srq(const InConn& c, uint32_t srqn, shm::PeerQp& out);
  // UD: the destination of a datagram that came on `link`, or null (it is dropped).
  virtual const shm::PeerQp* ud_target(Link& link, const wire::Request& r);
  // Payload bytes held for connections with `peer_id` beyond the connection's and link's own
  // bounds: false (and *over, what is full) when the user's bound refuses them; give_held gives
  // them back.
  virtual bool take_held(uint32_t peer_id, uint64_t bytes, const char** over);
  virtual void give_held(uint32_t peer_id, uint64_t bytes);
  // The log's name for whoever is on the other side of a connection.
  virtual const char* who() const { return "peer"; }
};

class Responder {
 public:
  Responder(ResponderEnv& env, const ResponderLimits& lim) : env_(env), lim_(lim) {}

  // A new connection on `link` (replacing one of the same source on it, whose held requests
  // are dropped). Null when the link has its bound of connections.
  InConn* connect(Link& link, uint32_t peer_id, uint32_t src_ipv4, uint32_t src_qpn,
                  uint32_t dst_qpn, uint32_t type, uint32_t owner);
  InConn* find(uint32_t link_id, uint32_t src_qpn);
  // Ends a connection (its held requests are dropped); `why` is logged.
  void drop(Link& link, uint32_t src_qpn, const char* why);
  // Forgets every held request of a connection (`link`: its link, if it is still there).
  void release_held(InConn& c, Link* link);
  // The link is going: its connections and the frame it was receiving with it.
  void forget_link(Link& link);
  std::map<uint64_t, std::unique_ptr<InConn>>& conns() { return conns_; }
  const std::map<uint64_t, std::unique_ptr<InConn>>& conns() const { return conns_; }

  // A request frame (RC, UC, XRC, or a UD datagram); the payload then goes where `dest` says.
  void on_request(Link& link, const wire::Request& r, uint32_t payload, PayloadDest& dest,
                  int64_t now);
  void on_payload_data(Link& link, const uint8_t* data, size_t len);
  // The payload of the frame being received is complete: false when no request of this
  // responder was receiving one on the link.
  bool on_payload(Link& link);
  // Whether a frame's payload is being placed into a client's memory on some link now.
  bool placing() const;

  // Held requests whose time has come are tried again; `link_of` finds a connection's link.
  template <typename LinkOf>
  void retry_held(int64_t now, LinkOf link_of) {
    if (!held_count_) return;
    for (auto& [key, cp] : conns_) {
      InConn& c = *cp;
      if (c.held.empty()) continue;
      Link* l = link_of(c.link_id);
      if (!l) continue;
      while (!c.held.empty() && l->has_room(64)) {
        HeldRequest& h = c.held.front();
        // Its payload may still be arriving (the frame being received on the link).
        if (!h.complete || h.next_ns > now) break;
        if (!execute_held(*l, c, now)) break;
      }
    }
  }
  size_t held_count() const { return held_count_; }

 private:
  struct Rx {  // the request whose payload a link is receiving
    enum class Kind { kNone, kPlace, kHold, kDiscardReply } kind = Kind::kNone;
    wire::Request req{};
    shm::PeerQp target;                     // kPlace
    shm::Placement pl;                      // kPlace
    ibv_wc_status status = IBV_WC_SUCCESS;  // kDiscardReply
    bool reply = true;
    uint64_t hold_key = 0;  // kHold: the connection and the held request it goes to
    uint64_t hold_token = 0;
  };
  Rx& rx(uint32_t link_id);
  void on_datagram(Link& link, const wire::Request& r, uint32_t payload, PayloadDest& dest,
                   Rx& f);
  // The request fails (or is dropped, UC) with `st`, once its payload has passed.
  void discard_and_reply(Link& link, Rx& f, ibv_wc_status st, uint32_t payload);
  // Keeps the request (its payload stored as it arrives) until `next_ns`: RNR, or not ready
  // yet; `expiry` is the status it fails with when it cannot be kept (over a bound) or expires.
  void hold(Link& link, InConn& c, const wire::Request& r, uint32_t payload, PayloadDest& dest,
            Rx& f, int64_t now, int64_t next_ns, ibv_wc_status expiry);
  void respond(Link& link, const wire::Request& r, ibv_wc_status st, uint64_t byte_len,
               uint64_t atomic_old, const shm::Seg* data, int nseg);
  // Admission of a request of a connection: consent, then the responder's routine. The
  // destination it was admitted to (the QP, or an XRC SRQ through it), or null.
  const shm::PeerQp* admit(InConn& c, const wire::Request& r, shm::Placement& pl);
  const shm::PeerQp* xrc_dest(InConn& c, uint32_t srqn, ibv_wc_status& st);
  bool execute_held(Link& link, InConn& c, int64_t now);
  void unheld(Link* link, InConn& c, const HeldRequest& h);  // its bytes leave the bounds

  ResponderEnv& env_;
  ResponderLimits lim_;
  std::map<uint64_t, std::unique_ptr<InConn>> conns_;  // conn_key(link, src qpn) ->
  std::unordered_map<uint32_t, std::unique_ptr<Rx>> rx_;  // link id ->
  uint64_t next_hold_token_ = 1;
  size_t held_count_ = 0;
};

// The request as the responder's routine takes it: with the destination's QP type, never the
// frame's.
shm::Incoming incoming_of(const wire::Request& r, uint32_t qp_type);

}  // namespace vrdma::transport
