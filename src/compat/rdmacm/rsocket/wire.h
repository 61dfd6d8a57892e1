// The rsocket wire protocol between two vrdma peers (it is vrdma's own, not upstream
// rsockets': a vrdma rsocket only ever talks to another vrdma rsocket).
//
// A connection is one RC QP pair set up by rdma_cm. Each side owns a receive *ring* of R bytes
// (a power of two, registered for remote write) and tells the other side where it is in the
// connection's private data (ConnData). Everything a side sends travels as
// RDMA WRITE WITH IMMEDIATE; the 32-bit immediate (network order) is an opcode in the top
// three bits and a value below:
//
//   kData   value = length: the payload was written into the peer's ring at the sender's
//           tail; it is part of the byte stream.
//   kIomap  an IomapEntry was written into the ring like data; the receiver applies it to its
//           table of the sender's IO mappings when it sees the completion (riomap).
//   kCredit value = bytes: the receiver freed that many bytes of its ring (no payload).
//   kFin    the sender will send no more (shutdown SHUT_WR); no payload.
//   kClose  the sender neither sends nor reads any more (shutdown SHUT_RDWR, close).
//
// Ring positions are implicit: both sides advance a message's start by advance(), which never
// crosses the ring's end (a sender splits data there) and is at least the receiver's *slot*,
// so the ring holds at most R / slot + 2 messages, which bounds the receives and the queue of
// unread messages the receiver needs. Ring space is freed in ring order, when the reader has
// consumed a message, and returned with kCredit once a quarter of the ring is free.
// riowrite is a plain RDMA WRITE into the peer's mapped buffer: it takes no ring space.
#pragma once

#include <arpa/inet.h>

#include <cstdint>

namespace vrdma::rsock {

enum class Op : uint32_t { kData = 0, kCredit = 1, kFin = 2, kClose = 3, kIomap = 4 };

inline constexpr uint32_t kOpShift = 29;
inline constexpr uint32_t kValueMask = (1u << kOpShift) - 1;
inline constexpr uint32_t kMaxRing = 1u << 28;  // a ring's size must fit in the value

inline uint32_t make_imm(Op op, uint32_t value) {
  return htonl(static_cast<uint32_t>(op) << kOpShift | (value & kValueMask));
}
inline Op imm_op(uint32_t imm_be) {
  return static_cast<Op>(ntohl(imm_be) >> kOpShift);
}
inline uint32_t imm_value(uint32_t imm_be) {
  return ntohl(imm_be) & kValueMask;
}

inline constexpr uint32_t kConnMagic = 0x56525331;  // "VRS1"
inline constexpr uint16_t kConnVersion = 1;

// The private data of the connect request and of the accept: where the sender's ring is.
struct ConnData {
  uint32_t magic;
  uint16_t version;
  uint16_t iomap_entries;  // how many IO mappings the sender accepts from its peer
  uint64_t ring_addr;
  uint32_t ring_rkey;
  uint32_t ring_size;  // R, a power of two
  uint32_t ring_slot;  // the least advance of one message, a multiple of 64
  uint32_t reserved;
};
static_assert(sizeof(ConnData) == 32, "fits in rdma_cm's 56 bytes of private data");

// An IO mapping as its owner announces it: the peer may write [offset, offset + length) of
// the mapping's offset space to addr with rkey. length 0 removes the mapping at `index`.
struct IomapEntry {
  uint64_t offset;
  uint64_t addr;
  uint64_t length;
  uint32_t rkey;
  uint32_t index;
};
static_assert(sizeof(IomapEntry) == 32);

inline constexpr uint32_t kAlign = 64;

// Where the next message starts after one of `len` bytes at a position `to_end` bytes before
// the ring's end (len <= to_end; both sides compute the same).
inline uint32_t advance(uint32_t len, uint32_t slot, uint32_t to_end) {
  uint32_t a = (len + kAlign - 1) & ~(kAlign - 1);
  if (a < slot) a = slot;
  return a < to_end ? a : to_end;
}

}  // namespace vrdma::rsock
