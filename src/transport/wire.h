// Frames between two ends of a link, over TCP: the routers of two hosts (inside TLS 1.3 unless
// the cluster runs with --router-plaintext), or two containers' processes on the direct path
// (one connection per QP and direction, between the two containers' own addresses). Each host
// opens its own links to every host it sends to, one per lane (the main link, and one for the
// latency class once a QP of that class connects); a QP's requests all travel on the link of
// its lane (or its direct connection) and their responses come back on it, so per-QP order is
// the link's byte order. Hosts of one cluster run the same vrdma build on the same
// architecture: fields are in host byte order.
//
//   Frame header (8 bytes), then the type's body, then `payload` bytes of data.
//
// A receiver believes nothing a frame says about who sent it: the sending host is the link's
// authenticated peer, a source address must lie in that host's container networks, and a
// request reaches a QP only over a connection (Connect) that the QP's own RTR agreed to.
#pragma once

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#include "common/protocol.h"

namespace vrdma::wire {

inline constexpr uint32_t kMagic = 0x52445256;  // "VRDR"
inline constexpr uint32_t kVersion = 5;  // 3: requests carry an XRC SRQ number; 4: and flags;
                                         // 5: the direct path
inline constexpr uint16_t kDefaultPort = 7471;
// The direct path: the TCP port of every container's address where its QPs' connections from
// containers of other hosts arrive (vrdmad listens there, inside the container's network
// namespace). RoCEv2 uses the same number over UDP.
inline constexpr uint16_t kDirectPort = 4791;
inline constexpr uint32_t kMaxPayload = 1u << 31;  // RDMA's largest message

enum class Type : uint8_t {
  kHello = 1,  // first frame on a link, from the connecting side
  kPing = 2,   // answered with kPong; keeps a link with work in flight provably alive
  kPong = 3,
  kConnect = 4,  // a QP on the sender's host wants to reach a QP here
  kConnectRep = 5,
  kRequest = 6,   // a work request (RC, UC) or a datagram (UD); payload: SEND/WRITE data
  kResponse = 7,  // the outcome of a request; payload: READ data
  kCm = 8,        // an rdma_cm message, forwarded between the two hosts' daemons
  kPeerGone = 9,  // the program owning a connected QP died: its peer's QP fails
  // The direct path. Between routers: a QP on the sender's host will connect straight to a QP
  // here, presenting a ticket (kDirect), and the answer (kDirectRep). On the direct connection
  // itself: the first frame, from the source's process to the destination's vrdmad
  // (kDirectHello), and the source QP's end of the connection, which is no failure (kClose).
  kDirect = 10,
  kDirectRep = 11,
  kDirectHello = 12,
  kClose = 13,
  // On a direct connection, from the source's process: one more of its QPs sends to a QP of
  // the destination's process on this connection, with the ticket its host issued for that pair
  // (the destination's vrdmad takes it, DirectTake, before the destination's library does).
  kDirectAdd = 14,
};

struct Header {
  uint8_t type;
  uint8_t reserved[3];
  uint32_t payload;  // data bytes after the body
};

// Lanes: the links one host opens to another, chosen by the QoS class of the QPs they carry,
// so that latency-class frames never wait behind bulk bytes in a TCP stream; bulk QPs are
// spread over the main lane and up to kMaxBulkLinks - 1 more bulk lanes (--router-links).
inline constexpr uint32_t kMainLane = 0;     // bulk, and everything that is not a QP's work
inline constexpr uint32_t kLatencyLane = 1;  // QPs of the latency class (SL != 0 or DSCP 46)
inline constexpr uint32_t kMaxBulkLinks = 8;
inline constexpr uint32_t kLanes = 1 + kMaxBulkLinks;  // main, latency, bulk 2..8
// The lane of a host pair's bulk link number k (0: the main lane).
inline constexpr uint32_t bulk_lane(uint32_t k) {
  return k == 0 ? kMainLane : kLatencyLane + k;
}
// "main", "latency", "bulk1" .. "bulk7" (status, metrics, logs).
inline std::string lane_label(uint32_t lane) {
  if (lane == kMainLane) return "main";
  if (lane == kLatencyLane) return "latency";
  return "bulk" + std::to_string(lane - kLatencyLane);
}

struct Hello {
  uint32_t magic;
  uint32_t version;
  uint32_t host_id;
  uint32_t lane;  // which of the sender's links to this host this is (< kLanes)
  uint64_t boot;
};

struct Ping {
  uint64_t token;
};

struct Connect {
  uint64_t req_id;
  uint32_t src_ipv4;  // the requesting container (network order)
  uint32_t dst_ipv4;
  uint32_t src_qpn;
  uint32_t dst_qpn;
  uint32_t qp_type;  // the requesting QP's (XRC_SEND reaches an XRC_RECV QP)
  uint32_t reserved;
};

struct ConnectRep {
  uint64_t req_id;
  // 0, or kRefused for every refusal (no such QP at that address, another tenant, another
  // type, a source address the sending host does not own, a quota): a refusal does not tell
  // whether the QP exists.
  int32_t status;
  uint32_t qp_type;
};
inline constexpr int32_t kRefused = ECONNREFUSED;

struct Request {
  uint32_t src_qpn;
  uint32_t dst_qpn;
  // RC, UC: the request's number in its connection (0 for the first after Connect, then one
  // more each); echoed in the response. A gap or a repeat ends the connection's inbound state.
  uint64_t seq;
  uint32_t opcode;
  uint32_t qp_type;  // must be the destination QP's type (the responder uses its own)
  uint32_t imm_data;
  uint32_t rkey;
  uint64_t remote_addr;
  uint64_t compare_add;
  uint64_t swap;
  uint64_t length;
  uint32_t qkey;      // UD
  uint32_t src_ipv4;  // UD: for the GRH
  uint32_t dst_ipv4;  // UD: the destination's address, checked against its owner
  uint8_t solicited;
  uint8_t rnr_retry;  // how long the responder may hold a request that found no receive
  uint8_t timeout;    // ... or a destination QP that is not ready yet
  uint8_t retry_cnt;
  // XRC (qp_type IBV_QPT_XRC_RECV, the destination's): the SRQ of the destination's domain the
  // request is for (nonzero); 0 for every other type.
  uint32_t xrc_srqn;
  uint32_t flags;  // RequestFlags
};
// Request::flags. kMoreQueued: the requester has more requests of the QP posted behind this one
// (a hint the responder passes to the receiver's poller, engine/poll_backoff.h).
enum RequestFlags : uint32_t { kMoreQueued = 1 };

struct Response {
  uint32_t src_qpn;
  uint32_t status;  // ibv_wc_status for the requester
  uint64_t seq;
  uint64_t byte_len;
  uint64_t atomic_old;
};

// Body of kPeerGone. From the requester's host (on its link): source QP `qpn` is gone. From
// the responder's host (on the link the requests came on): the destination of source QP `qpn`
// is gone.
struct PeerGone {
  uint32_t qpn;
  uint32_t reserved;
};

// Body of kCm: one of the control protocol's connection-manager messages, re-sent by the
// receiving daemon as if a local client had sent it. `op` is proto::Op.
struct Cm {
  uint16_t op;
  uint16_t reserved;
  uint32_t len;
  uint8_t body[256];
};

// Body of kDirect (router to router, on the link the sending host opened): source QP `src_qpn`
// at `src_ipv4` (an address of the sending host's) will connect to QP `dst_qpn` at `dst_ipv4`
// over the pod network, and will present `ticket` there. The receiving host checks it as a
// Connect and keeps the ticket for that one connection.
// With kDirectProbe the connection only proves that the pod network lets the source's container
// reach the destination's (rdma_cm's connect): dst_qpn is 0, and it carries nothing.
struct Direct {
  uint64_t req_id;
  uint32_t src_ipv4;
  uint32_t dst_ipv4;
  uint32_t src_qpn;
  uint32_t dst_qpn;
  uint32_t qp_type;  // the requesting QP's
  uint32_t flags;    // DirectFlags
  uint8_t ticket[16];
};
enum DirectFlags : uint32_t { kDirectProbe = 1 };

struct DirectRep {
  uint64_t req_id;
  // 0; kRefused (as ConnectRep); or kNoDirect: the destination's host takes no direct
  // connection for this pair (it is off there, or the pair needs its router): connect routed.
  int32_t status;
  uint32_t qp_type;
  uint16_t port;  // where the destination's vrdmad listens (kDirectPort unless configured)
  uint16_t reserved[3];
  // The destination QP's process (a number its host gave it, never reused): the source's
  // process carries the work of all its QPs to that process on one connection.
  uint64_t dst_key;
};
inline constexpr int32_t kNoDirect = EPROTONOSUPPORT;

// Body of kDirectHello: the first frame of a direct connection, read by the destination's vrdmad
// before it hands the connection to the destination QP's process. Everything in it must match
// what the ticket was issued for, and the TCP peer must be `src_ipv4`.
inline constexpr uint32_t kDirectMagic = 0x44445256;  // "VRDD"
struct DirectHello {
  uint32_t magic;
  uint32_t version;
  uint8_t ticket[16];
  uint32_t src_ipv4;
  uint32_t dst_ipv4;
  uint32_t src_qpn;
  uint32_t dst_qpn;
  uint32_t qp_type;  // the requesting QP's
  uint32_t reserved;
};

struct DirectAdd {
  uint8_t ticket[16];
  uint32_t src_qpn;
  uint32_t dst_qpn;
  uint32_t qp_type;  // the source QP's
  uint32_t reserved;
};

// Body of kClose: the QP `qpn` at this end was destroyed (or reset), as a sender (kCloseSender:
// its requests end) or a receiver (kCloseReceiver: requests to it are no longer taken); what
// it had with the other end ends without failing the other end's QP (a connection that ends
// without it is a peer that died).
struct Close {
  uint32_t qpn;
  uint32_t role;  // CloseRole
};
enum CloseRole : uint32_t { kCloseSender = 1, kCloseReceiver = 2 };

// Whether a QP of type `src` may connect to one of type `dst` across hosts: the same type
// (RC, UC, UD), or an XRC_SEND QP to an XRC_RECV QP.
constexpr bool connects_to(uint32_t src, uint32_t dst) {
  using proto::QpType;
  if (src == uint32_t(QpType::kXrcSend)) return dst == uint32_t(QpType::kXrcRecv);
  return src == dst && (src == uint32_t(QpType::kRc) || src == uint32_t(QpType::kUc) ||
                        src == uint32_t(QpType::kUd));
}

// The operations a request to a QP of type `dst` may carry are those of this requester type:
// an XRC_RECV QP takes an XRC_SEND QP's (RC's).
constexpr uint32_t requester_type(uint32_t dst) {
  return dst == uint32_t(proto::QpType::kXrcRecv) ? uint32_t(proto::QpType::kXrcSend) : dst;
}

// The largest body of any frame type.
inline constexpr uint32_t kMaxBody = sizeof(Cm);

// Every frame body is plain bytes of a fixed size: pin them.
static_assert(sizeof(Header) == 8);
static_assert(sizeof(Hello) == 24 && sizeof(Ping) == 8);
static_assert(sizeof(Connect) == 32 && sizeof(ConnectRep) == 16);
static_assert(sizeof(Request) == 88 && sizeof(Response) == 32);
static_assert(sizeof(PeerGone) == 8 && sizeof(Cm) == 264);
static_assert(sizeof(Direct) == 48 && sizeof(DirectRep) == 32 && sizeof(DirectHello) == 48);
static_assert(sizeof(Close) == 8 && sizeof(DirectAdd) == 32);

// The size of a frame type's body, or 0 for a type that does not exist: what a receiver
// checks before it reads a body.
constexpr uint32_t body_size(Type t) {
  switch (t) {
    case Type::kHello:
      return sizeof(Hello);
    case Type::kPing:
    case Type::kPong:
      return sizeof(Ping);
    case Type::kConnect:
      return sizeof(Connect);
    case Type::kConnectRep:
      return sizeof(ConnectRep);
    case Type::kRequest:
      return sizeof(Request);
    case Type::kResponse:
      return sizeof(Response);
    case Type::kCm:
      return sizeof(Cm);
    case Type::kPeerGone:
      return sizeof(PeerGone);
    case Type::kDirect:
      return sizeof(Direct);
    case Type::kDirectRep:
      return sizeof(DirectRep);
    case Type::kDirectHello:
      return sizeof(DirectHello);
    case Type::kClose:
      return sizeof(Close);
    case Type::kDirectAdd:
      return sizeof(DirectAdd);
  }
  return 0;
}

// The body of a frame, copied out of a receive buffer of at least sizeof(T) bytes (a buffer
// need not be aligned).
template <typename T>
T read(const uint8_t* body) {
  static_assert(std::is_trivially_copyable_v<T>);
  T value;
  std::memcpy(&value, body, sizeof(T));
  return value;
}

}  // namespace vrdma::wire
