// Memory windows: ibv_alloc_mw, ibv_dealloc_mw and ibv_bind_mw, which verbs.h inlines as calls
// through the context's operations. A bind is a work request (BIND_MW) that the engine runs in
// order with the QP's other requests; type 2 windows are bound by ibv_post_send or
// ibv_wr_bind_mw, type 1 windows by ibv_bind_mw only.
#include <errno.h>
#include <stdlib.h>

#include "compat/verbs/handles.h"
#include "engine/memory.h"

using namespace vrdma;
using namespace vrdma::compat;

namespace vrdma::compat {

namespace {

MemoryRegistry& memory_of(ibv_pd* pd) {
  return engine_of(pd)->context().device().memory();
}

ibv_mw* alloc_mw(ibv_pd* pd, ibv_mw_type type) {
  if (type != IBV_MW_TYPE_1 && type != IBV_MW_TYPE_2) return fail<ibv_mw>(EOPNOTSUPP);
  auto* mw = static_cast<Mw*>(calloc(1, sizeof(Mw)));
  if (!mw) return fail<ibv_mw>(ENOMEM);
  uint32_t key = 0, slot = 0;
  if (int e = memory_of(pd).alloc_window(engine_of(pd)->id(), type, key, slot)) {
    free(mw);
    return fail<ibv_mw>(e);
  }
  mw->slot = slot;
  mw->ibv.context = pd->context;
  mw->ibv.pd = pd;
  mw->ibv.rkey = key;
  mw->ibv.handle = key;
  mw->ibv.type = type;
  return &mw->ibv;
}

int dealloc_mw(ibv_mw* m) {
  auto* mw = reinterpret_cast<Mw*>(m);
  if (int e = memory_of(m->pd).free_window(mw->slot)) return e;
  free(mw);
  return 0;
}

// Type 1: the next key (its low byte moved on, as ibv_inc_rkey does), set in mw->rkey when the
// bind has run.
int bind_mw(ibv_qp* qp, ibv_mw* mw, ibv_mw_bind* bind) {
  if (!qp || !mw || !bind || qp->pd != mw->pd) return EINVAL;
  ibv_send_wr wr{};
  wr.wr_id = bind->wr_id;
  wr.opcode = IBV_WR_BIND_MW;
  wr.send_flags = bind->send_flags | kSendBindType1;
  wr.bind_mw.mw = mw;
  wr.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
  wr.bind_mw.bind_info = bind->bind_info;
  ibv_send_wr* bad = nullptr;
  return engine_of(qp)->post_send(&wr, &bad);
}

}  // namespace

void install_window_ops(ibv_context& c) {
  c.ops.alloc_mw = alloc_mw;
  c.ops.dealloc_mw = dealloc_mw;
  c.ops.bind_mw = bind_mw;
}

}  // namespace vrdma::compat
