// Completion channels, completion queues, shared receive queues and
// asynchronous events.
#include <errno.h>
#include <stdlib.h>

#include "compat/verbs/handles.h"

using namespace vrdma;
using namespace vrdma::compat;

namespace vrdma::compat {

int poll_cq(ibv_cq* cq, int n, ibv_wc* wc) { return engine_of(cq)->poll(n, wc); }

int req_notify_cq(ibv_cq* cq, int solicited_only) {
  return engine_of(cq)->arm(solicited_only != 0);
}

int post_srq_recv(ibv_srq* srq, ibv_recv_wr* wr, ibv_recv_wr** bad) {
  return engine_of(srq)->post(wr, bad);
}

}  // namespace vrdma::compat

// ---- completion channels ---------------------------------------------------------

VRDMA_EXPORT ibv_comp_channel* ibv_create_comp_channel(ibv_context* ctx) {
  auto* h = static_cast<ChannelHandle*>(calloc(1, sizeof(ChannelHandle)));
  if (!h) return fail<ibv_comp_channel>(ENOMEM);
  auto* ch = new Channel(*engine_of(ctx));
  if (int e = ch->init()) {
    delete ch;
    free(h);
    return fail<ibv_comp_channel>(e);
  }
  h->engine = ch;
  ch->user = &h->ibv;
  h->ibv.context = ctx;
  h->ibv.fd = ch->fd();
  h->ibv.refcnt = 0;
  return &h->ibv;
}

VRDMA_EXPORT int ibv_destroy_comp_channel(ibv_comp_channel* channel) {
  auto* h = handle_of<ChannelHandle>(channel);
  if (h->engine->cq_count()) return EBUSY;
  delete h->engine;
  free(h);
  return 0;
}

VRDMA_EXPORT int ibv_get_cq_event(ibv_comp_channel* channel, ibv_cq** cq, void** cq_context) {
  Cq* got = nullptr;
  if (int e = engine_of(channel)->get_event(got)) {
    errno = e;
    return -1;
  }
  auto* ibcq = static_cast<ibv_cq*>(got->user);
  *cq = ibcq;
  *cq_context = ibcq->cq_context;
  return 0;
}

VRDMA_EXPORT void ibv_ack_cq_events(ibv_cq* cq, unsigned int nevents) {
  engine_of(cq)->ack(nevents);
}

// ---- completion queues ---------------------------------------------------------

VRDMA_EXPORT ibv_cq* ibv_create_cq(ibv_context* ctx, int cqe, void* cq_context,
                                   ibv_comp_channel* channel, int comp_vector) {
  if (comp_vector < 0 || comp_vector >= ctx->num_comp_vectors) return fail<ibv_cq>(EINVAL);
  auto* h = static_cast<CqHandle*>(calloc(1, sizeof(CqHandle)));
  if (!h) return fail<ibv_cq>(ENOMEM);
  auto* cq = new Cq(*engine_of(ctx), channel ? engine_of(channel) : nullptr);
  if (int e = cq->init(cqe)) {
    delete cq;
    free(h);
    return fail<ibv_cq>(e);
  }
  h->engine = cq;
  ibv_cq* ib = ibv_cq_ex_to_cq(&h->ibv);
  cq->user = ib;
  ib->context = ctx;
  ib->channel = channel;
  ib->cq_context = cq_context;
  ib->cqe = cq->capacity();
  pthread_mutex_init(&ib->mutex, nullptr);
  pthread_cond_init(&ib->cond, nullptr);
  if (channel) ++channel->refcnt;
  return ib;
}

VRDMA_EXPORT int ibv_resize_cq(ibv_cq* cq, int cqe) {
  Cq* engine = engine_of(cq);
  if (int e = engine->resize(cqe)) return e;
  cq->cqe = engine->capacity();
  return 0;
}

VRDMA_EXPORT int ibv_destroy_cq(ibv_cq* cq) {
  auto* h = handle_of<CqHandle>(cq);
  h->engine->wait_acked();
  if (cq->channel) --cq->channel->refcnt;
  delete h->engine;
  pthread_mutex_destroy(&cq->mutex);
  pthread_cond_destroy(&cq->cond);
  free(h);
  return 0;
}

// ---- shared receive queues -------------------------------------------------------

VRDMA_EXPORT ibv_srq* ibv_create_srq(ibv_pd* pd, ibv_srq_init_attr* attr) {
  auto* h = static_cast<SrqHandle*>(calloc(1, sizeof(SrqHandle)));
  if (!h) return fail<ibv_srq>(ENOMEM);
  auto* srq = new Srq(*engine_of(pd));
  if (int e = srq->init(attr->attr)) {
    delete srq;
    free(h);
    return fail<ibv_srq>(e);
  }
  srq->query(attr->attr);
  h->engine = srq;
  srq->user = &h->ibv;
  h->ibv.context = pd->context;
  h->ibv.srq_context = attr->srq_context;
  h->ibv.pd = pd;
  pthread_mutex_init(&h->ibv.mutex, nullptr);
  pthread_cond_init(&h->ibv.cond, nullptr);
  return &h->ibv;
}

VRDMA_EXPORT int ibv_modify_srq(ibv_srq* srq, ibv_srq_attr* attr, int mask) {
  return engine_of(srq)->modify(*attr, mask);
}

VRDMA_EXPORT int ibv_query_srq(ibv_srq* srq, ibv_srq_attr* attr) {
  engine_of(srq)->query(*attr);
  return 0;
}

VRDMA_EXPORT int ibv_destroy_srq(ibv_srq* srq) {
  auto* h = handle_of<SrqHandle>(srq);
  delete h->engine;
  pthread_mutex_destroy(&srq->mutex);
  pthread_cond_destroy(&srq->cond);
  free(h);
  return 0;
}

// ---- asynchronous events --------------------------------------------------------

VRDMA_EXPORT int ibv_get_async_event(ibv_context* ctx, ibv_async_event* event) {
  AsyncEvent ev;
  if (int e = engine_of(ctx)->get_event(ev)) {
    errno = e;
    return -1;
  }
  event->event_type = ev.type;
  switch (ev.type) {
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
    case IBV_EVENT_COMM_EST:
    case IBV_EVENT_SQ_DRAINED:
    case IBV_EVENT_PATH_MIG:
    case IBV_EVENT_PATH_MIG_ERR:
    case IBV_EVENT_QP_LAST_WQE_REACHED:
      event->element.qp = static_cast<ibv_qp*>(ev.user);
      break;
    case IBV_EVENT_CQ_ERR:
      event->element.cq = static_cast<ibv_cq*>(ev.user);
      break;
    case IBV_EVENT_SRQ_ERR:
    case IBV_EVENT_SRQ_LIMIT_REACHED:
      event->element.srq = static_cast<ibv_srq*>(ev.user);
      break;
    default:
      event->element.port_num = 1;
      break;
  }
  return 0;
}

VRDMA_EXPORT void ibv_ack_async_event(ibv_async_event*) {}
