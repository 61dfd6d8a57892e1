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
  if (h->parent_of) {  // a parent domain: the PD it stands for stays
    free(h);
    return 0;
  }
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
  // Implicit ODP: the whole address space, its ranges registered as they are used (the
  // engine's implicit_odp.cc).
  const bool implicit = !addr && length == SIZE_MAX;
  if (implicit && (!(access & IBV_ACCESS_ON_DEMAND) || iova != 0)) return fail<ibv_mr>(EINVAL);
  Pd* p = engine_of(pd);
  auto* h = static_cast<MrHandle*>(calloc(1, sizeof(MrHandle)));
  if (!h) return fail<ibv_mr>(ENOMEM);
  LocalMr mr;
  MemoryRegistry& mem = p->context().device().memory();
  if (int e = implicit ? mem.reg_implicit(p->id(), access, mr)
                       : mem.reg(p->id(), addr, length, iova, access, mr)) {
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

// Keeps the MR's keys (peers that know its rkey keep using it) and changes what the flags say:
// its range (the iova becomes the new address), its PD, its access. Works as a new
// registration that takes the key over from the old one, which is then gone; on failure the MR
// stays as it was (IBV_REREG_MR_ERR_INPUT, errno set).
VRDMA_EXPORT int ibv_rereg_mr(ibv_mr* mr, int flags, ibv_pd* pd, void* addr, size_t length,
                              int access) {
  auto bad = [](int e) {
    errno = e;
    return static_cast<int>(IBV_REREG_MR_ERR_INPUT);
  };
  if (!mr || flags == 0 || (flags & ~IBV_REREG_MR_FLAGS_SUPPORTED)) return bad(EINVAL);
  if (handle_of<MrHandle>(mr)->dm) return bad(EINVAL);  // device memory stays where it is
  if (!mr->addr && mr->length == SIZE_MAX) return bad(EINVAL);  // an implicit MR stays whole
  if ((flags & IBV_REREG_MR_CHANGE_TRANSLATION) && (!addr || length == 0)) return bad(EINVAL);
  if ((flags & IBV_REREG_MR_CHANGE_PD) && (!pd || pd->context != mr->context))
    return bad(EINVAL);
  MemoryRegistry& mem = engine_of(mr->pd)->context().device().memory();
  const LocalMr* cur = mem.find(mr->lkey);
  if (!cur) return bad(EINVAL);
  ibv_pd* new_pd = (flags & IBV_REREG_MR_CHANGE_PD) ? pd : mr->pd;
  void* new_addr = mr->addr;
  size_t new_length = mr->length;
  uint64_t iova = cur->iova;
  if (flags & IBV_REREG_MR_CHANGE_TRANSLATION) {
    new_addr = addr;
    new_length = length;
    iova = reinterpret_cast<uintptr_t>(addr);
  }
  unsigned new_access = cur->access;
  if (flags & IBV_REREG_MR_CHANGE_ACCESS) {
    new_access = static_cast<unsigned>(access) & ~static_cast<unsigned>(IBV_ACCESS_OPTIONAL_RANGE);
    if ((new_access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
        !(new_access & IBV_ACCESS_LOCAL_WRITE))
      return bad(EINVAL);
  }
  LocalMr out;
  if (int e = mem.reg(engine_of(new_pd)->id(), new_addr, new_length, iova, new_access, out,
                      mr->lkey))
    return bad(e);
  auto* h = handle_of<MrHandle>(mr);
  h->pd = handle_of<PdHandle>(new_pd);
  mr->pd = new_pd;
  mr->addr = new_addr;
  mr->length = new_length;
  mr->handle = out.key;
  mr->lkey = out.key;
  mr->rkey = out.key;
  return 0;
}

VRDMA_EXPORT int ibv_dereg_mr(ibv_mr* mr) {
  auto* h = handle_of<MrHandle>(mr);
  int e = engine_of(mr->pd)->context().device().memory().dereg(mr->lkey);
  if (e) return e;
  if (h->dm) h->dm->fetch_sub(1);
  free(h);
  return 0;
}
