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

namespace vrdma::shm {

inline constexpr uint32_t kArenaMagic = 0x414d4456;  // "VDMA"
inline constexpr uint32_t kArenaVersion = 1;
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
  std::atomic<uint32_t> limit;  // SRQ limit; 0 = not armed
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
  uint32_t capacity;  // power of two
  uint32_t channel_fd_id;  // 0: no completion channel
  std::atomic<uint32_t> armed;      // 1: next completion raises an event; 2: solicited only
  std::atomic<uint32_t> events;     // events raised and not yet taken by ibv_get_cq_event
  std::atomic<uint32_t> overflow;   // a producer found the queue full
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
  QpCounters counters;
};

// Offsets read from a peer's arena must point inside it with room for `bytes`.
inline bool offset_ok(uint64_t arena_size, uint64_t offset, uint64_t bytes) {
  return offset >= sizeof(ArenaHeader) && offset < arena_size && bytes <= arena_size - offset;
}

}  // namespace vrdma::shm
