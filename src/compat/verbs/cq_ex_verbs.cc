// Extended completion queues: ibv_create_cq_ex and the polling interface of ibv_cq_ex
// (ibv_start_poll, ibv_next_poll, ibv_end_poll, ibv_wc_read_*). verbs.h inlines every one of
// them as a call through a member of ibv_cq_ex, so the members are what this file provides.
//
// Completions are the engine's ibv_wc, taken one at a time. The completion timestamp is the
// moment the completion was taken from the queue by this process: CLOCK_MONOTONIC in
// nanoseconds (ibv_wc_read_completion_ts; query_device_ex reports hca_core_clock 1000000 kHz)
// and CLOCK_REALTIME in nanoseconds (ibv_wc_read_completion_wallclock_ns).
#include <errno.h>
#include <string.h>
#include <time.h>

#include "compat/verbs/handles.h"

using namespace vrdma;
using namespace vrdma::compat;

namespace {

CqHandle* of(ibv_cq_ex* cq) {
  return reinterpret_cast<CqHandle*>(cq);
}
const ibv_wc& cur(ibv_cq_ex* cq) {
  return of(cq)->current;
}

uint64_t clock_ns(clockid_t id) {
  timespec ts;
  clock_gettime(id, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

// The next completion becomes the current one; ENOENT when there is none.
int take(ibv_cq_ex* cq) {
  CqHandle* h = of(cq);
  int n = h->engine->poll(1, &h->current);
  if (n < 0) return EINVAL;
  if (n == 0) return ENOENT;
  if (h->ibv.read_completion_ts) h->taken_ns = clock_ns(CLOCK_MONOTONIC);
  if (h->ibv.read_completion_wallclock_ns) h->taken_wallclock_ns = clock_ns(CLOCK_REALTIME);
  cq->wr_id = h->current.wr_id;
  cq->status = h->current.status;
  return 0;
}

int start_poll(ibv_cq_ex* cq, ibv_poll_cq_attr* attr) {
  if (attr && attr->comp_mask) return EINVAL;
  return take(cq);
}
int next_poll(ibv_cq_ex* cq) {
  return take(cq);
}
void end_poll(ibv_cq_ex*) {}

ibv_wc_opcode read_opcode(ibv_cq_ex* cq) {
  return cur(cq).opcode;
}
uint32_t read_vendor_err(ibv_cq_ex* cq) {
  return cur(cq).vendor_err;
}
uint32_t read_byte_len(ibv_cq_ex* cq) {
  return cur(cq).byte_len;
}
__be32 read_imm_data(ibv_cq_ex* cq) {
  return cur(cq).imm_data;
}
uint32_t read_qp_num(ibv_cq_ex* cq) {
  return cur(cq).qp_num;
}
uint32_t read_src_qp(ibv_cq_ex* cq) {
  return cur(cq).src_qp;
}
unsigned int read_wc_flags(ibv_cq_ex* cq) {
  return cur(cq).wc_flags;
}
uint32_t read_slid(ibv_cq_ex* cq) {
  return cur(cq).slid;
}
uint8_t read_sl(ibv_cq_ex* cq) {
  return cur(cq).sl;
}
uint8_t read_dlid_path_bits(ibv_cq_ex* cq) {
  return cur(cq).dlid_path_bits;
}
uint64_t read_completion_ts(ibv_cq_ex* cq) {
  return of(cq)->taken_ns;
}
uint64_t read_completion_wallclock_ns(ibv_cq_ex* cq) {
  return of(cq)->taken_wallclock_ns;
}

// What this device can report. VLANs, flow tags and tag matching do not exist here.
constexpr uint64_t kSupportedWcFlags = uint64_t(IBV_WC_STANDARD_FLAGS) |
                                       uint64_t(IBV_WC_EX_WITH_COMPLETION_TIMESTAMP) |
                                       uint64_t(IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK);

ibv_cq_ex* create_cq_ex_op(ibv_context* ctx, ibv_cq_init_attr_ex* attr) {
  if (!attr) return fail<ibv_cq_ex>(EINVAL);
  if (attr->comp_mask & ~uint32_t(IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD))
    return fail<ibv_cq_ex>(EINVAL);
  if (attr->wc_flags & ~uint64_t(IBV_CREATE_CQ_SUP_WC_FLAGS)) return fail<ibv_cq_ex>(EINVAL);
  if (attr->wc_flags & ~kSupportedWcFlags) return fail<ibv_cq_ex>(EOPNOTSUPP);
  if (attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) {
    if (attr->flags &
        ~uint32_t(IBV_CREATE_CQ_ATTR_SINGLE_THREADED | IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN))
      return fail<ibv_cq_ex>(EINVAL);
    if (attr->flags & IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN) return fail<ibv_cq_ex>(EOPNOTSUPP);
  }
  // A CQ may name a parent domain of this context (its queue lives in the shared arena, not in
  // memory of the domain's allocator).
  if ((attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_PD) && attr->parent_domain &&
      !is_parent_domain(ctx, attr->parent_domain))
    return fail<ibv_cq_ex>(EINVAL);
  if (attr->cqe > INT32_MAX) return fail<ibv_cq_ex>(EINVAL);
  ibv_cq* cq = ibv_create_cq(ctx, static_cast<int>(attr->cqe), attr->cq_context, attr->channel,
                             static_cast<int>(attr->comp_vector));
  if (!cq) return nullptr;
  init_cq_ex(handle_of<CqHandle>(cq), attr->wc_flags);
  return &handle_of<CqHandle>(cq)->ibv;
}

}  // namespace

namespace vrdma::compat {

int init_cq_ex(CqHandle* h, uint64_t wc_flags) {
  ibv_cq_ex& x = h->ibv;
  x.comp_mask = 0;
  x.start_poll = start_poll;
  x.next_poll = next_poll;
  x.end_poll = end_poll;
  x.read_opcode = read_opcode;
  x.read_vendor_err = read_vendor_err;
  x.read_wc_flags = read_wc_flags;
  // As with hardware providers, a reader exists only for what the CQ was created with.
  x.read_byte_len = (wc_flags & IBV_WC_EX_WITH_BYTE_LEN) ? read_byte_len : nullptr;
  x.read_imm_data = (wc_flags & IBV_WC_EX_WITH_IMM) ? read_imm_data : nullptr;
  x.read_qp_num = (wc_flags & IBV_WC_EX_WITH_QP_NUM) ? read_qp_num : nullptr;
  x.read_src_qp = (wc_flags & IBV_WC_EX_WITH_SRC_QP) ? read_src_qp : nullptr;
  x.read_slid = (wc_flags & IBV_WC_EX_WITH_SLID) ? read_slid : nullptr;
  x.read_sl = (wc_flags & IBV_WC_EX_WITH_SL) ? read_sl : nullptr;
  x.read_dlid_path_bits =
      (wc_flags & IBV_WC_EX_WITH_DLID_PATH_BITS) ? read_dlid_path_bits : nullptr;
  x.read_completion_ts =
      (wc_flags & IBV_WC_EX_WITH_COMPLETION_TIMESTAMP) ? read_completion_ts : nullptr;
  x.read_completion_wallclock_ns = (wc_flags & IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK)
                                       ? read_completion_wallclock_ns
                                       : nullptr;
  x.read_cvlan = nullptr;
  x.read_flow_tag = nullptr;
  x.read_tm_info = nullptr;
  return 0;
}

}  // namespace vrdma::compat

namespace vrdma::compat {
ibv_cq_ex* create_cq_ex(ibv_context* ctx, ibv_cq_init_attr_ex* attr) {
  return create_cq_ex_op(ctx, attr);
}
}  // namespace vrdma::compat
