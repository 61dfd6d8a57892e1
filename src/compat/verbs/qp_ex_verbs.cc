// Extended queue pairs: ibv_create_qp_ex, ibv_qp_to_qp_ex and the work-request interface of
// ibv_qp_ex (ibv_wr_start ... ibv_wr_complete), which verbs.h inlines as calls through members
// of ibv_qp_ex.
//
// Between ibv_wr_start and ibv_wr_complete, each ibv_wr_<opcode> call begins a work request in
// a batch the QP owns (sized at creation: max_send_wr requests, each with max_send_sge entries
// and max_inline_data bytes of inline data), and the ibv_wr_set_* calls complete it.
// ibv_wr_complete posts the batch as one list through the engine's post_send, the same path as
// ibv_post_send, on one host and across hosts; ibv_wr_abort drops it. A mistake inside the
// batch (too many requests, too much inline data, an operation the QP was not created for) is
// reported by ibv_wr_complete, which then posts nothing.
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <new>
#include <vector>

#include "compat/verbs/handles.h"

using namespace vrdma;
using namespace vrdma::compat;

namespace vrdma::compat {

struct WrBatch {
  uint64_t ops = 0;  // send_ops_flags
  uint32_t max_wr = 0, max_sge = 0, max_inline = 0;
  std::vector<ibv_send_wr> wrs;
  std::vector<ibv_sge> sges;        // max_sge per request
  std::vector<uint8_t> inline_buf;  // max_inline per request
  uint32_t count = 0;
  int error = 0;
  bool open = false;
};

void free_wr_batch(QpHandle* h) {
  delete h->batch;
  h->batch = nullptr;
}

}  // namespace vrdma::compat

namespace {

QpHandle* of(ibv_qp_ex* qp) {
  return reinterpret_cast<QpHandle*>(qp);
}

// Starts a request of `opcode` (which the QP must have been created for), or nullptr.
ibv_send_wr* begin(ibv_qp_ex* qp, ibv_wr_opcode opcode, uint64_t needs) {
  WrBatch& b = *of(qp)->batch;
  if (b.error) return nullptr;
  if (!b.open) {
    b.error = EINVAL;
    return nullptr;
  }
  if (!(b.ops & needs)) {
    b.error = EOPNOTSUPP;
    return nullptr;
  }
  if (b.count >= b.max_wr) {
    b.error = ENOMEM;
    return nullptr;
  }
  uint32_t i = b.count++;
  ibv_send_wr& wr = b.wrs[i];
  memset(&wr, 0, sizeof(wr));
  wr.wr_id = qp->wr_id;
  wr.send_flags = qp->wr_flags;
  wr.opcode = opcode;
  wr.sg_list = &b.sges[size_t(i) * b.max_sge];
  return &wr;
}

// The request the ibv_wr_set_* calls complete: the last one begun.
ibv_send_wr* last(ibv_qp_ex* qp) {
  WrBatch& b = *of(qp)->batch;
  if (b.error) return nullptr;
  if (!b.open || b.count == 0) {
    b.error = EINVAL;
    return nullptr;
  }
  return &b.wrs[b.count - 1];
}

void wr_start(ibv_qp_ex* qp) {
  WrBatch& b = *of(qp)->batch;
  b.count = 0;
  b.error = 0;
  b.open = true;
}

int wr_complete(ibv_qp_ex* qp) {
  WrBatch& b = *of(qp)->batch;
  if (!b.open) return EINVAL;
  b.open = false;
  if (b.error) return b.error;
  if (b.count == 0) return 0;
  for (uint32_t i = 0; i + 1 < b.count; ++i) b.wrs[i].next = &b.wrs[i + 1];
  b.wrs[b.count - 1].next = nullptr;
  ibv_send_wr* bad = nullptr;
  return of(qp)->engine->post_send(&b.wrs[0], &bad);
}

void wr_abort(ibv_qp_ex* qp) {
  WrBatch& b = *of(qp)->batch;
  b.count = 0;
  b.error = 0;
  b.open = false;
}

void wr_send(ibv_qp_ex* qp) {
  begin(qp, IBV_WR_SEND, IBV_QP_EX_WITH_SEND);
}

void wr_send_imm(ibv_qp_ex* qp, __be32 imm) {
  if (ibv_send_wr* wr = begin(qp, IBV_WR_SEND_WITH_IMM, IBV_QP_EX_WITH_SEND_WITH_IMM))
    wr->imm_data = imm;
}

void wr_rdma_write(ibv_qp_ex* qp, uint32_t rkey, uint64_t remote_addr) {
  if (ibv_send_wr* wr = begin(qp, IBV_WR_RDMA_WRITE, IBV_QP_EX_WITH_RDMA_WRITE)) {
    wr->wr.rdma.rkey = rkey;
    wr->wr.rdma.remote_addr = remote_addr;
  }
}

void wr_rdma_write_imm(ibv_qp_ex* qp, uint32_t rkey, uint64_t remote_addr, __be32 imm) {
  if (ibv_send_wr* wr = begin(qp, IBV_WR_RDMA_WRITE_WITH_IMM, IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM)) {
    wr->wr.rdma.rkey = rkey;
    wr->wr.rdma.remote_addr = remote_addr;
    wr->imm_data = imm;
  }
}

void wr_rdma_read(ibv_qp_ex* qp, uint32_t rkey, uint64_t remote_addr) {
  if (ibv_send_wr* wr = begin(qp, IBV_WR_RDMA_READ, IBV_QP_EX_WITH_RDMA_READ)) {
    wr->wr.rdma.rkey = rkey;
    wr->wr.rdma.remote_addr = remote_addr;
  }
}

void wr_atomic_cmp_swp(ibv_qp_ex* qp, uint32_t rkey, uint64_t remote_addr, uint64_t compare,
                       uint64_t swap) {
  if (ibv_send_wr* wr = begin(qp, IBV_WR_ATOMIC_CMP_AND_SWP, IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP)) {
    wr->wr.atomic.rkey = rkey;
    wr->wr.atomic.remote_addr = remote_addr;
    wr->wr.atomic.compare_add = compare;
    wr->wr.atomic.swap = swap;
  }
}

void wr_atomic_fetch_add(ibv_qp_ex* qp, uint32_t rkey, uint64_t remote_addr, uint64_t add) {
  if (ibv_send_wr* wr =
          begin(qp, IBV_WR_ATOMIC_FETCH_AND_ADD, IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD)) {
    wr->wr.atomic.rkey = rkey;
    wr->wr.atomic.remote_addr = remote_addr;
    wr->wr.atomic.compare_add = add;
  }
}

// Operations this device does not have: the batch fails at ibv_wr_complete.
void wr_unsupported(ibv_qp_ex* qp) {
  WrBatch& b = *of(qp)->batch;
  if (!b.error) b.error = EOPNOTSUPP;
}
void wr_bind_mw(ibv_qp_ex* qp, ibv_mw* mw, uint32_t rkey, const ibv_mw_bind_info* info) {
  if (ibv_send_wr* wr = begin(qp, IBV_WR_BIND_MW, IBV_QP_EX_WITH_BIND_MW)) {
    wr->bind_mw.mw = mw;
    wr->bind_mw.rkey = rkey;
    if (info) wr->bind_mw.bind_info = *info;
  }
}
void wr_local_inv(ibv_qp_ex* qp, uint32_t invalidate_rkey) {
  if (ibv_send_wr* wr = begin(qp, IBV_WR_LOCAL_INV, IBV_QP_EX_WITH_LOCAL_INV))
    wr->invalidate_rkey = invalidate_rkey;
}
void wr_send_inv(ibv_qp_ex* qp, uint32_t invalidate_rkey) {
  if (ibv_send_wr* wr = begin(qp, IBV_WR_SEND_WITH_INV, IBV_QP_EX_WITH_SEND_WITH_INV))
    wr->invalidate_rkey = invalidate_rkey;
}
void wr_send_tso(ibv_qp_ex* qp, void*, uint16_t, uint16_t) {
  wr_unsupported(qp);
}
void wr_set_xrc_srqn(ibv_qp_ex* qp, uint32_t remote_srqn) {
  if (ibv_send_wr* wr = last(qp)) wr->qp_type.xrc.remote_srqn = remote_srqn;
}
void wr_atomic_write(ibv_qp_ex* qp, uint32_t, uint64_t, const void*) {
  wr_unsupported(qp);
}

void wr_set_ud_addr(ibv_qp_ex* qp, ibv_ah* ah, uint32_t remote_qpn, uint32_t remote_qkey) {
  if (ibv_send_wr* wr = last(qp)) {
    wr->wr.ud.ah = ah;
    wr->wr.ud.remote_qpn = remote_qpn;
    wr->wr.ud.remote_qkey = remote_qkey;
  }
}

void wr_set_sge_list(ibv_qp_ex* qp, size_t num_sge, const ibv_sge* sg_list) {
  ibv_send_wr* wr = last(qp);
  if (!wr) return;
  WrBatch& b = *of(qp)->batch;
  if (num_sge > b.max_sge) {
    b.error = EINVAL;
    return;
  }
  for (size_t i = 0; i < num_sge; ++i) wr->sg_list[i] = sg_list[i];
  wr->num_sge = static_cast<int>(num_sge);
  wr->send_flags &= ~unsigned(IBV_SEND_INLINE);
}

void wr_set_sge(ibv_qp_ex* qp, uint32_t lkey, uint64_t addr, uint32_t length) {
  ibv_sge s{addr, length, lkey};
  wr_set_sge_list(qp, 1, &s);
}

// Inline data is copied at once (the caller may reuse its buffers when the call returns).
void wr_set_inline_data_list(ibv_qp_ex* qp, size_t num_buf, const ibv_data_buf* bufs) {
  ibv_send_wr* wr = last(qp);
  if (!wr) return;
  WrBatch& b = *of(qp)->batch;
  uint32_t i = static_cast<uint32_t>(wr - b.wrs.data());
  uint8_t* dst = &b.inline_buf[size_t(i) * b.max_inline];
  size_t total = 0;
  for (size_t k = 0; k < num_buf; ++k) {
    if (bufs[k].length > b.max_inline - total) {
      b.error = EINVAL;
      return;
    }
    memcpy(dst + total, bufs[k].addr, bufs[k].length);
    total += bufs[k].length;
  }
  wr->sg_list[0] = ibv_sge{reinterpret_cast<uint64_t>(dst), static_cast<uint32_t>(total), 0};
  wr->num_sge = 1;
  wr->send_flags |= IBV_SEND_INLINE;
}

void wr_set_inline_data(ibv_qp_ex* qp, void* addr, size_t length) {
  ibv_data_buf buf{addr, length};
  wr_set_inline_data_list(qp, 1, &buf);
}

constexpr uint64_t kSupportedOps = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |
                                   IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM |
                                   IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
                                   IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | IBV_QP_EX_WITH_BIND_MW |
                                   IBV_QP_EX_WITH_LOCAL_INV | IBV_QP_EX_WITH_SEND_WITH_INV;

// Which operations each transport has (as ibv_post_send allows them).
uint64_t ops_of(ibv_qp_type t) {
  switch (t) {
    case IBV_QPT_RC:
    case IBV_QPT_XRC_SEND:
      return kSupportedOps;
    case IBV_QPT_UC:
      return IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_SEND |
             IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_LOCAL_INV |
             IBV_QP_EX_WITH_SEND_WITH_INV;
    case IBV_QPT_UD:
      return IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM;
    default:
      return 0;
  }
}

}  // namespace

namespace vrdma::compat {

ibv_qp* create_qp_ex(ibv_context* ctx, ibv_qp_init_attr_ex* attr) {
  if (!attr) return fail<ibv_qp>(EINVAL);
  constexpr uint32_t kKnown = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_XRCD |
                              IBV_QP_INIT_ATTR_CREATE_FLAGS | IBV_QP_INIT_ATTR_MAX_TSO_HEADER |
                              IBV_QP_INIT_ATTR_IND_TABLE | IBV_QP_INIT_ATTR_RX_HASH |
                              IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  if (attr->comp_mask & ~kKnown) return fail<ibv_qp>(EINVAL);
  // TSO, RSS and creation flags (scatter FCS, CVLAN stripping, source QPN, ...) belong to
  // hardware this device does not model.
  if (attr->qp_type == IBV_QPT_RAW_PACKET || attr->qp_type == IBV_QPT_DRIVER)
    return fail<ibv_qp>(EOPNOTSUPP);
  // XRC_RECV: a QP of its domain, with no send queue (xrc.cc).
  if (attr->qp_type == IBV_QPT_XRC_RECV) {
    if (attr->comp_mask & ~uint32_t(IBV_QP_INIT_ATTR_XRCD | IBV_QP_INIT_ATTR_PD))
      return fail<ibv_qp>(EINVAL);
    return create_xrc_recv_qp(ctx, attr);
  }
  if ((attr->comp_mask & IBV_QP_INIT_ATTR_XRCD) && attr->xrcd) return fail<ibv_qp>(EINVAL);
  if ((attr->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) && attr->create_flags)
    return fail<ibv_qp>(EOPNOTSUPP);
  if ((attr->comp_mask & IBV_QP_INIT_ATTR_MAX_TSO_HEADER) && attr->max_tso_header)
    return fail<ibv_qp>(EOPNOTSUPP);
  if (attr->comp_mask & (IBV_QP_INIT_ATTR_IND_TABLE | IBV_QP_INIT_ATTR_RX_HASH))
    return fail<ibv_qp>(EOPNOTSUPP);
  if (!(attr->comp_mask & IBV_QP_INIT_ATTR_PD) || !attr->pd) return fail<ibv_qp>(EINVAL);
  if (attr->pd->context != ctx) return fail<ibv_qp>(EINVAL);
  uint64_t ops = 0;
  if (attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) {
    ops = attr->send_ops_flags;
    if (ops & ~uint64_t(kSupportedOps)) return fail<ibv_qp>(EOPNOTSUPP);
    if (ops & ~ops_of(attr->qp_type)) return fail<ibv_qp>(EINVAL);
  }

  ibv_qp_init_attr basic{};
  basic.qp_context = attr->qp_context;
  basic.send_cq = attr->send_cq;
  basic.recv_cq = attr->recv_cq;
  basic.srq = attr->srq;

  basic.cap = attr->cap;
  basic.qp_type = attr->qp_type;
  basic.sq_sig_all = attr->sq_sig_all;
  WrBatch* batch = nullptr;
  if (attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) {
    batch = new (std::nothrow) WrBatch;
    if (!batch) return fail<ibv_qp>(ENOMEM);
  }
  ibv_qp* qp = ibv_create_qp(attr->pd, &basic);
  if (!qp) {
    int e = errno;
    delete batch;
    return fail<ibv_qp>(e);
  }
  attr->cap = basic.cap;
  QpHandle* h = handle_of<QpHandle>(qp);
  if (batch) {
    batch->ops = ops;
    batch->max_wr = basic.cap.max_send_wr;
    batch->max_sge = basic.cap.max_send_sge;
    batch->max_inline = basic.cap.max_inline_data;
    try {
      batch->wrs.resize(batch->max_wr);
      batch->sges.resize(size_t(batch->max_wr) * batch->max_sge);
      batch->inline_buf.resize(size_t(batch->max_wr) * batch->max_inline);
    } catch (const std::bad_alloc&) {
      delete batch;
      ibv_destroy_qp(qp);
      return fail<ibv_qp>(ENOMEM);
    }
    h->batch = batch;
    ibv_qp_ex& x = h->ibv;
    x.comp_mask = 0;
    x.wr_id = 0;
    x.wr_flags = 0;
    x.wr_start = wr_start;
    x.wr_complete = wr_complete;
    x.wr_abort = wr_abort;
    x.wr_send = wr_send;
    x.wr_send_imm = wr_send_imm;
    x.wr_rdma_write = wr_rdma_write;
    x.wr_rdma_write_imm = wr_rdma_write_imm;
    x.wr_rdma_read = wr_rdma_read;
    x.wr_atomic_cmp_swp = wr_atomic_cmp_swp;
    x.wr_atomic_fetch_add = wr_atomic_fetch_add;
    x.wr_bind_mw = wr_bind_mw;
    x.wr_local_inv = wr_local_inv;
    x.wr_send_inv = wr_send_inv;
    x.wr_send_tso = wr_send_tso;
    x.wr_set_xrc_srqn = wr_set_xrc_srqn;
    x.wr_atomic_write = wr_atomic_write;
    x.wr_set_ud_addr = wr_set_ud_addr;
    x.wr_set_sge = wr_set_sge;
    x.wr_set_sge_list = wr_set_sge_list;
    x.wr_set_inline_data = wr_set_inline_data;
    x.wr_set_inline_data_list = wr_set_inline_data_list;
  }
  return qp;
}

}  // namespace vrdma::compat

// The work-request interface exists for QPs created with IBV_QP_INIT_ATTR_SEND_OPS_FLAGS.
VRDMA_EXPORT ibv_qp_ex* ibv_qp_to_qp_ex(ibv_qp* qp) {
  QpHandle* h = handle_of<QpHandle>(qp);
  if (!h->batch) return fail<ibv_qp_ex>(EOPNOTSUPP);
  return &h->ibv;
}
