// XRC across hosts, the responder's half. An XRC_SEND QP of another host connects to an
// XRC_RECV QP here (Connect, agreed by that QP's RTR as RC's are); each of its requests names an
// XRC SRQ (wire::Request::xrc_srqn). The request reaches that SRQ only when it is one of the
// XRC_RECV QP's domain, of the same tenant and container: with the QP's attributes (state,
// remote access flags) and the SRQ's receives, CQ and protection domain, as vrdmad and the
// library decide on one host (core/xrc_ops.cc, engine/xrc.cc). Any other number (none, a QP, an
// SRQ of another domain or tenant) fails the request with IBV_WC_REM_INV_REQ_ERR
// (transport::Responder).
#include "common/log.h"
#include "common/protocol.h"
#include "daemon/router/router_state.h"

namespace vrdma::daemon {

namespace {
constexpr uint32_t kXrcSrq = static_cast<uint32_t>(proto::QpType::kXrcSrq);
constexpr uint32_t kXrcRecv = static_cast<uint32_t>(proto::QpType::kXrcRecv);
}  // namespace

bool Router::RespEnv::xrc_srq(const InConn& c, uint32_t srqn, shm::PeerQp& out) {
  LocalQp recv, srq;
  if (!r_.hooks_.find_qp(c.dst_qpn, &recv) || recv.type != kXrcRecv || recv.xrcd == 0 ||
      recv.owner != c.owner)
    return false;
  if (!r_.hooks_.find_qp(srqn, &srq) || srq.type != kXrcSrq || srq.xrcd != recv.xrcd ||
      srq.tenant != recv.tenant || srq.ipv4 != recv.ipv4) {
    LOG_DEBUG("router: host %u QP 0x%x -> XRC_RECV QP 0x%x: 0x%x is no SRQ of its domain",
              c.peer_id, c.src_qpn, c.dst_qpn, srqn);
    return false;
  }
  return r_.target(srqn, out);
}

}  // namespace vrdma::daemon
