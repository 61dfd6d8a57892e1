// The responder's half of every operation: what a destination QP does with an incoming
// request. The library (destination on the same host) and the router (destination on this
// host, requester on another) both use it, so one routine decides every outcome:
//   admit_request()   checks the request against the destination, takes a receive if it needs
//                     one, executes atomics and says where the data goes (or comes from);
//   the caller moves the data (a memcpy here, a socket read in the router);
//   commit_request()  completes the receive, raises its event and counts.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>

#include "shm/layout.h"
#include "shm/peer.h"

namespace vrdma::shm {

struct Seg {
  uint8_t* p;
  uint64_t len;
};

// Copies `total` bytes from one scatter list to another. The last byte is stored last, after a
// release fence, so a reader polling it sees all the data.
void copy_segs(const Seg* dst, int nd, const Seg* src, int ns, uint64_t total);

struct Incoming {
  uint32_t opcode = 0;   // ibv_wr_opcode
  uint32_t qp_type = 0;  // the requester's (RC, UC, UD)
  uint32_t src_qpn = 0;
  uint32_t imm_data = 0;
  bool solicited = false;
  uint32_t rkey = 0;
  uint64_t remote_addr = 0;
  uint64_t compare_add = 0;
  uint64_t swap = 0;
  uint64_t length = 0;
  uint32_t qkey = 0;      // UD: the Q_Key the requester used
  uint32_t src_ipv4 = 0;  // UD: for the GRH (network order)
  uint32_t dst_ipv4 = 0;
};

enum class Admission : uint8_t {
  kDone,      // executed, or failed with `status`
  kRnr,       // RC: no receive posted; try again after the destination's RNR timer
  kNotReady,  // RC: the destination QP cannot receive yet (or is gone); try again
  kDrop,      // UC, UD: silently dropped, the requester completes successfully
};

struct Placement {
  Admission admission = Admission::kDone;
  ibv_wc_status status = IBV_WC_SUCCESS;  // the requester's completion status
  // SEND, WRITE: where the payload goes; READ: where it comes from. Cover `length` bytes.
  Seg segs[kMaxRecvSge];
  int nsegs = 0;
  // RC/UC SEND and WRITE: what each of segs was translated from (the key, the address, the
  // access asked), so that a placer can translate it again after the owner moved pages.
  struct Source {
    uint32_t key;
    uint32_t access;
    uint64_t addr;
  } src[kMaxRecvSge] = {};
  uint64_t atomic_old = 0;  // ATOMIC_*: the value before the operation
  bool recv_completion = false;
  bool count_rx = false;  // an RDMA WRITE without immediate: counted, not completed
  bool solicited = false;
  RecvReport report;  // the receive completion commit_request() pushes (no wr_id: an index)
};

void admit_request(const PeerQp& dst, const Incoming& in, Placement& out);
// After the data is in place (only for kDone with SUCCESS). false when the receive completion
// could not be delivered (the destination's ring is full or corrupt): the requester completes
// with REM_OP_ERR, as when a responder fails after taking a receive.
bool commit_request(const PeerQp& dst, const Placement& p, uint64_t length);

// Whether the destination QP can take requests.
bool peer_qp_ready(const PeerQp& p);

}  // namespace vrdma::shm
