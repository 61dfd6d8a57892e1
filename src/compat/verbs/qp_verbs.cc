// Queue pairs and address handles.
#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/address.h"
#include "compat/verbs/handles.h"

using namespace vrdma;
using namespace vrdma::compat;

namespace vrdma::compat {

int post_send(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad) {
  return engine_of(qp)->post_send(wr, bad);
}

int post_recv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad) {
  return engine_of(qp)->post_recv(wr, bad);
}

}  // namespace vrdma::compat

VRDMA_EXPORT ibv_qp* ibv_create_qp(ibv_pd* pd, ibv_qp_init_attr* attr) {
  // An XRC_SEND QP receives nothing (its engine QP takes the send CQ for the receive one); an
  // XRC_RECV QP needs a domain (ibv_create_qp_ex).
  const bool xrc_send = attr && attr->qp_type == IBV_QPT_XRC_SEND;
  if (!attr || !attr->send_cq || (!attr->recv_cq && !xrc_send)) return fail<ibv_qp>(EINVAL);
  if (attr->qp_type == IBV_QPT_XRC_RECV || (xrc_send && attr->srq)) return fail<ibv_qp>(EINVAL);
  auto* h = static_cast<QpHandle*>(calloc(1, sizeof(QpHandle)));
  if (!h) return fail<ibv_qp>(ENOMEM);
  QpConfig cfg{engine_of(pd),
               engine_of(attr->send_cq),
               engine_of(xrc_send ? attr->send_cq : attr->recv_cq),
               attr->srq ? engine_of(attr->srq) : nullptr,
               attr->qp_type,
               attr->sq_sig_all != 0,
               queue_allocator(pd)};
  auto* qp = new Qp(cfg);
  if (int e = qp->init(attr->cap)) {
    delete qp;
    free(h);
    return fail<ibv_qp>(e);
  }
  h->engine = qp;
  ibv_qp* ib = &h->ibv.qp_base;
  qp->user = ib;
  ib->context = pd->context;
  ib->qp_context = attr->qp_context;
  ib->pd = pd;
  ib->send_cq = attr->send_cq;
  ib->recv_cq = xrc_send ? nullptr : attr->recv_cq;
  ib->srq = attr->srq;
  ib->handle = qp->qpn();
  ib->qp_num = qp->qpn();
  ib->state = IBV_QPS_RESET;
  ib->qp_type = attr->qp_type;
  pthread_mutex_init(&ib->mutex, nullptr);
  pthread_cond_init(&ib->cond, nullptr);
  return ib;
}

VRDMA_EXPORT int ibv_modify_qp(ibv_qp* qp, ibv_qp_attr* attr, int mask) {
  if (is_shared_recv_qp(qp)) return modify_shared_recv_qp(qp, *attr, mask);
  int e = engine_of(qp)->modify(*attr, mask);
  qp->state = engine_of(qp)->state();
  return e;
}

VRDMA_EXPORT int ibv_query_qp(ibv_qp* qp, ibv_qp_attr* attr, int, ibv_qp_init_attr* init) {
  if (is_shared_recv_qp(qp)) return query_shared_recv_qp(qp, *attr, *init), 0;
  engine_of(qp)->query(*attr, *init);
  init->qp_context = qp->qp_context;
  init->send_cq = qp->send_cq;
  init->recv_cq = qp->recv_cq;
  init->srq = qp->srq;
  qp->state = attr->qp_state;
  return 0;
}

VRDMA_EXPORT int ibv_query_qp_data_in_order(ibv_qp*, ibv_wr_opcode, uint32_t) {
  return 1;
}

VRDMA_EXPORT int ibv_destroy_qp(ibv_qp* qp) {
  if (qp->qp_type == IBV_QPT_XRC_RECV) return destroy_xrc_recv_qp(qp);
  auto* h = handle_of<QpHandle>(qp);
  delete h->engine;
  free_wr_batch(h);
  pthread_mutex_destroy(&qp->mutex);
  pthread_cond_destroy(&qp->cond);
  free(h);
  return 0;
}


VRDMA_EXPORT int ibv_query_ece(ibv_qp*, ibv_ece*) {
  return EOPNOTSUPP;
}
VRDMA_EXPORT int ibv_set_ece(ibv_qp*, ibv_ece*) {
  return EOPNOTSUPP;
}


// ---- address handles ------------------------------------------------------------

VRDMA_EXPORT ibv_ah* ibv_create_ah(ibv_pd* pd, ibv_ah_attr* attr) {
  if (!attr || attr->port_num > 1) return fail<ibv_ah>(EINVAL);
  // The port is RoCE: there are no LIDs, a destination is named by its GID (as the kernel
  // refuses an AH without a GRH on a RoCE port).
  if (!attr->is_global) return fail<ibv_ah>(EINVAL);
  auto* ah = static_cast<Ah*>(calloc(1, sizeof(Ah)));
  if (!ah) return fail<ibv_ah>(ENOMEM);
  ah->attr = *attr;
  ah->ibv.context = pd->context;
  ah->ibv.pd = pd;
  return &ah->ibv;
}

VRDMA_EXPORT int ibv_destroy_ah(ibv_ah* ah) {
  free(reinterpret_cast<Ah*>(ah));
  return 0;
}

// A received GRH carries, for RoCEv2 over IPv4, an IPv4 header in its last 20
// bytes: the source address becomes the reply's destination GID.
VRDMA_EXPORT int ibv_init_ah_from_wc(ibv_context*, uint8_t port, ibv_wc* wc, ibv_grh* grh,
                                     ibv_ah_attr* attr) {
  memset(attr, 0, sizeof(*attr));
  attr->dlid = wc->slid;
  attr->sl = wc->sl;
  attr->port_num = port;
  if (wc->wc_flags & IBV_WC_GRH) {
    const uint8_t* raw = reinterpret_cast<const uint8_t*>(grh);
    attr->is_global = 1;
    // The GRH of a RoCEv2 datagram over IPv4: an IPv4 header 20 bytes in, source at 12.
    uint32_t src_ipv4;
    memcpy(&src_ipv4, raw + 20 + 12, 4);
    vrdma::ipv4_to_gid(src_ipv4, attr->grh.dgid.raw);
    attr->grh.sgid_index = 0;
    attr->grh.hop_limit = 64;
  }
  return 0;
}

VRDMA_EXPORT ibv_ah* ibv_create_ah_from_wc(ibv_pd* pd, ibv_wc* wc, ibv_grh* grh, uint8_t port) {
  ibv_ah_attr attr;
  if (ibv_init_ah_from_wc(pd->context, port, wc, grh, &attr)) return nullptr;
  return ibv_create_ah(pd, &attr);
}
