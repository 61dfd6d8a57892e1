// XRC: ibv_open_xrcd / ibv_close_xrcd, XRC SRQs (ibv_create_srq_ex with IBV_SRQT_XRC,
// ibv_get_srq_num), XRC_RECV QPs (ibv_create_qp_ex with an XRC domain) and ibv_open_qp. XRC_SEND
// QPs are made as other QPs are (create_qp_ex); a send names the SRQ with
// wr.qp_type.xrc.remote_srqn or ibv_wr_set_xrc_srqn.
#include "engine/xrc.h"

#include <fcntl.h>
#include <stdlib.h>

#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <utility>
#include <vector>

#include "compat/verbs/handles.h"
#include "engine/xrc_shared_qp.h"

namespace vrdma::compat {

namespace {

struct XrcdHandle {
  ibv_xrcd ibv;
  std::shared_ptr<Xrcd> engine;
};

XrcdHandle* xrcd_of(ibv_xrcd* x) {
  return reinterpret_cast<XrcdHandle*>(x);
}

ibv_xrcd* open_xrcd(ibv_context* ctx, ibv_xrcd_init_attr* attr) {
  if (!attr) return fail<ibv_xrcd>(EINVAL);
  if (attr->comp_mask & ~uint32_t(IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS))
    return fail<ibv_xrcd>(EOPNOTSUPP);
  if (!(attr->comp_mask & IBV_XRCD_INIT_ATTR_FD) || !(attr->comp_mask & IBV_XRCD_INIT_ATTR_OFLAGS))
    return fail<ibv_xrcd>(EINVAL);
  if (attr->oflags & ~(O_CREAT | O_EXCL)) return fail<ibv_xrcd>(EINVAL);
  auto* h = new (std::nothrow) XrcdHandle{};
  if (!h) return fail<ibv_xrcd>(ENOMEM);
  try {
    h->engine = std::make_shared<Xrcd>(*engine_of(ctx));
  } catch (const std::bad_alloc&) {
    delete h;
    return fail<ibv_xrcd>(ENOMEM);
  }
  if (int e = h->engine->open(attr->fd, attr->oflags)) {
    delete h;
    return fail<ibv_xrcd>(e);
  }
  h->ibv.context = ctx;
  h->engine->user = &h->ibv;
  return &h->ibv;
}

// EBUSY while an XRC SRQ or XRC_RECV QP of the domain lives, as the kernel answers.
int close_xrcd(ibv_xrcd* x) {
  XrcdHandle* h = xrcd_of(x);
  if (h->engine.use_count() > 1) return EBUSY;
  delete h;
  return 0;
}

ibv_srq* create_srq_ex(ibv_context* ctx, ibv_srq_init_attr_ex* attr) {
  if (!attr) return fail<ibv_srq>(EINVAL);
  constexpr uint32_t kKnown = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD |
                              IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ | IBV_SRQ_INIT_ATTR_TM;
  if (attr->comp_mask & ~kKnown) return fail<ibv_srq>(EINVAL);
  const ibv_srq_type type =
      (attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE) ? attr->srq_type : IBV_SRQT_BASIC;
  if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_PD) || !attr->pd || attr->pd->context != ctx)
    return fail<ibv_srq>(EINVAL);
  if (type == IBV_SRQT_BASIC) {
    // The basic kind with attributes it does not use (a CQ, a domain): as ibv_create_srq.
    ibv_srq_init_attr basic{attr->srq_context, attr->attr};
    ibv_srq* s = ibv_create_srq(attr->pd, &basic);
    if (s) attr->attr = basic.attr;
    return s;
  }
  // Tag matching needs hardware this device does not model.
  if (type != IBV_SRQT_XRC) return fail<ibv_srq>(EOPNOTSUPP);
  if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_XRCD) || !attr->xrcd ||
      !(attr->comp_mask & IBV_SRQ_INIT_ATTR_CQ) || !attr->cq || attr->xrcd->context != ctx ||
      attr->cq->context != ctx)
    return fail<ibv_srq>(EINVAL);
  auto* h = static_cast<SrqHandle*>(calloc(1, sizeof(SrqHandle)));
  if (!h) return fail<ibv_srq>(ENOMEM);
  XrcSrq* srq = nullptr;
  try {
    srq = new XrcSrq(*engine_of(attr->pd), xrcd_of(attr->xrcd)->engine, *engine_of(attr->cq));
  } catch (const std::bad_alloc&) {
    free(h);
    return fail<ibv_srq>(ENOMEM);
  }
  if (int e = srq->init_xrc(attr->attr)) {
    delete srq;
    free(h);
    return fail<ibv_srq>(e);
  }
  srq->query(attr->attr);
  h->engine = srq;
  srq->user = &h->ibv;
  h->ibv.context = ctx;
  h->ibv.srq_context = attr->srq_context;
  h->ibv.pd = attr->pd;
  pthread_mutex_init(&h->ibv.mutex, nullptr);
  pthread_cond_init(&h->ibv.cond, nullptr);
  return &h->ibv;
}

// The XRC_RECV QPs of this process and their handles: the creator's, then those ibv_open_qp
// gave (each with the domain it was opened through, kept open while the handle lives). A QP
// goes with its last handle, as the kernel's shared XRC target QPs do.
struct SharedRecvQp {
  Qp* qp = nullptr;
  std::vector<std::pair<ibv_qp*, std::shared_ptr<Xrcd>>> handles;
};

struct RecvQps {
  std::mutex mu;
  std::map<uint32_t, SharedRecvQp> by_qpn;
};

RecvQps& recv_qps() {
  static RecvQps* r = new RecvQps;  // never destroyed: handles may outlive static destructors
  return *r;
}

// A handle of XRC_RECV QP `qp` in context `ctx`.
ibv_qp* new_recv_handle(ibv_context* ctx, Qp* qp, void* qp_context) {
  auto* h = static_cast<QpHandle*>(calloc(1, sizeof(QpHandle)));
  if (!h) return nullptr;
  h->engine = qp;
  ibv_qp* ib = &h->ibv.qp_base;
  ib->context = ctx;
  ib->qp_context = qp_context;
  ib->handle = qp->qpn();
  ib->qp_num = qp->qpn();
  ib->state = qp->state();
  ib->qp_type = IBV_QPT_XRC_RECV;
  pthread_mutex_init(&ib->mutex, nullptr);
  pthread_cond_init(&ib->cond, nullptr);
  return ib;
}

void free_recv_handle(ibv_qp* ib) {
  auto* h = handle_of<QpHandle>(ib);
  free_wr_batch(h);
  pthread_mutex_destroy(&ib->mutex);
  pthread_cond_destroy(&ib->cond);
  free(h);
}

// ibv_open_qp: an XRC_RECV QP of a domain this context opened, by number. vrdmad checks that
// the QP is of that domain and tenant (EINVAL otherwise, as the kernel answers a number its
// domain does not have). A QP of another process (or handed over to this one) comes with its
// object: the handle is one of xrc_shared.cc.
ibv_qp* open_qp(ibv_context* ctx, ibv_qp_open_attr* attr) {
  constexpr uint32_t kNeeded = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE;
  if (!attr || attr->comp_mask >= IBV_QP_OPEN_ATTR_RESERVED ||
      (attr->comp_mask & kNeeded) != kNeeded || attr->qp_type != IBV_QPT_XRC_RECV || !attr->xrcd ||
      attr->xrcd->context != ctx)
    return fail<ibv_qp>(EINVAL);
  std::shared_ptr<Xrcd> xrcd = xrcd_of(attr->xrcd)->engine;
  int object_fd = -1;
  if (int e = xrcd->may_open_qp(attr->qp_num, &object_fd)) return fail<ibv_qp>(e);
  void* qp_context = (attr->comp_mask & IBV_QP_OPEN_ATTR_CONTEXT) ? attr->qp_context : nullptr;
  if (object_fd >= 0)
    return open_shared_recv_qp(ctx, std::move(xrcd), attr->qp_num, object_fd, qp_context);
  RecvQps& r = recv_qps();
  std::lock_guard lock(r.mu);
  auto it = r.by_qpn.find(attr->qp_num);
  if (it == r.by_qpn.end()) return fail<ibv_qp>(EOPNOTSUPP);
  ibv_qp* ib = new_recv_handle(ctx, it->second.qp, qp_context);
  if (!ib) return fail<ibv_qp>(ENOMEM);
  try {
    it->second.handles.emplace_back(ib, std::move(xrcd));
  } catch (const std::bad_alloc&) {
    free_recv_handle(ib);
    return fail<ibv_qp>(ENOMEM);
  }
  return ib;
}

int get_srq_num(ibv_srq* srq, uint32_t* num) {
  auto* x = dynamic_cast<XrcSrq*>(engine_of(srq));
  if (!x || !num) return EINVAL;
  *num = x->number();
  return 0;
}

}  // namespace

// An XRC_RECV QP: no PD, CQs or receive queue of its own (its domain's SRQs receive), made in
// the domain `attr->xrcd`.
ibv_qp* create_xrc_recv_qp(ibv_context* ctx, ibv_qp_init_attr_ex* attr) {
  if (!(attr->comp_mask & IBV_QP_INIT_ATTR_XRCD) || !attr->xrcd || attr->xrcd->context != ctx)
    return fail<ibv_qp>(EINVAL);
  std::shared_ptr<Xrcd> xrcd = xrcd_of(attr->xrcd)->engine;
  Qp* qp = nullptr;
  try {
    qp = new Qp(QpConfig{&xrcd->pd(), &xrcd->cq(), &xrcd->cq(), nullptr, IBV_QPT_XRC_RECV, false});
  } catch (const std::bad_alloc&) {
    return fail<ibv_qp>(ENOMEM);
  }
  qp->keep(xrcd);
  ibv_qp_cap cap{};
  int e = qp->init(cap);
  if (!e) e = qp->join_xrcd(xrcd->id());
  if (e) {
    delete qp;
    return fail<ibv_qp>(e);
  }
  attr->cap = ibv_qp_cap{};
  ibv_qp* ib = new_recv_handle(ctx, qp, attr->qp_context);
  if (!ib) {
    delete qp;
    return fail<ibv_qp>(ENOMEM);
  }
  qp->user = ib;
  RecvQps& r = recv_qps();
  try {
    std::lock_guard lock(r.mu);
    SharedRecvQp& s = r.by_qpn[qp->qpn()];
    s.qp = qp;
    s.handles.emplace_back(ib, nullptr);
  } catch (const std::bad_alloc&) {
    free_recv_handle(ib);
    delete qp;
    return fail<ibv_qp>(ENOMEM);
  }
  return ib;
}

int destroy_xrc_recv_qp(ibv_qp* ib) {
  if (is_shared_recv_qp(ib)) return destroy_shared_recv_qp(ib);
  Qp* gone = engine_of(ib);
  std::shared_ptr<Xrcd> through;  // released after the lock
  {
    RecvQps& r = recv_qps();
    std::lock_guard lock(r.mu);
    auto it = r.by_qpn.find(ib->qp_num);
    if (it != r.by_qpn.end() && it->second.qp == gone) {
      auto& hs = it->second.handles;
      for (auto h = hs.begin(); h != hs.end(); ++h)
        if (h->first == ib) {
          through = std::move(h->second);
          hs.erase(h);
          break;
        }
      if (hs.empty()) {
        r.by_qpn.erase(it);
      } else {
        // Its events go to a handle that is still there.
        if (gone->user == ib) gone->user = hs.front().first;
        gone = nullptr;
      }
    }
  }
  // Another process that opened it holds it on: it keeps the QP's number and object.
  if (gone && release_recv_qp(gone->context(), gone->qpn())) gone->hand_over();
  delete gone;
  free_recv_handle(ib);
  return 0;
}

void install_xrc_ops(verbs_context& v) {
  v.open_xrcd = open_xrcd;
  v.close_xrcd = close_xrcd;
  v.create_srq_ex = create_srq_ex;
  v.get_srq_num = get_srq_num;
  v.open_qp = open_qp;
}

}  // namespace vrdma::compat
