// What processes share, and with whom. Every piece is a memfd of its own, sealed against
// shrinking and growing before anyone else maps it, and mapped by its readers at the size the
// file has (fstat), never at a size someone announced:
//
//   the arena        (one per client)   the owner and vrdmad only. Send queues for the router,
//                                       each QP's send-side state, the private completion rings
//                                       of the owner's CQs, the private tables of posted receives
//                                       (wr_id included) and the MR descriptors.
//   a QP object      (one per QP)       the owner, vrdmad and the peers that may reach the QP: an
//                                       RC/UC peer whose QP the QP's RTR named (and that named it),
//                                       any same-tenant UD sender for a UD QP. Published
//                                       attributes, the receive queue (without wr_id) and the ring
//                                       into which senders push receive completions.
//   an SRQ object    (one per SRQ)      as a QP object, for every QP that uses the SRQ.
//   the key table    (one per client)   read by every peer the owner granted anything: the
//                                       generation of each MR slot, so that a peer sees at once
//                                       that a mapping it holds was deregistered or replaced.
//                                       Sealed against new writable mappings.
//   MR backings      (memfds)           a peer gets one only through vrdmad, for an MR with remote
//                                       access (read-only unless REMOTE_WRITE or REMOTE_ATOMIC), or
//                                       for an MR that a receive posted on the QP it may reach
//                                       points into.
//
// Everything is addressed by offsets, never by pointers. A reader copies the geometry of a ring
// out of shared memory once, validates it against the file's size, and from then on masks every
// index with its private copy. Nothing a peer can write is trusted by the owner: a receive
// completion names an index, which the owner checks against its private table before it maps
// it back to the wr_id the application gave.
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace vrdma::shm {

inline constexpr uint32_t kArenaMagic = 0x414d4456;   // "VDMA"
inline constexpr uint32_t kObjectMagic = 0x4f4d4456;  // "VDMO"
inline constexpr uint32_t kKeyTableMagic = 0x4b4d4456;  // "VDMK"
inline constexpr uint32_t kArenaVersion = 4;
inline constexpr uint64_t kArenaSize = 256ull << 20;  // the library's: sparse, pages exist once touched
inline constexpr uint64_t kMaxArenaSize = 1ull << 30;    // the largest arena vrdmad maps
inline constexpr uint64_t kMaxObjectSize = 64ull << 20;  // the largest QP/SRQ object anyone maps
inline constexpr uint32_t kMrSlots = 4096;               // MR descriptors per client (slot 0 unused)
inline constexpr uint32_t kMaxMrSegments = 8;
inline constexpr uint32_t kMaxRecvSge = 32;
inline constexpr uint32_t kMaxSendSge = 32;
inline constexpr uint32_t kCacheLine = 64;
inline constexpr uint64_t kPage = 4096;

// File descriptor ids a client hands vrdmad (PutFd): 0 is the arena, 1 the key table; the others
// are chosen by the client.
inline constexpr uint32_t kArenaFdId = 0;
inline constexpr uint32_t kKeyTableFdId = 1;

// ---- the arena (the owner and vrdmad) ------------------------------------------------------

struct alignas(kCacheLine) ArenaHeader {
  uint32_t magic;
  uint32_t version;
  uint64_t size;
  uint32_t mr_table_offset;
  uint32_t mr_slots;
  uint32_t owner_client;
  uint32_t owner_pid;
  std::atomic<uint32_t> dead;  // set by vrdmad when the owner is gone
  // Bumped by vrdmad whenever a multicast membership of the owner's tenant changes on this
  // host: the owner's cached member lists are stale.
  std::atomic<uint32_t> mcast_gen;
  // How the owner keeps its other threads' writes while registered pages move
  // (engine/write_hold.h): a PageMoveGuard, written by the owner when it starts. vrdmad shows
  // it (vrdma status) and trusts it for nothing: only the owner's own memory is at stake.
  std::atomic<uint32_t> page_move_guard;
};

enum PageMoveGuard : uint32_t {
  kGuardUnknown = 0,    // not said (a client of the vrdma command)
  kGuardNone = 1,       // no userfaultfd: writes made while pages move can be lost
  kGuardUserOnly = 2,   // userfaultfd(2) for user mode only: a system call's write fails instead
  kGuardSyscall = 3,    // userfaultfd(2): every write waits for the move
  kGuardDevice = 4,     // /dev/userfaultfd: every write waits for the move
  kGuardThreads = 5,    // the other threads stop in a signal handler until the move is over
};

// One piece of an MR's backing: `length` bytes of memfd `fd_id` at `fd_offset`.
struct MrSegment {
  uint32_t fd_id;
  uint32_t reserved;
  uint64_t fd_offset;
  uint64_t length;
};

// A registered memory region as vrdmad reads it to answer a grant. The segments cover the
// page-aligned range [map_start, map_start + map_length) of the owner's address space in order;
// a peer maps them side by side and finds byte `iova + x` at base + (va - map_start) + x.
struct MrEntry {
  std::atomic<uint64_t> key_gen;  // key | generation << 32; 0 when the slot is free
  uint32_t access;
  uint32_t nseg;
  uint64_t iova;
  uint64_t length;
  uint64_t va;
  uint64_t map_start;
  uint64_t map_length;
  MrSegment seg[kMaxMrSegments];
};

// The owner's record of the receives it posted on one receive queue (a QP's or an SRQ's), one
// slot per ring position. Private to the owner and vrdmad (which reads it to decide whether a
// peer may be granted the memory a posted receive points into). `tag` is the receive's position
// + 1 while it is outstanding, 0 when the slot is free.
struct RecvSlot {
  std::atomic<uint64_t> tag;
  uint64_t wr_id;
  uint32_t num_sge;
  uint32_t length;  // bytes the receive can take
  ibv_sge sge[];
};
struct alignas(kCacheLine) RecvTable {
  uint32_t capacity;  // power of two, as the receive queue's
  uint32_t max_sge;
  uint32_t slot_size;
  uint32_t reserved;
  alignas(kCacheLine) unsigned char slots[];
};
inline constexpr uint32_t recv_slot_size(uint32_t max_sge) {
  uint32_t n = static_cast<uint32_t>(sizeof(RecvSlot) + max_sge * sizeof(ibv_sge));
  return (n + 7) & ~7u;
}

struct alignas(kCacheLine) Cqe {
  std::atomic<uint64_t> seq;
  ibv_wc wc;
};
static_assert(sizeof(Cqe) == 64);

// A CQ's private ring: the owner's own completions (send completions, flushes) and the router's
// (routed work of this client's QPs). Producers: the owner, vrdmad. Consumer: the owner, which
// keeps its position privately (`head` is informational).
struct alignas(kCacheLine) CqShared {
  uint32_t capacity;             // power of two
  uint32_t channel_fd_id;        // 0: no completion channel; else the eventfd that wakes it
  std::atomic<uint32_t> armed;   // 1: next completion raises an event; 2: solicited only
  std::atomic<uint32_t> events;  // unused (kept for the layout)
  std::atomic<uint32_t> overflow;  // a producer found the queue full
  alignas(kCacheLine) std::atomic<uint64_t> head;
  alignas(kCacheLine) std::atomic<uint64_t> tail;
  alignas(kCacheLine) Cqe entries[];
};

// Counters written on the data path, plain per-QP counters that vrdmad reads (status, metrics):
// relaxed loads and stores by their one writer, no lock, no system call.
//   line 0: the send side, written by the owner (or the router for work it carries), and
//           `dropped`, written by whoever polls the receive CQ.
//   line 1: receive completions by status, written by whoever polls the receive CQ (one CQ's
//           poll lock covers it).
//   line 2: successful send-side work by operation class (kOpClass*), the owner or the router.
//   lines 3-5: send-side completions by ibv_wc_status (statuses above the table count in the
//           last slot), the owner or the router.
enum OpClass : uint32_t { kOpSend = 0, kOpWrite = 1, kOpRead = 2, kOpAtomic = 3, kOpClasses = 4 };
inline constexpr uint32_t kWcStatusSlots = 24;  // IBV_WC_SUCCESS .. IBV_WC_TM_RNDV_INCOMPLETE
struct QpCounters {
  alignas(kCacheLine) std::atomic<uint64_t> tx_ops;
  std::atomic<uint64_t> tx_bytes;
  std::atomic<uint64_t> errors;   // send-side completions in error
  std::atomic<uint64_t> dropped;  // receive completions a peer forged or repeated, dropped
  std::atomic<uint64_t> rnr_retries;                  // a request tried again after an RNR NAK
  std::atomic<uint64_t> transport_retries;            // ... after the local ACK timeout (no answer)
  alignas(kCacheLine) std::atomic<uint64_t> recv_ok;  // receive completions: SUCCESS
  std::atomic<uint64_t> recv_len_err;                 // LOC_LEN_ERR
  std::atomic<uint64_t> recv_prot_err;                // LOC_PROT_ERR
  alignas(kCacheLine) std::atomic<uint64_t> class_ops[kOpClasses];
  std::atomic<uint64_t> class_bytes[kOpClasses];
  alignas(kCacheLine) std::atomic<uint64_t> completions[kWcStatusSlots];
};

// One more of a counter that has one writer: a plain load and store, no locked instruction.
inline void bump(std::atomic<uint64_t>& c, uint64_t n = 1) {
  c.store(c.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
}

inline uint32_t op_class(uint32_t wr_opcode) {
  switch (wr_opcode) {
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
      return kOpWrite;
    case IBV_WR_RDMA_READ:
      return kOpRead;
    case IBV_WR_ATOMIC_CMP_AND_SWP:
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
      return kOpAtomic;
    default:
      return kOpSend;
  }
}

// A send-side work request finished with `status` (the owner's or the router's completion).
inline void count_send_completion(QpCounters& c, uint32_t wr_opcode, uint32_t status,
                                  uint64_t byte_len) {
  bump(c.completions[status < kWcStatusSlots ? status : kWcStatusSlots - 1]);
  if (status == IBV_WC_SUCCESS) {
    bump(c.tx_ops);
    bump(c.tx_bytes, byte_len);
    uint32_t k = op_class(wr_opcode);
    bump(c.class_ops[k]);
    bump(c.class_bytes[k], byte_len);
  } else {
    c.errors.fetch_add(1, std::memory_order_relaxed);
  }
}

// A QP's send side and the owner's authoritative state, in the arena (the owner and vrdmad).
struct alignas(kCacheLine) QpShared {
  std::atomic<uint32_t> state;  // enum ibv_qp_state
  std::atomic<uint32_t> gone;   // set by vrdmad when the owner is gone
  uint32_t qpn;
  uint32_t qp_type;
  std::atomic<uint32_t> access;  // qp_access_flags for incoming RDMA and atomics
  std::atomic<uint32_t> qkey;
  uint32_t recv_table_offset;  // RecvTable of its receive queue or of its SRQ
  uint32_t recv_cq_offset;     // CqShared
  uint32_t send_cq_offset;     // CqShared
  std::atomic<uint32_t> min_rnr_timer;
  uint32_t sq_offset;  // SendQueue for work the router carries (another host)
  // What the router needs to carry the QP's work as the QP's attributes say.
  std::atomic<uint32_t> timeout;  // local ACK timeout exponent (4.096 us << timeout)
  std::atomic<uint32_t> retry_cnt;
  std::atomic<uint32_t> rnr_retry;
  uint32_t sq_sig_all;
  // From the QP's address (ah_attr at RTR): SL << 8 | GRH traffic class; the router's QoS class.
  std::atomic<uint32_t> traffic_class;
  QpCounters counters;
};

// A work request a QP hands to the router because its destination is on another host. The
// owner writes it; the router copies it out and validates it before use.
struct RouteWqe {
  uint64_t wr_id;
  uint32_t opcode;      // ibv_wr_opcode
  uint32_t send_flags;  // ibv_send_flags
  uint32_t imm_data;    // as the application gave it (network order)
  uint32_t num_sge;     // gather entries; 0 with inline data
  uint32_t rkey;
  uint32_t status;  // nonzero: the owner found it bad; complete with this ibv_wc_status
  uint64_t remote_addr;
  uint64_t compare_add;
  uint64_t swap;
  uint32_t ud_qpn;  // UD destination
  uint32_t ud_qkey;
  uint8_t dgid[16];     // UD destination (::ffff:a.b.c.d)
  uint32_t inline_len;  // inline bytes, stored after the gather list
  uint32_t xrc_srqn;    // XRC_SEND: the destination SRQ (wr.qp_type.xrc.remote_srqn)
  ibv_sge sge[];  // [max_sge] then [max_inline] bytes
};

// The queue of RouteWqe of one QP: one producer (the owner), one consumer (the router),
// which completes entries in order into the QP's send CQ and then advances `done`.
struct alignas(kCacheLine) SendQueue {
  uint32_t capacity;  // power of two
  uint32_t entry_size;
  uint32_t max_sge;
  uint32_t max_inline;
  alignas(kCacheLine) std::atomic<uint64_t> tail;  // owner
  // Set by a router about to sleep: the owner rings the router's doorbell after posting.
  std::atomic<uint32_t> doorbell;
  alignas(kCacheLine) std::atomic<uint64_t> done;  // router
  alignas(kCacheLine) unsigned char entries[];
};

inline constexpr uint32_t route_wqe_size(uint32_t max_sge, uint32_t max_inline) {
  uint32_t n = static_cast<uint32_t>(sizeof(RouteWqe) + max_sge * sizeof(ibv_sge) + max_inline);
  return (n + kCacheLine - 1) & ~(kCacheLine - 1);
}

// ---- QP and SRQ objects (the owner, vrdmad, the peers that may reach the QP) ------------

// A ring of receive work requests (a QP's receive queue or an SRQ). The owner produces, the
// senders consume with one compare-and-swap on `head`; cells carry sequence numbers so that
// several consumers in several processes can take entries safely. Entries name the memory the
// data goes to, never the application's wr_id.
struct alignas(kCacheLine) RecvQueue {
  uint32_t capacity;  // power of two
  uint32_t max_sge;
  uint32_t entry_size;
  uint32_t reserved;
  alignas(kCacheLine) std::atomic<uint64_t> head;  // consumers
  alignas(kCacheLine) std::atomic<uint64_t> tail;  // published by the owner (informational)
  alignas(kCacheLine) unsigned char entries[];
};

struct RecvEntry {
  std::atomic<uint64_t> seq;
  uint32_t num_sge;
  uint32_t reserved;
  ibv_sge sge[];
};

// Whole cache lines per entry: the owner writing one entry never takes the line from under a
// sender reading its neighbour.
inline constexpr uint32_t recv_entry_size(uint32_t max_sge) {
  uint32_t n = static_cast<uint32_t>(sizeof(RecvEntry) + max_sge * sizeof(ibv_sge));
  return (n + kCacheLine - 1) & ~(kCacheLine - 1);
}

// A receive completion as a sender reports it. It carries no wr_id: `index` is the position of
// the receive it consumed in the receive queue (the QP's or the SRQ's), which the owner checks
// against its private table. Everything else is validated or overridden by the owner.
// kRecvInv: a SEND_WITH_INV; imm_data holds the rkey the receiver's owner is to invalidate.
// kRecvMore: the sender had more requests queued behind this message (set by the router from
// wire::kMoreQueued; a hint for the receiver's poller, engine/poll_backoff.h).
enum RecvCqeFlags : uint8_t { kRecvImm = 1, kRecvGrh = 2, kRecvInv = 4, kRecvMore = 8 };
enum RecvCqeStatus : uint8_t { kRecvOk = 0, kRecvLenErr = 1, kRecvProtErr = 2 };
enum RecvCqeOpcode : uint8_t { kRecvSend = 0, kRecvWriteImm = 1 };
struct alignas(64) RecvCqe {
  std::atomic<uint64_t> seq;
  uint64_t index;
  uint32_t byte_len;
  uint32_t imm_data;
  uint32_t src_qp;
  uint8_t opcode;  // RecvCqeOpcode
  uint8_t status;  // RecvCqeStatus
  uint8_t flags;   // RecvCqeFlags
  uint8_t reserved;
  uint32_t dst_qp;  // the QP the request came through (an XRC SRQ's: the XRC_RECV QP)
};

// The ring of one QP's receive completions. Producers: the senders (peers, the router). One
// consumer: the owner, which keeps its position privately. `armed` works like CqShared::armed.
struct alignas(kCacheLine) RecvRing {
  uint32_t capacity;  // power of two
  std::atomic<uint32_t> armed;
  alignas(kCacheLine) std::atomic<uint64_t> tail;
  alignas(kCacheLine) RecvCqe entries[];
};

// The attributes senders read to decide what happens to a request. Written by the owner (state,
// gone also by vrdmad); a peer that scribbles on them fools only itself and the other senders of
// the same QP.
struct QpAttrs {
  std::atomic<uint32_t> state;  // enum ibv_qp_state
  std::atomic<uint32_t> gone;   // the QP was destroyed, reset (this object retired) or its owner died
  uint32_t qpn;
  uint32_t qp_type;
  std::atomic<uint32_t> access;  // qp_access_flags
  std::atomic<uint32_t> qkey;
  std::atomic<uint32_t> min_rnr_timer;
  uint32_t pd;
};

enum class ObjectKind : uint32_t { kQp = 1, kSrq = 2 };

struct alignas(kCacheLine) ObjectHeader {
  uint32_t magic;    // kObjectMagic
  uint32_t version;  // kArenaVersion
  uint32_t kind;     // ObjectKind
  uint32_t owner_client;
  uint64_t size;  // of the file
  // QP objects: where the receive queue is (0: the QP uses the SRQ whose object is srq_fd_id),
  // the ring of receive completions, and the eventfd that wakes the owner's completion channel
  // (0: none). SRQ objects: rq_offset only.
  uint32_t rq_offset;
  uint32_t srq_fd_id;
  uint32_t ring_offset;
  uint32_t notify_fd_id;
};

struct alignas(kCacheLine) QpObject {
  ObjectHeader hdr;
  alignas(kCacheLine) QpAttrs attrs;
  // Written by the senders.
  alignas(kCacheLine) std::atomic<uint64_t> rx_ops;  // SENDs and WRITEs that landed
  std::atomic<uint64_t> rx_bytes;                    // their payload bytes
  std::atomic<uint64_t> rx_requests[kOpClasses];     // requests executed here, by OpClass
};

// ---- the key table (read-only for peers) ---------------------------------------------------

struct alignas(kCacheLine) KeyTable {
  uint32_t magic;  // kKeyTableMagic
  uint32_t version;
  uint32_t slots;  // kMrSlots
  // Odd while the owner moves pages of registered memory to another file (split, replace):
  // +1 before the copy, +1 once the new backings are published. Whoever placed data through a
  // mapping it translated before a move can tell, and place it again (vrdmad's router).
  std::atomic<uint32_t> moves;
  // 1: the owner issues a heavy fence (asym_fence.h) after each increment of moves, so that a
  // reader registered for them needs no fence of its own between its placement and its read.
  uint32_t heavy_fence;
  alignas(kCacheLine) std::atomic<uint32_t> gen[kMrSlots];  // changes on every reg, dereg, move
};

// Every process that maps these reads them with this exact layout: pin sizes and the
// cache-line placement of the fields that producers and consumers write from different
// processes.
static_assert(sizeof(ArenaHeader) == 64 && sizeof(MrSegment) == 24 && sizeof(MrEntry) == 248);
static_assert(sizeof(RecvSlot) == 24 && sizeof(RecvTable) == 64);
static_assert(sizeof(RecvQueue) == 192 && offsetof(RecvQueue, head) == 64 &&
              offsetof(RecvQueue, tail) == 128 && offsetof(RecvQueue, entries) == 192);
static_assert(sizeof(RecvEntry) == 16 && sizeof(Cqe) == 64 && sizeof(RecvCqe) == 64);
static_assert(sizeof(RecvRing) == 128 && offsetof(RecvRing, tail) == 64 &&
              offsetof(RecvRing, entries) == 128);
static_assert(sizeof(CqShared) == 192 && offsetof(CqShared, head) == 64 &&
              offsetof(CqShared, tail) == 128 && offsetof(CqShared, entries) == 192);
static_assert(sizeof(QpCounters) == 384 && offsetof(QpCounters, recv_ok) == 64 &&
              offsetof(QpCounters, class_ops) == 128 && offsetof(QpCounters, completions) == 192);
static_assert(sizeof(QpShared) == 448 && offsetof(QpShared, counters) == 64);
static_assert(sizeof(QpAttrs) == 32 && sizeof(ObjectHeader) == 64);
static_assert(sizeof(QpObject) == 192 && offsetof(QpObject, attrs) == 64 &&
              offsetof(QpObject, rx_ops) == 128);
static_assert(offsetof(KeyTable, gen) == 64 && sizeof(KeyTable) == 64 + 4 * kMrSlots);
static_assert(sizeof(RouteWqe) == 88 && offsetof(RouteWqe, sge) == 88);
static_assert(sizeof(SendQueue) == 192 && offsetof(SendQueue, tail) == 64 &&
              offsetof(SendQueue, done) == 128 && offsetof(SendQueue, entries) == 192);
static_assert(std::atomic<uint64_t>::is_always_lock_free &&
              std::atomic<uint32_t>::is_always_lock_free);

// Offsets read from a shared file must point inside it with room for `bytes` (and past the
// first cache line, which is the header).
inline bool offset_ok(uint64_t file_size, uint64_t offset, uint64_t bytes) {
  return offset >= kCacheLine && offset < file_size && bytes <= file_size - offset;
}

}  // namespace vrdma::shm
