// Control protocol between the vrdma libraries (and the vrdma CLI) and vrdmad.
//
// Transport: one AF_UNIX SOCK_SEQPACKET connection per client process. Every
// message is one packet: a Header followed by `len` bytes of payload. File
// descriptors travel as SCM_RIGHTS ancillary data on the same packet.
//
// Requests carry a sequence number; the reply to a request carries the same
// sequence number and a status (0 or a positive errno). Messages with
// seq == 0 sent by the daemon are asynchronous notifications.
//
// Everything here is plain data: no pointers, fixed-width fields, and every
// field received is validated by the receiver.
#pragma once

#include <cstddef>
#include <cstdint>

namespace vrdma::proto {

inline constexpr uint32_t kMagic = 0x31445256;  // "VRD1"
inline constexpr uint32_t kVersion = 1;
inline constexpr size_t kMaxMessage = 64 * 1024;  // largest packet either side sends
inline constexpr size_t kMaxStatusText = kMaxMessage - 64;
inline constexpr int kMaxFdsPerMessage = 4;
inline constexpr const char* kDefaultSocket = "/run/vrdma/vrdmad.sock";
inline constexpr const char* kSocketEnv = "VRDMA_SOCKET";

enum class Op : uint16_t {
  kHello = 1,      // HelloReq -> HelloRep
  kPutFd = 2,      // PutFdReq + 1 fd -> (empty)
  kGetFd = 3,      // GetFdReq -> (empty) + 1 fd
  kAllocQpn = 4,   // AllocQpnReq -> AllocQpnRep
  kFreeQpn = 5,    // FreeQpnReq -> (empty)
  kConnectQp = 6,  // ConnectQpReq -> ConnectQpRep
  kAllocKey = 7,   // AllocKeyReq -> AllocKeyRep
  kFreeKey = 8,    // FreeKeyReq -> (empty)
  kStatus = 9,     // (empty) -> JSON text
  kDropFd = 10,    // DropFdReq -> (empty): forget a descriptor given with PutFd
  // rdma_cm (connection manager), see "Connection manager" below.
  kCmListen = 11,      // CmListenReq -> CmListenRep
  kCmUnlisten = 12,    // CmUnlistenReq -> (empty)
  kCmResolve = 13,     // CmResolveReq -> CmResolveRep
  kCmConnect = 14,     // CmConnectReq -> CmConnectRep
  kCmAccept = 15,      // CmAcceptReq -> (empty); the connector gets CmReply
  kCmReject = 16,      // CmRejectReq -> (empty); the connector gets CmRejected
  kCmRtu = 17,         // CmConnReq -> (empty); the acceptor gets CmEstablished
  kCmDisconnect = 18,  // CmConnReq -> (empty); the other side gets CmDisconnected
  // The host's administrator only (root, or vrdmad's user, in vrdmad's network namespace).
  kReload = 19,  // ReloadReq -> text: what re-reading the configuration changed (or the error)
  kQpFatal = 100,  // daemon -> client, seq 0: QpFatalEvent
  // daemon -> client, seq 0, connection manager events.
  kCmRequest = 101,       // CmRequestEvent, to the listener's client
  kCmReply = 102,         // CmEvent, to the connector: the peer accepted
  kCmRejected = 103,      // CmEvent, to the connector: rejected (reason 0) or refused
  kCmEstablished = 104,   // CmEvent, to the acceptor: the connector sent its RTU
  kCmDisconnected = 105,  // CmEvent, to the other side of a connection
};

inline constexpr bool is_cm_event(uint16_t op) {
  return op >= static_cast<uint16_t>(Op::kCmRequest) &&
         op <= static_cast<uint16_t>(Op::kCmDisconnected);
}

struct Header {
  uint32_t magic;
  uint16_t op;
  uint16_t reserved;
  uint32_t seq;
  int32_t status;  // replies: 0 or a positive errno
  uint32_t len;    // payload bytes following the header
};
static_assert(sizeof(Header) == 20);

enum class ClientKind : uint32_t { kVerbs = 1, kCli = 2 };

struct HelloReq {
  uint32_t version;
  uint32_t kind;  // ClientKind
};

// The daemon's view of the client: it is derived from the peer credentials and
// the client's network namespace, never from anything the client sends.
struct HelloRep {
  uint32_t version;
  uint32_t client_id;   // unique per daemon lifetime, never 0
  uint32_t ipv4;        // container address, network byte order
  uint32_t host_id;
  uint64_t node_guid;   // network byte order, as ibv_get_device_guid returns
  uint64_t daemon_boot; // changes on every daemon start
  char device_name[32];
  char container[64];   // human-readable name (netns name or "host")
};

// Hands the daemon a file descriptor the client wants peers to be able to map
// or signal. fd_id 0 is the client's arena; other ids are chosen by the client.
enum class FdKind : uint32_t { kArena = 1, kMemory = 2, kEvent = 3 };
struct PutFdReq {
  uint32_t fd_id;
  uint32_t kind;  // FdKind
  uint64_t size;  // bytes, for memory and arena
};

struct DropFdReq {
  uint32_t fd_id;
};

// Asks for a file descriptor another client registered. Allowed only when the
// two clients are in the same trust domain and the requester has a connection
// (ConnectQp) to the owner.
struct GetFdReq {
  uint32_t owner_client;
  uint32_t fd_id;
};

enum class QpType : uint32_t { kRc = 2, kUc = 3, kUd = 4 };  // values of ibv_qp_type

struct AllocQpnReq {
  uint32_t qp_type;       // QpType
  uint32_t arena_offset;  // where the QP's shared state lives in the arena
};
struct AllocQpnRep {
  uint32_t qpn;
};
struct FreeQpnReq {
  uint32_t qpn;
};

// Resolves a destination QP for a local QP: by QPN alone (gid all zero) or by
// GID + QPN. The daemon records the link so that it can tell the local client
// when the peer goes away.
struct ConnectQpReq {
  uint32_t local_qpn;
  uint32_t dest_qpn;
  uint8_t dest_gid[16];
};
// A destination on another host is `routed`: the local QP hands its work to this host's router
// (the QP's SendQueue) and the reply carries the router's doorbell eventfd; peer_client and
// peer_arena_offset are 0.
struct ConnectQpRep {
  uint32_t peer_client;
  uint32_t peer_arena_offset;  // of the destination QP's shared state
  uint32_t peer_qp_type;
  uint32_t routed;
};

struct AllocKeyReq {
  uint32_t index;   // slot in the client's MR table; becomes the low bits of the key
  uint32_t access;  // ibv_access_flags, for status
  uint64_t length;  // bytes, for status and quotas
};
struct AllocKeyRep {
  uint32_t key;
};
struct FreeKeyReq {
  uint32_t key;
};

// kPeerGone: the peer went away (an async IBV_EVENT_QP_FATAL follows); kRouted: the router
// completed the QP's work with an error and moved it to the error state (flush receives, no
// event, as a completion error on a fabric).
enum class FatalReason : uint32_t { kPeerGone = 1, kRouted = 2 };
struct QpFatalEvent {
  uint32_t qpn;  // the receiving client's QP whose peer is gone
  uint32_t reason;
};

// ---- Connection manager (rdma_cm) -------------------------------------------------------
// Addresses are IPv4 in network byte order, ports in host byte order. The daemon owns the
// host's listener table ((ip, port) -> client) and the connections between a connector
// ("active" side) and an acceptor ("passive" side); QPs stay the clients' own. Cookies are
// chosen by the client to find its own objects again in events; the daemon only echoes them.
// Connection ids are chosen by the daemon, unique per daemon lifetime, never 0.
inline constexpr size_t kCmPrivateData = 56;  // the smallest rdma_cm private data (REQ over IB)

struct CmParams {
  uint8_t responder_resources;
  uint8_t initiator_depth;
  uint8_t retry_count;
  uint8_t rnr_retry_count;
};

// ipv4 0 is the wildcard, meaning the client's own address. Another address than the
// client's own is EADDRNOTAVAIL; an (ip, port) already listened on on this host EADDRINUSE.
struct CmListenReq {
  uint32_t ipv4;
  uint16_t port;
  uint16_t reserved;
  uint64_t cookie;
};
struct CmListenRep {
  uint32_t ipv4;  // the address listened on
};
struct CmUnlistenReq {
  uint32_t ipv4;
  uint16_t port;
  uint16_t reserved;
};

// Whether the destination can be reached; EHOSTUNREACH if not.
struct CmResolveReq {
  uint32_t dst_ipv4;
};
struct CmResolveRep {
  uint32_t src_ipv4;  // the client's own address
};

struct CmConnectReq {
  uint32_t dst_ipv4;
  uint16_t dst_port;
  uint16_t src_port;
  uint32_t local_qpn;
  uint32_t qp_type;  // QpType (RC, UC, or UD for a SIDR-style exchange)
  uint32_t qkey;     // UD
  CmParams params;
  uint8_t private_len;
  uint8_t reserved[3];
  uint8_t private_data[kCmPrivateData];
  uint64_t cookie;  // echoed in the connector's events
};
// Errors: ECONNREFUSED (no listener, or refused by policy), EHOSTUNREACH.
struct CmConnectRep {
  uint32_t conn_id;
};

struct CmRequestEvent {
  uint32_t conn_id;
  uint32_t remote_qpn;
  uint64_t listen_cookie;
  uint32_t src_ipv4;  // the connector
  uint32_t dst_ipv4;  // the listener's address
  uint16_t src_port;
  uint16_t dst_port;
  uint32_t qp_type;
  uint32_t qkey;
  CmParams params;
  uint8_t private_len;
  uint8_t reserved[3];
  uint8_t private_data[kCmPrivateData];
};

struct CmAcceptReq {
  uint32_t conn_id;
  uint32_t local_qpn;
  uint32_t qkey;  // UD
  CmParams params;
  uint8_t private_len;
  uint8_t reserved[3];
  uint8_t private_data[kCmPrivateData];
};

struct CmRejectReq {
  uint32_t conn_id;
  uint8_t private_len;
  uint8_t reserved[3];
  uint8_t private_data[kCmPrivateData];
};

// CmRtu (from the connector) and CmDisconnect (from either side; one client may hold both).
struct CmConnReq {
  uint32_t conn_id;
  uint32_t passive;  // 1: the sender speaks as the acceptor, 0: as the connector
};
// The same bytes, as the daemon tells the two requests apart (control_ops.h).
struct CmRtuReq : CmConnReq {};
struct CmDisconnectReq : CmConnReq {};

// kStatus carries no payload.
struct StatusReq {};

// kReload carries no payload. The reply's status is 0, or EINVAL when the configuration file
// was refused (nothing changed), or EPERM; its text says what changed, one line per key.
struct ReloadReq {};

// Reply, Rejected, Established, Disconnected. `cookie` is the connector's cookie in events to
// the connector and 0 in events to the acceptor (which knows the connection by conn_id).
struct CmEvent {
  uint32_t conn_id;
  int32_t reason;  // Rejected: 0 rejected by the peer, else ECONNREFUSED (no listener, gone)
  uint64_t cookie;
  uint32_t remote_qpn;  // Reply
  uint32_t qkey;        // Reply (UD)
  CmParams params;      // Reply
  uint8_t private_len;  // Reply, Rejected
  uint8_t reserved[3];
  uint8_t private_data[kCmPrivateData];
};

// The wire is these structs' bytes: pin every size (x86-64, as every peer of one host is).
static_assert(sizeof(HelloReq) == 8 && sizeof(HelloRep) == 128);
static_assert(sizeof(PutFdReq) == 16 && sizeof(DropFdReq) == 4 && sizeof(GetFdReq) == 8);
static_assert(sizeof(AllocQpnReq) == 8 && sizeof(AllocQpnRep) == 4 && sizeof(FreeQpnReq) == 4);
static_assert(sizeof(ConnectQpReq) == 24 && sizeof(ConnectQpRep) == 16);
static_assert(sizeof(AllocKeyReq) == 16 && sizeof(AllocKeyRep) == 4 && sizeof(FreeKeyReq) == 4);
static_assert(sizeof(QpFatalEvent) == 8 && sizeof(CmParams) == 4);
static_assert(sizeof(CmListenReq) == 16 && sizeof(CmListenRep) == 4 && sizeof(CmUnlistenReq) == 8);
static_assert(sizeof(CmResolveReq) == 4 && sizeof(CmResolveRep) == 4);
static_assert(sizeof(CmConnectReq) == 96 && sizeof(CmConnectRep) == 4);
static_assert(sizeof(CmRequestEvent) == 104 && sizeof(CmAcceptReq) == 76);
static_assert(sizeof(CmRejectReq) == 64 && sizeof(CmConnReq) == 8 && sizeof(CmEvent) == 88);
static_assert(sizeof(CmRtuReq) == sizeof(CmConnReq) && sizeof(CmDisconnectReq) == sizeof(CmConnReq));

}  // namespace vrdma::proto
