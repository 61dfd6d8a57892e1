// The synchronous endpoint API: rdma_create_ep, rdma_destroy_ep, rdma_get_request.
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

using namespace vrdma::cm;

extern "C" {

VRDMA_EXPORT int rdma_create_ep(struct rdma_cm_id** out, struct rdma_addrinfo* res,
                                struct ibv_pd* pd, struct ibv_qp_init_attr* qp_init_attr) {
  if (!out || !res) return fail(EINVAL);
  rdma_cm_id* cid = nullptr;
  if (rdma_create_id(nullptr, &cid, nullptr, static_cast<rdma_port_space>(res->ai_port_space)))
    return -1;
  Id* id = impl(cid);
  if (res->ai_qp_type) cid->qp_type = static_cast<ibv_qp_type>(res->ai_qp_type);
  // As rdma-core does: the QP gets the type the address info asks for.
  if (qp_init_attr) qp_init_attr->qp_type = cid->qp_type;
  int rc;
  if (res->ai_flags & RAI_PASSIVE) {
    rc = rdma_bind_addr(cid, res->ai_src_addr);
    if (!rc && qp_init_attr) {
      // Kept for the QPs of the requests this endpoint will get (rdma_get_request).
      id->ep_attr = static_cast<ibv_qp_init_attr*>(malloc(sizeof(ibv_qp_init_attr)));
      if (!id->ep_attr) {
        rc = fail(ENOMEM);
      } else {
        *id->ep_attr = *qp_init_attr;
        id->ep_pd = pd;
      }
    }
  } else {
    rc = rdma_resolve_addr(cid, res->ai_src_addr, res->ai_dst_addr, 2000);
    if (!rc) rc = rdma_resolve_route(cid, 2000);
    if (!rc && qp_init_attr) rc = rdma_create_qp(cid, pd, qp_init_attr);
  }
  if (rc) {
    int e = errno;
    rdma_destroy_id(cid);
    return fail(e);
  }
  *out = cid;
  return 0;
}

VRDMA_EXPORT void rdma_destroy_ep(struct rdma_cm_id* cid) {
  if (!cid) return;
  if (cid->qp) rdma_destroy_qp(cid);
  rdma_destroy_id(cid);
}

VRDMA_EXPORT int rdma_get_request(struct rdma_cm_id* listen, struct rdma_cm_id** out) {
  if (!listen || !out) return fail(EINVAL);
  Id* l = impl(listen);
  if (!l->sync) return fail(EINVAL);
  rdma_cm_event* ev = nullptr;
  for (;;) {
    if (rdma_get_cm_event(listen->channel, &ev)) return -1;
    if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST && ev->status == 0) break;
    int status = ev->status;
    rdma_ack_cm_event(ev);
    return fail(status < 0 ? -status : EINVAL);
  }
  rdma_cm_id* cid = ev->id;
  if (rdma_migrate_id(cid, nullptr)) {
    int e = errno;
    rdma_ack_cm_event(ev);
    rdma_destroy_id(cid);
    return fail(e);
  }
  if (l->ep_attr) {
    ibv_qp_init_attr attr = *l->ep_attr;
    if (rdma_create_qp(cid, l->ep_pd, &attr)) {
      int e = errno;
      rdma_ack_cm_event(ev);
      rdma_destroy_id(cid);
      return fail(e);
    }
  }
  cid->event = ev;  // the request stays readable (private data) until the id goes
  *out = cid;
  return 0;
}

}  // extern "C"
