// UD multicast: a UD QP joins and leaves a multicast group of its tenant (engine/qp_mcast.cc).
// The LID is ignored: the port is RoCE.
#include <errno.h>

#include "compat/verbs/handles.h"

using namespace vrdma;
using namespace vrdma::compat;

VRDMA_EXPORT int ibv_attach_mcast(ibv_qp* qp, const ibv_gid* gid, uint16_t /*lid*/) {
  if (!qp || !gid) return EINVAL;
  return engine_of(qp)->attach_mcast(gid->raw);
}

VRDMA_EXPORT int ibv_detach_mcast(ibv_qp* qp, const ibv_gid* gid, uint16_t /*lid*/) {
  if (!qp || !gid) return EINVAL;
  return engine_of(qp)->detach_mcast(gid->raw);
}
