// What a work request means, independent of who carries it: which opcodes a QP type may post,
// which carry data one way or the other, the completion opcode a requester reports, and the
// RDMA timers (RNR NAK timer, local ACK timeout). The library (same host) and the router
// (across hosts) both use these, so a request behaves the same whichever path it takes.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>

namespace vrdma::shm {

inline bool is_atomic(uint32_t opcode) {
  return opcode == IBV_WR_ATOMIC_CMP_AND_SWP || opcode == IBV_WR_ATOMIC_FETCH_AND_ADD;
}

// SEND and WRITE carry their payload from requester to responder.
inline bool carries_data(uint32_t opcode) {
  return opcode == IBV_WR_SEND || opcode == IBV_WR_SEND_WITH_IMM ||
         opcode == IBV_WR_SEND_WITH_INV || opcode == IBV_WR_RDMA_WRITE ||
         opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
}

// READ and atomics bring data back into the requester's memory.
inline bool returns_data(uint32_t opcode) {
  return opcode == IBV_WR_RDMA_READ || is_atomic(opcode);
}

inline bool has_immediate(uint32_t opcode) {
  return opcode == IBV_WR_SEND_WITH_IMM || opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
}

// Whether a QP of `qp_type` may send `opcode` to a responder: SEND everywhere, WRITE and
// SEND_WITH_INV on RC and UC, READ and atomics on RC only.
inline bool opcode_allowed(uint32_t qp_type, uint32_t opcode) {
  if (qp_type == IBV_QPT_XRC_SEND) qp_type = IBV_QPT_RC;  // RC's operations, to an XRC SRQ
  else if (qp_type != IBV_QPT_RC && qp_type != IBV_QPT_UC && qp_type != IBV_QPT_UD) return false;
  switch (opcode) {
    case IBV_WR_SEND:
    case IBV_WR_SEND_WITH_IMM:
      return true;
    case IBV_WR_SEND_WITH_INV:
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
      return qp_type != IBV_QPT_UD;
    case IBV_WR_RDMA_READ:
    case IBV_WR_ATOMIC_CMP_AND_SWP:
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
      return qp_type == IBV_QPT_RC;
    default:
      return false;
  }
}

// Work requests that never leave the requester: binding a memory window (type 2) and
// invalidating one (LOCAL_INV), on RC and UC QPs.
inline bool is_local_memory_op(uint32_t qp_type, uint32_t opcode) {
  return (opcode == IBV_WR_BIND_MW || opcode == IBV_WR_LOCAL_INV) &&
         (qp_type == IBV_QPT_RC || qp_type == IBV_QPT_UC);
}

// The opcode of the requester's completion for a work request.
inline ibv_wc_opcode completion_opcode(uint32_t opcode) {
  switch (opcode) {
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
      return IBV_WC_RDMA_WRITE;
    case IBV_WR_RDMA_READ:
      return IBV_WC_RDMA_READ;
    case IBV_WR_ATOMIC_CMP_AND_SWP:
      return IBV_WC_COMP_SWAP;
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
      return IBV_WC_FETCH_ADD;
    case IBV_WR_BIND_MW:
      return IBV_WC_BIND_MW;
    case IBV_WR_LOCAL_INV:
      return IBV_WC_LOCAL_INV;
    default:
      return IBV_WC_SEND;
  }
}

// The RNR NAK timer a min_rnr_timer code stands for (the IB table, in ns).
int64_t rnr_timer_ns(uint32_t code);

// The local ACK timeout of a QP's `timeout` attribute: 4.096 us << timeout; 0 (infinite) is
// taken as one second per try.
int64_t ack_timeout_ns(uint32_t timeout);

}  // namespace vrdma::shm
