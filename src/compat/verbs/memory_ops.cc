// The extended context's memory operations: device memory (dm.cc), thread and parent domains
// (parent_domain.cc), and ibv_advise_mr.
//
// On-demand paging: vrdma pins nothing (registered pages live in shared files the kernel may
// page out like any others), so an MR with IBV_ACCESS_ON_DEMAND is registered as any other and
// every operation works on it. Implicit ODP (addr 0, length SIZE_MAX: the whole address space)
// is refused with EOPNOTSUPP: a registration moves the pages of its range into files vrdmad can
// grant, which cannot be done for an address space, most of which is not mapped.
#include <errno.h>

#include "compat/verbs/handles.h"

namespace vrdma::compat {

void install_dm_ops(verbs_context& v);
void install_domain_ops(verbs_context& v);

namespace {

// Prefetching: the pages of a registered range are in place from the registration on, so
// advice has nothing left to do once it is checked: every entry within an ODP MR of the PD,
// PREFETCH_WRITE only into MRs the process may write.
int advise_mr(ibv_pd* pd, ibv_advise_mr_advice advice, uint32_t flags, ibv_sge* sg_list,
              uint32_t num_sge) {
  if (advice != IBV_ADVISE_MR_ADVICE_PREFETCH && advice != IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE &&
      advice != IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT)
    return EOPNOTSUPP;
  if (flags & ~uint32_t(IBV_ADVISE_MR_FLAG_FLUSH)) return EINVAL;
  if (num_sge == 0 || !sg_list) return EINVAL;
  const MemoryRegistry& mem = engine_of(pd)->context().device().memory();
  for (uint32_t i = 0; i < num_sge; ++i) {
    const ibv_sge& s = sg_list[i];
    const LocalMr* mr = mem.find(s.lkey);
    if (!mr || mr->pd != engine_of(pd)->id() || s.addr < mr->iova || s.length > mr->length ||
        s.addr - mr->iova > mr->length - s.length)
      return EINVAL;
    if (!(mr->access & IBV_ACCESS_ON_DEMAND)) return EINVAL;
    if (advice == IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE && !(mr->access & IBV_ACCESS_LOCAL_WRITE))
      return EINVAL;
  }
  return 0;
}

}  // namespace

void install_memory_ops(verbs_context& v) {
  install_dm_ops(v);
  install_domain_ops(v);
  v.advise_mr = advise_mr;
}

}  // namespace vrdma::compat
