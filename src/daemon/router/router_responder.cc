// The responder side of the router: connections from other hosts' QPs to this host's, checked
// here; transport::Responder executes their requests (transport/responder.h) against this
// host's QPs, which the router reaches through the daemon (target).
#include <arpa/inet.h>
#include <string.h>

#include "common/address.h"
#include "common/log.h"
#include "daemon/router/router_state.h"

namespace vrdma::daemon {

bool Router::target(uint32_t qpn, shm::PeerQp& out) {
  LocalQp q;
  if (!hooks_.find_qp(qpn, &q)) return false;
  auto p = peer(q.owner);
  if (!p) return false;
  return shm::attach_peer_qp(p, q.object_fd_id, 0, out) == 0 && out.qpn == qpn;
}

const shm::PeerQp* Router::ud_target(Link& link, const wire::Request& r) {
  // The sender's address is one its host owns; the destination is a UD QP at the address the
  // datagram names, in the sender's tenant.
  if (!owns_address(link, r.src_ipv4)) return nullptr;
  auto it = ud_targets_.find(r.dst_qpn);
  if (it != ud_targets_.end() && shm::peer_qp_ready(it->second)) {
    LocalQp q;
    if (hooks_.find_qp(r.dst_qpn, &q) && q.ipv4 == r.dst_ipv4 &&
        q.owner == it->second.peer->client_id() && tenants_pair(r.src_ipv4, q.tenant))
      return &it->second;
    return nullptr;
  }
  LocalQp q;
  if (!hooks_.find_qp(r.dst_qpn, &q) || q.type != IBV_QPT_UD || q.ipv4 != r.dst_ipv4 ||
      !tenants_pair(r.src_ipv4, q.tenant))
    return nullptr;
  shm::PeerQp t;
  if (!target(r.dst_qpn, t)) return nullptr;
  return &(ud_targets_[r.dst_qpn] = std::move(t));
}

void Router::on_connect(Link& link, const wire::Connect& c) {
  wire::ConnectRep rep{c.req_id, 0, 0};
  LocalQp q;
  const char* refused = nullptr;
  if (!owns_address(link, c.src_ipv4)) {
    refused = "the source address is not the sending host's";
  } else if (!hooks_.find_qp(c.dst_qpn, &q) || q.ipv4 != c.dst_ipv4) {
    refused = "no such QP at that address";
  } else if (!tenants_pair(c.src_ipv4, q.tenant)) {
    refused = "another tenant";
  } else if (!wire::connects_to(c.qp_type, q.type)) {
    refused = "another QP type";
  } else if (q.type == IBV_QPT_XRC_RECV && hooks_.tenant_of(c.src_ipv4) != q.tenant) {
    // XRC shares SRQs within a tenant: no pair policy reaches them.
    refused = "XRC from another tenant";
  } else if (q.type != IBV_QPT_UD &&
             !responder_.connect(link, link.host_id, c.src_ipv4, c.src_qpn, c.dst_qpn, q.type,
                                 q.owner)) {
    refused = "too many connections on the link";
  }
  if (refused) {
    // One answer for every refusal: nothing tells whether the QP exists.
    LOG_DEBUG("router: host %u: %s QP 0x%x -> %s QP 0x%x refused: %s", link.host_id,
              ipv4_text(c.src_ipv4).c_str(), c.src_qpn, ipv4_text(c.dst_ipv4).c_str(), c.dst_qpn,
              refused);
    rep.status = wire::kRefused;
  } else {
    rep.qp_type = q.type;
    LOG_DEBUG("router: host %u QP 0x%x connected to QP 0x%x", link.host_id, c.src_qpn, c.dst_qpn);
  }
  link.send(wire::Type::kConnectRep, &rep, sizeof(rep));
}

}  // namespace vrdma::daemon
