// Layout of a client's arena: the one shared-memory segment (a memfd) that holds
// every queue, completion queue and MR descriptor of one client process.
//
// The owner writes it; same-host peers of the same trust domain map it and
// execute work requests against it; vrdmad maps it to read counters and to mark
// a dead client's QPs as gone. Everything is addressed by offsets from the
// arena base, never by pointers, and every offset, index and count read from an
// arena that another process can write is validated before use.
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace vrdma::shm {

inline constexpr uint32_t kArenaMagic = 0x414d4456;  // "VDMA"
inline constexpr uint32_t kArenaVersion = 2;
inline constexpr uint64_t kArenaSize = 256ull << 20;  // sparse: pages exist only once touched
inline constexpr uint32_t kMrSlots = 4096;            // key = random << 12 | slot
inline constexpr uint32_t kMrSlotBits = 12;
inline constexpr uint32_t kMaxMrSegments = 8;
inline constexpr uint32_t kMaxRecvSge = 32;
inline constexpr uint32_t kMaxSendSge = 32;
inline constexpr uint32_t kCacheLine = 64;
static_assert((1u << kMrSlotBits) == kMrSlots);

struct alignas(kCacheLine) ArenaHeader {
  uint32_t magic;
  uint32_t version;
  uint64_t size;
  uint32_t mr_table_offset;
  uint32_t mr_slots;
  uint32_t owner_client;
  uint32_t owner_pid;
  std::atomic<uint32_t> dead;  // set by vrdmad when the owner is gone
};

// One piece of an MR's backing: `length` bytes of memfd `fd_id` at `fd_offset`.
struct MrSegment {
  uint32_t fd_id;
  uint32_t reserved;
  uint64_t fd_offset;
  uint64_t length;
};

// A registered memory region as peers see it. The segments cover the
// page-aligned range [map_start, map_start + map_length) of the owner's address
// space in order; a peer maps them side by side and finds byte `iova + x` at
// base + (va - map_start) + x.
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

// A ring of receive work requests (a QP's receive queue or an SRQ). The owner
// produces, any connected sender consumes; cells carry sequence numbers so that
// several consumers in several processes can take entries safely.
struct alignas(kCacheLine) RecvQueue {
  uint32_t capacity;  // power of two
  uint32_t max_sge;
  uint32_t entry_size;
  uint32_t is_srq;
  std::atomic<uint32_t> limit;                     // SRQ limit; 0 = not armed
  alignas(kCacheLine) std::atomic<uint64_t> head;  // consumers
  alignas(kCacheLine) std::atomic<uint64_t> tail;  // producer
  alignas(kCacheLine) unsigned char entries[];
};

struct RecvEntry {
  std::atomic<uint64_t> seq;
  uint64_t wr_id;
  uint32_t num_sge;
  uint32_t reserved;
  ibv_sge sge[];
};

// Whole cache lines per entry: the owner writing one entry never takes the
// line from under a sender reading its neighbour.
inline constexpr uint32_t recv_entry_size(uint32_t max_sge) {
  uint32_t n = static_cast<uint32_t>(sizeof(RecvEntry) + max_sge * sizeof(ibv_sge));
  return (n + kCacheLine - 1) & ~(kCacheLine - 1);
}

struct alignas(kCacheLine) Cqe {
  std::atomic<uint64_t> seq;
  ibv_wc wc;
};
static_assert(sizeof(Cqe) == 64);

// A completion queue: many producers (the owner for its send completions, peers
// for receive completions), one consumer (the owner).
struct alignas(kCacheLine) CqShared {
  uint32_t capacity;               // power of two
  uint32_t channel_fd_id;          // 0: no completion channel
  std::atomic<uint32_t> armed;     // 1: next completion raises an event; 2: solicited only
  std::atomic<uint32_t> events;    // events raised and not yet taken by ibv_get_cq_event
  std::atomic<uint32_t> overflow;  // a producer found the queue full
  alignas(kCacheLine) std::atomic<uint64_t> head;
  alignas(kCacheLine) std::atomic<uint64_t> tail;
  alignas(kCacheLine) Cqe entries[];
};

// Counters written on the data path: the owner's on one cache line, the
// senders' on another, and neither on the line that peers read per operation.
struct QpCounters {
  alignas(kCacheLine) std::atomic<uint64_t> tx_ops;  // written by the owner
  std::atomic<uint64_t> tx_bytes;
  std::atomic<uint64_t> errors;
  alignas(kCacheLine) std::atomic<uint64_t> rx_ops;  // written by senders
  std::atomic<uint64_t> rx_bytes;
};

struct alignas(kCacheLine) QpShared {
  std::atomic<uint32_t> state;  // enum ibv_qp_state
  std::atomic<uint32_t> gone;   // set by vrdmad when the owner is gone
  uint32_t qpn;
  uint32_t qp_type;
  std::atomic<uint32_t> access;  // qp_access_flags for incoming RDMA and atomics
  std::atomic<uint32_t> qkey;
  uint32_t rq_offset;       // RecvQueue: its own or its SRQ's
  uint32_t recv_cq_offset;  // CqShared
  uint32_t send_cq_offset;  // CqShared
  std::atomic<uint32_t> min_rnr_timer;
  uint32_t sq_offset;  // SendQueue for work the router carries (another host)
  // What the router needs to carry the QP's work as the QP's attributes say.
  std::atomic<uint32_t> timeout;  // local ACK timeout exponent (4.096 us << timeout)
  std::atomic<uint32_t> retry_cnt;
  std::atomic<uint32_t> rnr_retry;
  uint32_t sq_sig_all;
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
  uint32_t reserved;
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

// Every process that maps an arena reads it with this exact layout: pin sizes and the cache-line
// placement of the fields that producers and consumers write from different processes.
static_assert(sizeof(ArenaHeader) == 64 && sizeof(MrSegment) == 24 && sizeof(MrEntry) == 248);
static_assert(sizeof(RecvQueue) == 192 && offsetof(RecvQueue, head) == 64 &&
              offsetof(RecvQueue, tail) == 128 && offsetof(RecvQueue, entries) == 192);
static_assert(sizeof(RecvEntry) == 24 && sizeof(Cqe) == 64);
static_assert(sizeof(CqShared) == 192 && offsetof(CqShared, head) == 64 &&
              offsetof(CqShared, tail) == 128 && offsetof(CqShared, entries) == 192);
static_assert(sizeof(QpCounters) == 128 && offsetof(QpCounters, rx_ops) == 64);
static_assert(sizeof(QpShared) == 192 && offsetof(QpShared, counters) == 64);
static_assert(sizeof(RouteWqe) == 88 && offsetof(RouteWqe, sge) == 88);
static_assert(sizeof(SendQueue) == 192 && offsetof(SendQueue, tail) == 64 &&
              offsetof(SendQueue, done) == 128 && offsetof(SendQueue, entries) == 192);
static_assert(std::atomic<uint64_t>::is_always_lock_free &&
              std::atomic<uint32_t>::is_always_lock_free);

// Offsets read from a peer's arena must point inside it with room for `bytes`.
inline bool offset_ok(uint64_t arena_size, uint64_t offset, uint64_t bytes) {
  return offset >= sizeof(ArenaHeader) && offset < arena_size && bytes <= arena_size - offset;
}

}  // namespace vrdma::shm
