// Verbs that exist for kernel drivers or features a virtual device does not
// have. They fail the way rdma-core fails for a provider that lacks them.
#include <errno.h>
#include <string.h>

#include <infiniband/sa.h>

#include "compat/verbs/handles.h"

using vrdma::compat::fail;

struct ib_uverbs_qp_attr;
struct ib_uverbs_ah_attr;
struct ib_user_path_rec;

VRDMA_EXPORT void ibv_copy_qp_attr_from_kern(ibv_qp_attr* dst, ib_uverbs_qp_attr*) {
  memset(dst, 0, sizeof(*dst));
}
VRDMA_EXPORT void ibv_copy_ah_attr_from_kern(ibv_ah_attr* dst, ib_uverbs_ah_attr*) {
  memset(dst, 0, sizeof(*dst));
}
VRDMA_EXPORT void ibv_copy_path_rec_from_kern(ibv_sa_path_rec* dst, ib_user_path_rec*) {
  memset(dst, 0, sizeof(*dst));
}
VRDMA_EXPORT void ibv_copy_path_rec_to_kern(ib_user_path_rec*, ibv_sa_path_rec*) {}

VRDMA_EXPORT int ibv_resolve_eth_l2_from_gid(ibv_context*, ibv_ah_attr*, uint8_t[6], uint16_t*) {
  return EOPNOTSUPP;
}

VRDMA_EXPORT ibv_context* ibv_import_device(int) { return fail<ibv_context>(EOPNOTSUPP); }
VRDMA_EXPORT ibv_pd* ibv_import_pd(ibv_context*, uint32_t) { return fail<ibv_pd>(EOPNOTSUPP); }
VRDMA_EXPORT void ibv_unimport_pd(ibv_pd*) {}
VRDMA_EXPORT ibv_mr* ibv_import_mr(ibv_pd*, uint32_t) { return fail<ibv_mr>(EOPNOTSUPP); }
VRDMA_EXPORT void ibv_unimport_mr(ibv_mr*) {}
VRDMA_EXPORT ibv_dm* ibv_import_dm(ibv_context*, uint32_t) { return fail<ibv_dm>(EOPNOTSUPP); }
VRDMA_EXPORT void ibv_unimport_dm(ibv_dm*) {}
