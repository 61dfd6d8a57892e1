#include "engine/xrc_shared_qp.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <memory>

#include "engine/device.h"
#include "engine/objects.h"
#include "engine/qp.h"
#include "shm/shared_file.h"

namespace vrdma {

int take_shared_qp_object(Packet& reply, int* object_fd) {
  auto* rep = reply.as<proto::OpenXrcQpRep>();
  const bool shared = rep && rep->shared;
  if (!rep || (shared && reply.nfds != 1) || (!shared && reply.nfds != 0)) {
    reply.close_fds();
    return EPROTO;
  }
  if (!shared) {
    if (object_fd) *object_fd = -1;
    return 0;
  }
  if (object_fd) {
    *object_fd = reply.fds[0];
    reply.nfds = 0;
  } else {
    reply.close_fds();
  }
  return 0;
}

bool release_recv_qp(Context& ctx, uint32_t qpn, uint32_t* object_fd_id) {
  proto::CloseXrcQpReq req{qpn, 0};
  auto reply = std::make_unique<Packet>();
  if (object_fd_id) *object_fd_id = 0;
  if (ctx.device().control().call(proto::Op::kCloseXrcQp, req, reply.get())) return false;
  auto* rep = reply->as<proto::CloseXrcQpRep>();
  if (!rep) return false;
  if (object_fd_id && !rep->kept) *object_fd_id = rep->object_fd_id;
  return rep->kept != 0;
}

SharedRecvQp::~SharedRecvQp() {
  if (obj_) {
    ctx_.device().remove_shared_qp(this);
    ::munmap(obj_, size_);
  }
}

void SharedRecvQp::fatal() {
  attrs().state.store(IBV_QPS_ERR, std::memory_order_release);
  ctx_.push_event(IBV_EVENT_QP_FATAL, user);
}

int SharedRecvQp::attach(int fd) {
  void* p = nullptr;
  uint64_t size = 0;
  int e = shm::map_sealed(fd, PROT_READ | PROT_WRITE, shm::kMaxObjectSize, p, size);
  ::close(fd);
  if (e) return e;
  auto* o = static_cast<shm::QpObject*>(p);
  if (size < sizeof(shm::QpObject) || o->hdr.magic != shm::kObjectMagic ||
      o->hdr.kind != static_cast<uint32_t>(shm::ObjectKind::kQp) || o->attrs.qpn != qpn_ ||
      o->attrs.qp_type != IBV_QPT_XRC_RECV) {
    ::munmap(p, size);
    return EPROTO;
  }
  obj_ = o;
  size_ = size;
  attr_.qp_access_flags = o->attrs.access.load(std::memory_order_relaxed);
  attr_.min_rnr_timer = static_cast<uint8_t>(o->attrs.min_rnr_timer.load());
  attr_.port_num = 1;
  ctx_.device().add_shared_qp(this);
  return 0;
}

ibv_qp_state SharedRecvQp::state() const {
  return static_cast<ibv_qp_state>(attrs().state.load(std::memory_order_acquire));
}

int SharedRecvQp::modify(const ibv_qp_attr& attr, int mask) {
  const ibv_qp_state cur = state();
  if (int e = Qp::check_transition(IBV_QPT_XRC_RECV, attr, mask, cur)) return e;
  const ibv_qp_state next = (mask & IBV_QP_STATE) ? attr.qp_state : cur;
  if (next == IBV_QPS_RTR && cur == IBV_QPS_INIT) {
    // The RTR names the XRC_SEND QP: vrdmad records it as this QP's consent. A destination not
    // there yet is no error, as for the maker's handle.
    proto::ConnectQpReq req{qpn_, attr.dest_qp_num, {}};
    if (attr.ah_attr.is_global) memcpy(req.dest_gid, attr.ah_attr.grh.dgid.raw, 16);
    auto reply = std::make_unique<Packet>();
    if (ctx_.device().control().call(proto::Op::kConnectQp, req, reply.get()) == 0)
      reply->close_fds();
  }
  if (mask & IBV_QP_ACCESS_FLAGS) {
    attrs().access.store(attr.qp_access_flags, std::memory_order_release);
    attr_.qp_access_flags = attr.qp_access_flags;
  }
  if (mask & IBV_QP_MIN_RNR_TIMER) {
    attrs().min_rnr_timer.store(attr.min_rnr_timer & 31, std::memory_order_release);
    attr_.min_rnr_timer = attr.min_rnr_timer;
  }
  if (mask & IBV_QP_PKEY_INDEX) attr_.pkey_index = attr.pkey_index;
  if (mask & IBV_QP_PORT) attr_.port_num = attr.port_num;
  if (mask & IBV_QP_AV) attr_.ah_attr = attr.ah_attr;
  if (mask & IBV_QP_PATH_MTU) attr_.path_mtu = attr.path_mtu;
  if (mask & IBV_QP_DEST_QPN) attr_.dest_qp_num = attr.dest_qp_num;
  if (mask & IBV_QP_RQ_PSN) attr_.rq_psn = attr.rq_psn;
  if (mask & IBV_QP_SQ_PSN) attr_.sq_psn = attr.sq_psn;
  if (mask & IBV_QP_MAX_DEST_RD_ATOMIC) attr_.max_dest_rd_atomic = attr.max_dest_rd_atomic;
  if (mask & IBV_QP_TIMEOUT) attr_.timeout = attr.timeout;
  if (mask & IBV_QP_STATE) attrs().state.store(next, std::memory_order_release);
  return 0;
}

void SharedRecvQp::query(ibv_qp_attr& attr, ibv_qp_init_attr& init) const {
  attr = attr_;
  attr.qp_state = state();
  attr.cur_qp_state = attr.qp_state;
  attr.qp_access_flags = attrs().access.load(std::memory_order_acquire);
  attr.min_rnr_timer = static_cast<uint8_t>(attrs().min_rnr_timer.load());
  attr.path_mig_state = IBV_MIG_MIGRATED;
  memset(&init, 0, sizeof(init));
  init.qp_type = IBV_QPT_XRC_RECV;
}

void SharedRecvQp::close() {
  if (closed_) return;
  closed_ = true;
  uint32_t object_fd_id = 0;
  if (release_recv_qp(ctx_, qpn_, &object_fd_id)) return;
  // The last handle anywhere: the QP goes, and senders that still map it see so.
  attrs().state.store(IBV_QPS_ERR, std::memory_order_release);
  attrs().gone.store(1, std::memory_order_release);
  Control& control = ctx_.device().control();
  proto::FreeQpnReq req{qpn_};
  control.call(proto::Op::kFreeQpn, req);
  if (object_fd_id) {
    proto::DropFdReq drop{object_fd_id};
    control.call(proto::Op::kDropFd, drop);
  }
}

}  // namespace vrdma
