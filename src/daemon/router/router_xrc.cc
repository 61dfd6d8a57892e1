// XRC across hosts, the responder's half. An XRC_SEND QP of another host connects to an
// XRC_RECV QP here (Connect, agreed by that QP's RTR as RC's are); each of its requests names an
// XRC SRQ (wire::Request::xrc_srqn). The request reaches that SRQ only when it is one of the
// XRC_RECV QP's domain, of the same tenant and container: with the QP's attributes (state,
// remote access flags) and the SRQ's receives, CQ and protection domain, as vrdmad and the
// library decide on one host (core/xrc_ops.cc, engine/xrc.cc). Any other number (none, a QP, an
// SRQ of another domain or tenant) fails the request with IBV_WC_REM_INV_REQ_ERR.
#include "common/log.h"
#include "common/protocol.h"
#include "daemon/router/router_state.h"

namespace vrdma::daemon {

namespace {
constexpr uint32_t kXrcSrq = static_cast<uint32_t>(proto::QpType::kXrcSrq);
constexpr uint32_t kXrcRecv = static_cast<uint32_t>(proto::QpType::kXrcRecv);

// Destroyed (or its number reused), or its owner died: asked again.
bool gone(const shm::PeerQp& p) {
  return !p.attrs || p.attrs->gone.load(std::memory_order_acquire) || p.peer->dead();
}
}  // namespace

const shm::PeerQp* Router::xrc_dest(Inbound& ib, uint32_t srqn, ibv_wc_status& st) {
  st = IBV_WC_REM_INV_REQ_ERR;
  auto it = ib.xrc_srqs.find(srqn);
  if (it != ib.xrc_srqs.end() && gone(it->second)) {
    ib.xrc_srqs.erase(it);
    it = ib.xrc_srqs.end();
  }
  if (it == ib.xrc_srqs.end()) {
    LocalQp recv, srq;
    if (!hooks_.find_qp(ib.dst_qpn, &recv) || recv.type != kXrcRecv || recv.xrcd == 0 ||
        recv.owner != ib.owner)
      return nullptr;
    if (!hooks_.find_qp(srqn, &srq) || srq.type != kXrcSrq || srq.xrcd != recv.xrcd ||
        srq.tenant != recv.tenant || srq.ipv4 != recv.ipv4) {
      LOG_DEBUG("router: host %u QP 0x%x -> XRC_RECV QP 0x%x: 0x%x is no SRQ of its domain",
                ib.host_id, ib.src_qpn, ib.dst_qpn, srqn);
      return nullptr;
    }
    shm::PeerQp p;
    if (!target(srqn, p) || p.type != kXrcSrq) return nullptr;
    it = ib.xrc_srqs.emplace(srqn, std::move(p)).first;
  }
  st = IBV_WC_SUCCESS;
  ib.xrc_target = it->second;
  ib.xrc_target.attrs = ib.target.attrs;
  ib.xrc_target.qpn = ib.target.qpn;
  return &ib.xrc_target;
}

}  // namespace vrdma::daemon
