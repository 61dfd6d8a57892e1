// Implicit on-demand paging on the data path: a work request whose entries name an implicit MR
// goes on as a copy whose entries name the child registrations that cover them (made on demand
// by MemoryRegistry::fault_in), so that every later step (local checks, the router, a peer
// granted a receive buffer) sees ordinary MRs.
#pragma once

#include <infiniband/verbs.h>

#include "engine/memory.h"
#include "shm/layout.h"

namespace vrdma {

struct OdpSendCopy {
  ibv_send_wr wr;
  ibv_sge sge[shm::kMaxSendSge];
};
struct OdpRecvCopy {
  ibv_recv_wr wr;
  ibv_sge sge[shm::kMaxRecvSge];
};

// `wr` itself when no implicit MR exists or none of its entries names one, else `copy` filled
// with the entries resolved. Inline sends and lists longer than the device's maximum are
// returned as they are (the caller's own checks refuse the latter).
const ibv_send_wr& resolve_implicit(MemoryRegistry& mem, const ibv_send_wr& wr, OdpSendCopy& copy);
const ibv_recv_wr& resolve_implicit(MemoryRegistry& mem, const ibv_recv_wr& wr, OdpRecvCopy& copy);

}  // namespace vrdma
