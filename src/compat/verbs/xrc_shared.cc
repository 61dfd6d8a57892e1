// Handles of XRC_RECV QPs held through vrdmad (ibv_open_qp of a QP another process made, or of
// one handed over to this process): modify, query and destroy act on the QP's shared state
// (engine/xrc_shared_qp.h). Their handles are QpHandles whose engine is null.
#include <unistd.h>

#include <new>

#include "compat/verbs/handles.h"
#include "engine/xrc.h"
#include "engine/xrc_shared_qp.h"

namespace vrdma::compat {

namespace {
struct SharedRecvHandle {
  QpHandle base;  // first: the handle is an ibv_qp
  SharedRecvQp* shared = nullptr;
  std::shared_ptr<Xrcd> xrcd;  // the domain it was opened through stays in use
};

SharedRecvHandle* shared_of(ibv_qp* q) {
  return reinterpret_cast<SharedRecvHandle*>(q);
}
}  // namespace

bool is_shared_recv_qp(ibv_qp* q) {
  return q->qp_type == IBV_QPT_XRC_RECV && engine_of(q) == nullptr;
}

ibv_qp* open_shared_recv_qp(ibv_context* ctx, std::shared_ptr<Xrcd> xrcd, uint32_t qpn,
                            int object_fd, void* qp_context) {
  auto* h = new (std::nothrow) SharedRecvHandle{};
  auto* shared = new (std::nothrow) SharedRecvQp(*engine_of(ctx), qpn);
  if (!h || !shared) {
    delete h;
    delete shared;
    ::close(object_fd);
    // vrdmad counted the handle: count it out again.
    release_recv_qp(*engine_of(ctx), qpn);
    return fail<ibv_qp>(ENOMEM);
  }
  shared->user = &h->base.ibv.qp_base;  // before attach, which makes it reachable by events
  if (int e = shared->attach(object_fd)) {
    shared->close();
    delete shared;
    delete h;
    return fail<ibv_qp>(e);
  }
  h->shared = shared;
  h->xrcd = std::move(xrcd);
  ibv_qp* ib = &h->base.ibv.qp_base;
  ib->context = ctx;
  ib->qp_context = qp_context;
  ib->handle = qpn;
  ib->qp_num = qpn;
  ib->state = shared->state();
  ib->qp_type = IBV_QPT_XRC_RECV;
  pthread_mutex_init(&ib->mutex, nullptr);
  pthread_cond_init(&ib->cond, nullptr);
  return ib;
}

int modify_shared_recv_qp(ibv_qp* q, const ibv_qp_attr& attr, int mask) {
  SharedRecvQp* s = shared_of(q)->shared;
  int e = s->modify(attr, mask);
  q->state = s->state();
  return e;
}

void query_shared_recv_qp(ibv_qp* q, ibv_qp_attr& attr, ibv_qp_init_attr& init) {
  shared_of(q)->shared->query(attr, init);
  init.qp_context = q->qp_context;
  q->state = attr.qp_state;
}

int destroy_shared_recv_qp(ibv_qp* q) {
  SharedRecvHandle* h = shared_of(q);
  h->shared->close();
  delete h->shared;
  pthread_mutex_destroy(&q->mutex);
  pthread_cond_destroy(&q->cond);
  delete h;
  return 0;
}

}  // namespace vrdma::compat
