// The extended context's memory operations: device memory (dm.cc), thread and parent domains
// (parent_domain.cc), and ibv_advise_mr.
//
// On-demand paging: vrdma pins nothing (registered pages live in shared files the kernel may
// page out like any others), so an MR with IBV_ACCESS_ON_DEMAND is registered as any other and
// every operation works on it. Implicit ODP (addr 0, length SIZE_MAX: the whole address space)
// registers the ranges requests name as they are used (the engine's implicit_odp.cc); a
// prefetch registers its ranges at once.
#include <errno.h>

#include "compat/verbs/handles.h"

namespace vrdma::compat {

void install_dm_ops(verbs_context& v);
void install_domain_ops(verbs_context& v);

namespace {

// Prefetching: the pages of a registered range are in place from the registration on, so
// advice has nothing left to do once it is checked: every entry within an ODP MR of the PD,
// PREFETCH_WRITE only into MRs the process may write. Under an implicit MR the ranges are
// registered now (NO_FAULT: left to their first use); with IBV_ADVISE_MR_FLAG_FLUSH a range that
// cannot be (not mapped) fails the call with EFAULT, without it the failure is left to the use.
int advise_mr(ibv_pd* pd, ibv_advise_mr_advice advice, uint32_t flags, ibv_sge* sg_list,
              uint32_t num_sge) {
  if (advice != IBV_ADVISE_MR_ADVICE_PREFETCH && advice != IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE &&
      advice != IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT)
    return EOPNOTSUPP;
  if (flags & ~uint32_t(IBV_ADVISE_MR_FLAG_FLUSH)) return EINVAL;
  if (num_sge == 0 || !sg_list) return EINVAL;
  MemoryRegistry& mem = engine_of(pd)->context().device().memory();
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
  if (advice == IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT || !mem.has_implicit()) return 0;
  for (uint32_t i = 0; i < num_sge; ++i) {
    const ibv_sge& s = sg_list[i];
    if (!mem.is_implicit(s.lkey) || s.length == 0) continue;
    int err = 0;
    if (!mem.fault_in(s.lkey, s.addr, s.length, err) && (flags & IBV_ADVISE_MR_FLAG_FLUSH))
      return err;
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
