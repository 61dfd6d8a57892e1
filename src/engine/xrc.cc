#include "engine/xrc.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/unique_fd.h"
#include "engine/xrc_shared_qp.h"

namespace vrdma {

// ---- domains -------------------------------------------------------------------------------

int Xrcd::open(int fd, int oflags) {
  if (oflags & ~(O_CREAT | O_EXCL)) return EINVAL;
  if (int e = cq_.init(1)) return e;
  UniqueFd own;
  if (fd < 0) {
    // A domain of its own: named by a file nobody else has.
    own.reset(::memfd_create("vrdma-xrcd", MFD_CLOEXEC));
    if (!own) return errno;
    fd = own.get();
    oflags = O_CREAT;
  }
  proto::OpenXrcdReq req{static_cast<uint32_t>(oflags), 0};
  auto reply = std::make_unique<Packet>();
  if (int e = ctx_.device().control().call(proto::Op::kOpenXrcd, req, reply.get(), &fd, 1))
    return e;
  auto* rep = reply->as<proto::OpenXrcdRep>();
  if (!rep || rep->xrcd == 0) return EPROTO;
  id_ = rep->xrcd;
  return 0;
}

int Xrcd::may_open_qp(uint32_t qpn, int* object_fd) {
  proto::OpenXrcQpReq req{qpn, id_};
  auto reply = std::make_unique<Packet>();
  if (int e = ctx_.device().control().call(proto::Op::kOpenXrcQp, req, reply.get())) return e;
  return take_shared_qp_object(*reply, object_fd);  // xrc_shared_qp.cc
}

Xrcd::~Xrcd() {
  if (!id_) return;
  proto::CloseXrcdReq req{id_};
  ctx_.device().control().call(proto::Op::kCloseXrcd, req);
}

// ---- XRC SRQs ------------------------------------------------------------------------------

int XrcSrq::init_xrc(const ibv_srq_attr& attr) {
  if (int e = init(attr)) return e;
  QpConfig cfg{&pd(), &cq_, &cq_, this, kQptXrcSrq, false};
  auto t = std::make_unique<Qp>(cfg);
  ibv_qp_cap cap{};
  if (int e = t->init(cap)) return e;
  if (int e = t->open_xrc_srq(xrcd_->id())) return e;
  target_ = std::move(t);
  return 0;
}

XrcSrq::~XrcSrq() {
  target_.reset();
}

// ---- the QP side ---------------------------------------------------------------------------

int Qp::join_xrcd(uint32_t xrcd) {
  proto::SetQpXrcdReq req{qpn_, xrcd};
  return context().device().control().call(proto::Op::kSetQpXrcd, req);
}

int Qp::open_xrc_srq(uint32_t xrcd) {
  if (type_ != kQptXrcSrq) return EINVAL;
  if (int e = join_xrcd(xrcd)) return e;
  // Ready at once and for good: it has no connection of its own to wait for.
  std::lock_guard lock(lock_);
  set_state(IBV_QPS_RTR);
  return 0;
}

// An XRC_SEND request reaches the SRQ it names through the XRC_RECV QP it is connected to: the
// QP's attributes (state, remote access) with the SRQ's receives, completions and protection
// domain. nullptr with `status` IBV_WC_SUCCESS: the XRC_RECV QP is not there (yet); with an
// error status: the SRQ is not one this connection reaches.
const shm::PeerQp* Qp::xrc_peer(const ibv_send_wr& wr, ibv_wc_status& status) {
  status = IBV_WC_SUCCESS;
  const shm::PeerQp* recv = connected_peer();
  if (!recv) return nullptr;
  // On another host: the request carries the SRQ number, which that host's router checks.
  if (recv->routed) return recv;
  const uint32_t srqn = wr.qp_type.xrc.remote_srqn;
  auto it = xrc_srqs_.find(srqn);
  if (it != xrc_srqs_.end() &&
      (!it->second.attrs || it->second.attrs->gone.load(std::memory_order_acquire)))
    xrc_srqs_.erase(it), it = xrc_srqs_.end();
  if (it == xrc_srqs_.end()) {
    shm::PeerQp p;
    if (connect_peer(srqn, dest_gid_, p) != 0 || p.routed || p.type != kQptXrcSrq) {
      status = IBV_WC_REM_INV_REQ_ERR;
      return nullptr;
    }
    it = xrc_srqs_.emplace(srqn, std::move(p)).first;
  }
  xrc_target_ = it->second;
  xrc_target_.attrs = recv->attrs;
  xrc_target_.qpn = recv->qpn;
  return &xrc_target_;
}

}  // namespace vrdma
