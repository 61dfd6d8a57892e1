// The operations of the extended context (struct verbs_context) that verbs.h's inline
// functions call: ibv_create_cq_ex, ibv_create_qp_ex. A NULL operation makes the inline
// function fail with EOPNOTSUPP, which is how what this device lacks (tag-matching
// SRQs, work queues, flows, counters, device memory, parent domains, thread
// domains) is answered.
#include "compat/verbs/handles.h"

namespace vrdma::compat {

ibv_cq_ex* create_cq_ex(ibv_context* ctx, ibv_cq_init_attr_ex* attr);
ibv_qp* create_qp_ex(ibv_context* ctx, ibv_qp_init_attr_ex* attr);

void install_extended_ops(verbs_context& v) {
  v.create_cq_ex = create_cq_ex;
  v.create_qp_ex = create_qp_ex;
  install_xrc_ops(v);
  install_window_ops(v.context);
  install_memory_ops(v);
}

}  // namespace vrdma::compat
