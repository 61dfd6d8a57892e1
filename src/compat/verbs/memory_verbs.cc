// Protection domains and memory regions.
#include <errno.h>
#include <stdlib.h>

#include "compat/verbs/handles.h"

// verbs.h turns this into an inline wrapper; the library exports the real one.
#undef ibv_reg_mr
#undef ibv_reg_mr_iova

using namespace vrdma;
using namespace vrdma::compat;

VRDMA_EXPORT ibv_pd* ibv_alloc_pd(ibv_context* ctx) {
  auto* h = static_cast<PdHandle*>(calloc(1, sizeof(PdHandle)));
  if (!h) return fail<ibv_pd>(ENOMEM);
  h->engine = new Pd(*engine_of(ctx));
  h->engine->user = &h->ibv;
  h->ibv.context = ctx;
  h->ibv.handle = h->engine->id();
  return &h->ibv;
}

VRDMA_EXPORT int ibv_dealloc_pd(ibv_pd* pd) {
  auto* h = handle_of<PdHandle>(pd);
  delete h->engine;
  free(h);
  return 0;
}

VRDMA_EXPORT ibv_mr* ibv_reg_mr_iova2(ibv_pd* pd, void* addr, size_t length, uint64_t iova,
                                      unsigned int access) {
  access &= ~static_cast<unsigned>(IBV_ACCESS_OPTIONAL_RANGE);
  if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
      !(access & IBV_ACCESS_LOCAL_WRITE))
    return fail<ibv_mr>(EINVAL);
  Pd* p = engine_of(pd);
  auto* h = static_cast<MrHandle*>(calloc(1, sizeof(MrHandle)));
  if (!h) return fail<ibv_mr>(ENOMEM);
  LocalMr mr;
  if (int e = p->context().device().memory().reg(p->id(), addr, length, iova, access, mr)) {
    free(h);
    return fail<ibv_mr>(e);
  }
  h->pd = handle_of<PdHandle>(pd);
  h->ibv.context = pd->context;
  h->ibv.pd = pd;
  h->ibv.addr = addr;
  h->ibv.length = length;
  h->ibv.handle = mr.key;
  h->ibv.lkey = mr.key;
  h->ibv.rkey = mr.key;
  return &h->ibv;
}

VRDMA_EXPORT ibv_mr* ibv_reg_mr(ibv_pd* pd, void* addr, size_t length, int access) {
  return ibv_reg_mr_iova2(pd, addr, length, reinterpret_cast<uintptr_t>(addr),
                          static_cast<unsigned>(access));
}

VRDMA_EXPORT ibv_mr* ibv_reg_mr_iova(ibv_pd* pd, void* addr, size_t length, uint64_t iova,
                                     int access) {
  return ibv_reg_mr_iova2(pd, addr, length, iova, static_cast<unsigned>(access));
}

VRDMA_EXPORT ibv_mr* ibv_reg_dmabuf_mr(ibv_pd*, uint64_t, size_t, uint64_t, int, int) {
  return fail<ibv_mr>(EOPNOTSUPP);
}

VRDMA_EXPORT int ibv_rereg_mr(ibv_mr*, int, ibv_pd*, void*, size_t, int) { return EOPNOTSUPP; }

VRDMA_EXPORT int ibv_dereg_mr(ibv_mr* mr) {
  auto* h = handle_of<MrHandle>(mr);
  int e = engine_of(mr->pd)->context().device().memory().dereg(mr->lkey);
  if (e) return e;
  free(h);
  return 0;
}
