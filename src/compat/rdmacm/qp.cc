// rdma_create_qp / rdma_destroy_qp: a QP on the id's device, brought to the state rdma_cm
// leaves it in (RC/UC: INIT; UD: RTS with rdma_cm's Q_Key), with CQs and completion channels
// of its own when the application gives none.
#include <errno.h>
#include <string.h>

#include "internal.h"

using namespace vrdma::cm;

namespace {

void destroy_cqs(rdma_cm_id* cid) {
  if (cid->recv_cq) ibv_destroy_cq(cid->recv_cq);
  if (cid->send_cq && cid->send_cq != cid->recv_cq) ibv_destroy_cq(cid->send_cq);
  if (cid->recv_cq_channel) ibv_destroy_comp_channel(cid->recv_cq_channel);
  if (cid->send_cq_channel && cid->send_cq_channel != cid->recv_cq_channel)
    ibv_destroy_comp_channel(cid->send_cq_channel);
  cid->recv_cq = cid->send_cq = nullptr;
  cid->recv_cq_channel = cid->send_cq_channel = nullptr;
}

int create_cqs(rdma_cm_id* cid, uint32_t send_size, uint32_t recv_size) {
  if (recv_size) {
    cid->recv_cq_channel = ibv_create_comp_channel(cid->verbs);
    if (!cid->recv_cq_channel) return -1;
    cid->recv_cq = ibv_create_cq(cid->verbs, recv_size, cid, cid->recv_cq_channel, 0);
    if (!cid->recv_cq) return -1;
  }
  if (send_size) {
    cid->send_cq_channel = ibv_create_comp_channel(cid->verbs);
    if (!cid->send_cq_channel) return -1;
    cid->send_cq = ibv_create_cq(cid->verbs, send_size, cid, cid->send_cq_channel, 0);
    if (!cid->send_cq) return -1;
  }
  return 0;
}

}  // namespace

extern "C" {

VRDMA_EXPORT int rdma_create_qp(struct rdma_cm_id* cid, struct ibv_pd* pd,
                                struct ibv_qp_init_attr* qp_init_attr) {
  if (!cid || !qp_init_attr) return fail(EINVAL);
  Id* id = impl(cid);
  if (!cid->verbs) return fail(EINVAL);
  if (!pd) pd = cid->pd;
  if (!pd || pd->context != cid->verbs) return fail(EINVAL);
  if (cid->qp) return fail(EINVAL);
  ibv_qp_init_attr attr = *qp_init_attr;
  bool made_cqs = false;
  if (!attr.send_cq || !attr.recv_cq) {
    uint32_t ssize = attr.cap.max_send_wr ? attr.cap.max_send_wr : 1;
    uint32_t rsize = attr.cap.max_recv_wr ? attr.cap.max_recv_wr : 1;
    if (create_cqs(cid, attr.send_cq ? 0 : ssize, attr.recv_cq ? 0 : rsize)) {
      int e = errno;
      destroy_cqs(cid);
      return fail(e ? e : ENOMEM);
    }
    made_cqs = true;
    if (!attr.send_cq) attr.send_cq = cid->send_cq;
    if (!attr.recv_cq) attr.recv_cq = cid->recv_cq;
  }
  ibv_qp* qp = ibv_create_qp(pd, &attr);
  if (!qp) {
    int e = errno;
    if (made_cqs) destroy_cqs(cid);
    return fail(e ? e : ENOMEM);
  }
  // The state rdma_cm leaves a new QP in.
  ibv_qp_attr a;
  int mask = 0;
  a.qp_state = IBV_QPS_INIT;
  int err = init_qp_attr(id, &a, &mask);
  if (!err) err = ibv_modify_qp(qp, &a, mask);
  if (!err && attr.qp_type == IBV_QPT_UD) {
    a.qp_state = IBV_QPS_RTR;
    err = init_qp_attr(id, &a, &mask);
    if (!err) err = ibv_modify_qp(qp, &a, mask);
    a.qp_state = IBV_QPS_RTS;
    if (!err) err = init_qp_attr(id, &a, &mask);
    if (!err) err = ibv_modify_qp(qp, &a, mask);
  }
  if (err) {
    ibv_destroy_qp(qp);
    if (made_cqs) destroy_cqs(cid);
    return fail(err);
  }
  qp_init_attr->cap = attr.cap;
  cid->qp = qp;
  id->own_cqs = made_cqs;
  return 0;
}

VRDMA_EXPORT int rdma_create_qp_ex(struct rdma_cm_id* cid,
                                   struct ibv_qp_init_attr_ex* attr) {
  if (!cid || !attr) return fail(EINVAL);
  if (attr->comp_mask & ~static_cast<uint32_t>(IBV_QP_INIT_ATTR_PD)) return fail(ENOSYS);
  ibv_qp_init_attr a{};
  a.qp_context = attr->qp_context;
  a.send_cq = attr->send_cq;
  a.recv_cq = attr->recv_cq;
  a.srq = attr->srq;
  a.cap = attr->cap;
  a.qp_type = attr->qp_type;
  a.sq_sig_all = attr->sq_sig_all;
  ibv_pd* pd = (attr->comp_mask & IBV_QP_INIT_ATTR_PD) ? attr->pd : nullptr;
  int rc = rdma_create_qp(cid, pd, &a);
  if (rc == 0) attr->cap = a.cap;
  return rc;
}

VRDMA_EXPORT void rdma_destroy_qp(struct rdma_cm_id* cid) {
  if (!cid) return;
  Id* id = impl(cid);
  if (cid->qp) ibv_destroy_qp(cid->qp);
  cid->qp = nullptr;
  if (id->own_cqs) destroy_cqs(cid);
  id->own_cqs = false;
}

}  // extern "C"
