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
inline constexpr uint32_t kVersion = 2;  // 2: the direct path (ConnectQpRep::direct)
inline constexpr size_t kMaxMessage = 64 * 1024;  // largest packet either side sends
inline constexpr size_t kMaxStatusText = kMaxMessage - 64;
inline constexpr int kMaxFdsPerMessage = 8;
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
  kSetQpObject = 19,   // SetQpObjectReq -> (empty): a QP's new shared object (after a reset)
  kGetMr = 20,         // GetMrReq -> GetMrRep + one fd per segment: a granted MR
  // The host's administrator only (root, or vrdmad's user, in vrdmad's network namespace).
  kReload = 21,        // ReloadReq -> text: what re-reading the configuration changed, or why not
  // XRC domains (see "XRC" below).
  kOpenXrcd = 22,   // OpenXrcdReq + 1 fd -> OpenXrcdRep
  kCloseXrcd = 23,  // CloseXrcdReq -> (empty)
  kSetQpXrcd = 24,  // SetQpXrcdReq -> (empty)
  kQos = 25,           // QosReq -> text: the QoS rules in force (after setting one)
  kOpenXrcQp = 26,     // OpenXrcQpReq -> OpenXrcQpRep (+ the QP object when shared)
  kPacing = 28,        // PacingReq -> (empty) + 2 fds: the same-host rate limit pages
  kCloseXrcQp = 29,    // CloseXrcQpReq -> CloseXrcQpRep: a process's handles of an XRC_RECV QP
  kDirectTake = 30,    // DirectTakeReq -> (empty): another QP joins a direct connection
  kAdoptMemory = 31,   // AdoptMemoryReq -> AdoptMemoryRep + 1 fd: a shared mapping's own file
  // UD multicast (McastReq): attach, detach, and the group's members on this host.
  kMcastAttach = 40,   // McastReq -> (empty)
  kMcastDetach = 41,   // McastReq -> (empty)
  kMcastMembers = 42,  // McastReq -> McastMembersRep
  kQpFatal = 100,  // daemon -> client, seq 0: QpFatalEvent
  // daemon -> client, seq 0, connection manager events.
  kCmRequest = 101,       // CmRequestEvent, to the listener's client
  kCmReply = 102,         // CmEvent, to the connector: the peer accepted
  kCmRejected = 103,      // CmEvent, to the connector: rejected (reason 0) or refused
  kCmEstablished = 104,   // CmEvent, to the acceptor: the connector sent its RTU
  kCmDisconnected = 105,  // CmEvent, to the other side of a connection
  // daemon -> client, seq 0: a peer wants a range of an implicit ODP MR that no registration
  // covers yet: the owner registers it (OdpFaultEvent).
  kOdpFault = 110,
  // daemon -> client, seq 0, with one descriptor: a direct connection from a QP of another
  // host's container to one of the receiving client's QPs (DirectAcceptedEvent).
  kDirectAccepted = 111,
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

// Hands the daemon a file descriptor that vrdmad (arena), peers it grants (QP and SRQ objects,
// the key table, memory, eventfds) or both may map or signal. fd_id 0 is the client's arena,
// 1 its key table; other ids are chosen by the client. Every file to be mapped must be a memfd
// sealed against shrinking and growing; the daemon maps it at the size it has.
enum class FdKind : uint32_t {
  kArena = 1,
  kMemory = 2,      // a backing of registered memory
  kEvent = 3,       // an eventfd: a CQ's channel (vrdmad only) or a QP object's notify fd
  kQpObject = 4,    // shm::QpObject
  kSrqObject = 5,   // an SRQ's object
  kKeyTable = 6,    // shm::KeyTable, sealed against new writable mappings
};
// PutFdReq::flags. kSealWrites (memory): vrdmad keeps a writable mapping of the file for its
// router and then seals it against new writable mappings, so that peers granted it read-only
// cannot get write access by reopening it.
inline constexpr uint32_t kSealWrites = 1;
struct PutFdReq {
  uint32_t fd_id;
  uint32_t kind;  // FdKind
  uint64_t size;  // bytes, for memory and arena (at most the file's size)
  uint32_t flags;
  uint32_t reserved;
};

struct DropFdReq {
  uint32_t fd_id;
};

// Registered memory that already lives in a System V segment stays there: vrdmad opens the
// file of the client's mapping [vma_start, vma_end) (exactly one mapping as /proc/PID/maps
// lists it, shared and writable) and keeps it as memory descriptor `fd_id`, as if handed over
// with PutFd. The reply gives the file's size and the offset in it of vma_start, and the
// descriptor. EOPNOTSUPP: the mapping is not one of a System V segment (the pages move into a
// file of their own as usual).
struct AdoptMemoryReq {
  uint32_t fd_id;
  uint32_t reserved;
  uint64_t vma_start;
  uint64_t vma_end;
};
struct AdoptMemoryRep {
  uint64_t file_size;
  uint64_t offset;
};

// Asks for a file descriptor another client handed over, on behalf of the requester's QP
// `via_qpn`. Granted only over an agreed connection: the requester's QP and a QP of the owner
// named each other at RTR (RC, UC), or the requester's UD QP resolved the owner's UD QP. What
// such a connection reaches: the QP's object, its SRQ's object, its notify eventfd and the key
// table; never the arena, a memory backing (GetMr) or a CQ's channel.
struct GetFdReq {
  uint32_t owner_client;
  uint32_t fd_id;
  uint32_t via_qpn;
  uint32_t reserved;
};

// Asks for the owner's MR `key` over the requester's QP `via_qpn`. `access` says why:
// IBV_ACCESS_LOCAL_WRITE for a receive of the reached QP (or its SRQ) that points into the MR,
// else the remote rights wanted (the MR must have them and be in the reached QP's PD). The
// reply describes the MR and carries one descriptor per segment, writable only for
// REMOTE_WRITE, REMOTE_ATOMIC and receive buffers, else opened read-only.
struct GetMrReq {
  uint32_t owner_client;
  uint32_t via_qpn;
  uint32_t key;
  uint32_t access;
  // An implicit ODP MR's key: the range wanted (the grant is of a registration covering it).
  uint64_t addr;
  uint64_t length;
};
struct GetMrSeg {
  uint32_t fd_id;
  uint32_t reserved;
  uint64_t offset;
  uint64_t length;
};
struct GetMrRep {
  uint32_t slot;  // the owner's MR slot, whose generation the key table holds
  uint32_t gen;
  uint32_t access;
  uint32_t pd;
  uint32_t nseg;
  uint32_t writable;
  uint64_t iova;
  uint64_t length;
  uint64_t va_offset;
  uint64_t map_length;
  GetMrSeg seg[8];
  uint32_t implicit;  // granted through an implicit ODP MR's key: other ranges, other grants
  uint32_t reserved;
};

// Values of ibv_qp_type, and kXrcSrq: the receive side of an XRC SRQ, numbered like a QP (its
// number is the SRQ number senders name), reached by the XRC_SEND QPs connected to an XRC_RECV
// QP of the same XRC domain.
enum class QpType : uint32_t {
  kRc = 2,
  kUc = 3,
  kUd = 4,
  kXrcSend = 9,
  kXrcRecv = 10,
  kXrcSrq = 0xfe,  // within ibv_qp_type's range (IBV_QPT_DRIVER is 0xff), which no QP has
};

struct AllocQpnReq {
  uint32_t qp_type;       // QpType
  uint32_t arena_offset;  // where the QP's send-side state (shm::QpShared) lives in the arena
  uint32_t object_fd_id;  // its QP object (FdKind::kQpObject)
  uint32_t srq_fd_id;     // its SRQ's object, 0 for none
  uint32_t notify_fd_id;  // the eventfd senders write when its CQ is armed, 0 for none
  uint32_t pd;            // its protection domain (the client's own numbering)
};
struct AllocQpnRep {
  uint32_t qpn;
};
struct FreeQpnReq {
  uint32_t qpn;
};
// A QP that went back to RESET gets a new object, so that whoever reached the old one reaches
// nothing of the new connection.
struct SetQpObjectReq {
  uint32_t qpn;
  uint32_t object_fd_id;
  uint32_t notify_fd_id;
  uint32_t reserved;
};

// Resolves a destination QP for a local QP: by QPN alone (gid all zero) or by
// GID + QPN. The daemon records what the local QP's RTR names and the link (so that it can
// tell the local client when the peer goes away). An RC or UC destination on this host answers
// only once its own RTR named the local QP (QPN and address): until then the reply is EAGAIN,
// and the local QP treats the destination as not ready (it retries until its timeout).
struct ConnectQpReq {
  uint32_t local_qpn;
  uint32_t dest_qpn;
  uint8_t dest_gid[16];
  uint32_t flags;  // ConnectFlags
  uint32_t reserved;
};
// kConnectNewLink: a direct connection is to be made anew (the client has none to the
// destination's process, whatever the daemon remembers).
enum ConnectFlags : uint32_t { kConnectNewLink = 1 };
// A destination on another host is `routed`: the local QP hands its work to this host's router
// (the QP's SendQueue) and the reply carries the router's doorbell eventfd; peer_client and
// peer_object_fd_id are 0. `direct` too (a container of another host, on the direct path): the
// QP's requests go (from its SendQueue) on the client's one TCP connection to the destination
// QP's process `link_key`, executed there. The reply's descriptor, if it has one, is that
// connection made now, from the client's container to the destination's, which the
// destination's vrdmad accepted for exactly this pair of QPs; without one the client adds the QP
// to the connection it has, presenting `ticket` (wire::DirectAdd), or, if it has none, asks again
// with kConnectNewLink.
struct ConnectQpRep {
  uint32_t peer_client;
  uint32_t peer_object_fd_id;  // the destination QP's object (GetFd over the local QP)
  uint32_t peer_qp_type;
  uint32_t routed;
  uint32_t direct;
  uint32_t reserved;
  uint64_t link_key;
  uint8_t ticket[16];
};
// A QP of another host asks, on a direct connection the client has, to send to the client's QP
// `dst_qpn` (wire::DirectAdd): 0 when vrdmad kept `ticket` for exactly that pair, from the
// connection's source address `peer_ipv4` (what the client's socket says) to a QP of the client;
// EACCES otherwise. The ticket is taken either way.
struct DirectTakeReq {
  uint8_t ticket[16];
  uint32_t peer_ipv4;
  uint32_t src_qpn;
  uint32_t dst_qpn;
  uint32_t qp_type;  // the source QP's
};
// The other end of a direct connection (the one descriptor of kDirectAccepted): requests of QP
// `src_qpn` at `src_ipv4` (another host's container) to the client's QP `dst_qpn`, which the
// client's library executes. The connection's first frame (its DirectHello) was read already.
struct DirectAcceptedEvent {
  uint32_t dst_qpn;
  uint32_t src_ipv4;  // network order
  uint32_t src_qpn;
  uint32_t qp_type;   // the destination QP's
};

// ---- XRC ----------------------------------------------------------------------------------
// An XRC domain is named by a file: the fd that comes with OpenXrcd (the caller's ibv_open_xrcd
// descriptor, or an anonymous file of its own for a domain nobody else shares). Clients of one
// tenant that open the same inode share the domain. oflags: O_CREAT creates it if it does not
// exist (else EINVAL), O_EXCL with O_CREAT refuses an existing one (EINVAL), as the kernel does.
struct OpenXrcdReq {
  uint32_t oflags;
  uint32_t reserved;
};
struct OpenXrcdRep {
  uint32_t xrcd;  // the domain's number (per host), never 0
};
struct CloseXrcdReq {
  uint32_t xrcd;
};
// Puts an XRC_RECV QP or an XRC SRQ (QpType::kXrcSrq) of the caller into a domain it opened.
struct SetQpXrcdReq {
  uint32_t qpn;
  uint32_t xrcd;
};
// ibv_open_qp: XRC_RECV QP `qpn` is of domain `xrcd`, which the caller opened, and its creator
// is of the caller's tenant. EACCES: the caller does not hold `xrcd`; EINVAL: no such QP in it.
struct OpenXrcQpReq {
  uint32_t qpn;
  uint32_t xrcd;
};
// The answer to a process that did not make the QP (or holds it since its maker went): `shared`
// 1 and the QP object's descriptor, through which the handle reads and sets the QP's state.
struct OpenXrcQpRep {
  uint32_t shared;
  uint32_t reserved;
};
// A process drops its handles of XRC_RECV QP `qpn` (the maker's last handle, or one that
// OpenXrcQp answered with `shared`). `kept` 1: the QP lives on, held by another process (the
// maker's library then leaves its object as it is); 0: the caller held it last and frees it
// (FreeQpn; `object_fd_id` is the caller's id of the QP object, to drop).
struct CloseXrcQpReq {
  uint32_t qpn;
  uint32_t reserved;
};
struct CloseXrcQpRep {
  uint32_t kept;
  uint32_t object_fd_id;
};

// UD multicast: a local UD QP and a multicast GID (ff00::/8, or ::ffff:224.0.0.0/4). A group
// is the tenant's: members of other tenants never share it.
struct McastReq {
  uint32_t qpn;
  uint32_t reserved;
  uint8_t gid[16];
};
// The device's multicast limits (ibv_device_attr), which vrdmad enforces: QPs of one tenant
// attached to one group on this host (max_mcast_qp_attach), groups a client's QPs are attached to
// (max_mcast_grp), and attachments of a client (max_total_mcast_qp_attach).
inline constexpr uint32_t kMaxMcastMembers = 64;
inline constexpr uint32_t kMaxMcastGroups = 256;
inline constexpr uint32_t kMaxMcastAttaches = 1024;
// The UD QPs of this host (the caller's tenant) attached to the group. The caller reads its
// arena's mcast_gen before asking: a change after that bumps it again. `routed`: the host has a
// router, which carries each datagram to the other hosts with members (the caller's QP hands it
// its work, as to a routed destination; the reply carries the router's doorbell eventfd).
struct McastMembersRep {
  uint32_t count;
  uint32_t routed;
  uint32_t qpn[kMaxMcastMembers];
};

// Keys are 32 random bits; nothing in a key says where its MR is.
struct AllocKeyReq {
  uint32_t index;   // slot in the client's MR table (the arena's MrEntry)
  uint32_t access;  // ibv_access_flags: what grants the MR allows
  uint64_t length;  // bytes, for status and quotas
  uint32_t pd;      // its protection domain
  uint32_t replaces;  // 0, or a key of the client's that this registration takes over
                      // (ibv_rereg_mr): the same key, now for this slot, access, length, pd
};
struct AllocKeyRep {
  uint32_t key;
};
// In AllocKeyReq::access: a memory window's key. vrdmad reserves a key whose low 8 bits are 0
// together with its 255 variants (the window's owner picks the low byte at each bind, as
// ibv_inc_rkey does), and reads the rights of the window as bound from the owner's MR table.
inline constexpr uint32_t kKeyWindow = 1u << 31;
// In AllocKeyReq::access: an implicit ODP MR's key (length 0). It describes no pages itself: a
// grant of it is a grant of a registration of the owner, with the same protection domain and
// rights, that covers the range asked for; when none does, the owner is asked to register one
// (kOdpFault) and the asker to try again (EAGAIN).
inline constexpr uint32_t kKeyImplicit = 1u << 30;
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
struct OdpFaultEvent {
  uint32_t key;  // the receiving client's implicit ODP MR
  uint32_t reserved;
  uint64_t addr;
  uint64_t length;
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

// kPacing (verbs clients): the pacing pages (shm/pacing.h) of the caller's container and of its
// tenant, as two memfds of shm::kPacingPageSize, in that order. vrdmad writes the QoS rules'
// limits into them; the processes that share a page keep its meters.
struct PacingReq {};

// kQos: `rule` (NUL-terminated, qos/rules.h syntax) is applied at once to the router's
// scheduler; an empty rule changes nothing. The reply's text lists the rules in force, one a
// line; its status is 0, EINVAL (a bad rule, which the text explains) or EPERM.
struct QosReq {
  char rule[256];
};

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
static_assert(sizeof(PutFdReq) == 24 && sizeof(DropFdReq) == 4 && sizeof(GetFdReq) == 16);
static_assert(sizeof(GetMrReq) == 32 && sizeof(GetMrSeg) == 24 && sizeof(GetMrRep) == 256);
static_assert(sizeof(AllocQpnReq) == 24 && sizeof(AllocQpnRep) == 4 && sizeof(FreeQpnReq) == 4);
static_assert(sizeof(SetQpObjectReq) == 16);
static_assert(sizeof(OpenXrcdReq) == 8 && sizeof(OpenXrcdRep) == 4 && sizeof(CloseXrcdReq) == 4 &&
              sizeof(SetQpXrcdReq) == 8 && sizeof(OpenXrcQpReq) == 8);
static_assert(sizeof(ConnectQpReq) == 32 && sizeof(ConnectQpRep) == 48 &&
              sizeof(DirectAcceptedEvent) == 16 && sizeof(DirectTakeReq) == 32);
static_assert(sizeof(AllocKeyReq) == 24 && sizeof(AllocKeyRep) == 4 && sizeof(FreeKeyReq) == 4);
static_assert(sizeof(QpFatalEvent) == 8 && sizeof(OdpFaultEvent) == 24 && sizeof(CmParams) == 4);
static_assert(sizeof(CmListenReq) == 16 && sizeof(CmListenRep) == 4 && sizeof(CmUnlistenReq) == 8);
static_assert(sizeof(CmResolveReq) == 4 && sizeof(CmResolveRep) == 4);
static_assert(sizeof(CmConnectReq) == 96 && sizeof(CmConnectRep) == 4);
static_assert(sizeof(CmRequestEvent) == 104 && sizeof(CmAcceptReq) == 76);
static_assert(sizeof(CmRejectReq) == 64 && sizeof(CmConnReq) == 8 && sizeof(CmEvent) == 88);
static_assert(sizeof(CmRtuReq) == sizeof(CmConnReq) && sizeof(CmDisconnectReq) == sizeof(CmConnReq));

}  // namespace vrdma::proto
