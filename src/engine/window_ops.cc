// The work requests that act on memory windows, executed by the requester in order with its
// other requests: BIND_MW (type 2 through ibv_post_send, type 1 through ibv_bind_mw) and
// LOCAL_INV. On success the window's ibv_mw carries its new key.
#include "engine/memory.h"
#include "engine/objects.h"
#include "engine/qp.h"

namespace vrdma {

ibv_wc_status Qp::memory_op(const ibv_send_wr& wr) {
  MemoryRegistry& mem = pd_->context().device().memory();
  if (wr.opcode == IBV_WR_LOCAL_INV)
    return mem.invalidate_window(wr.invalidate_rkey, pd_->id()) == 0 ? IBV_WC_SUCCESS
                                                                     : IBV_WC_MW_BIND_ERR;
  ibv_mw* m = wr.bind_mw.mw;
  if (!m || m->context != pd_->context().user) return IBV_WC_MW_BIND_ERR;
  auto* mw = reinterpret_cast<Mw*>(m);
  const ibv_mw_bind_info& b = wr.bind_mw.bind_info;
  const uint32_t type = (wr.send_flags & kSendBindType1) ? IBV_MW_TYPE_1 : IBV_MW_TYPE_2;
  if (b.length && !b.mr) return IBV_WC_MW_BIND_ERR;
  if (mem.bind_window(mw->slot, type, pd_->id(), wr.bind_mw.rkey, b.mr ? b.mr->lkey : 0, b.addr,
                      b.length, b.mw_access_flags) != 0)
    return IBV_WC_MW_BIND_ERR;
  m->rkey = wr.bind_mw.rkey;
  return IBV_WC_SUCCESS;
}

}  // namespace vrdma
