// UD multicast across hosts. On this host, a sender's library delivers a datagram to the
// group's local members itself; the router carries one copy to each other host whose directory
// entries say it has members of the group in the sender's tenant (the directory lists, per
// container, the IPv4 groups its QPs joined). The copy is a UD Request to QPN 0xFFFFFF at the
// group's address; the receiving router checks the source as for any datagram (an address the
// sending host owns), takes the sender's tenant by its own rules, and places the payload into
// every local QP of that tenant attached to the group. The sending host's view of who has
// members only saves copies: the receiving host decides who gets one.
#include <arpa/inet.h>
#include <string.h>

#include <algorithm>

#include "common/address.h"
#include "common/log.h"
#include "daemon/router/router_state.h"

namespace vrdma::daemon {

namespace {

constexpr uint32_t kMcastQpn = 0xffffff;
constexpr uint32_t kMaxUdPayload = 4096;

bool ipv4_multicast(uint32_t ipv4_net) {
  return (ntohl(ipv4_net) & 0xf0000000u) == 0xe0000000u;
}

}  // namespace

int Router::attach_multicast(uint32_t qpn, const LocalQp& qp) {
  if (outbound_.count(qpn)) return 0;
  PendingConnect pc{0, 0, qpn, qp, kMcastQpn, 0, nullptr};
  std::unique_ptr<Outbound> o;
  if (int err = attach_outbound(pc, &o)) return err;
  qos_attach(*o);
  put_outbound(std::move(o));
  return 0;
}

bool Router::is_multicast_request(const wire::Request& r) {
  return r.dst_qpn == kMcastQpn && ipv4_multicast(r.dst_ipv4);
}

// Requester: one copy per other host with members. False when a link has no room (the request
// waits, as every later one of the QP).
bool Router::send_multicast(Outbound& o, const Wqe& w, int64_t now) {
  uint32_t group = 0;
  if (!gid_to_ipv4(w.dgid, &group)) {  // an IPv6 group: members on this host only
    requester_.complete(o, w, IBV_WC_SUCCESS, 0);
    ++o.sent;
    return true;
  }
  mcast_hosts_.clear();
  dir_.group_members(group, &mcast_hosts_);
  mcast_links_.clear();
  for (const auto& [host, ip] : mcast_hosts_) {
    if (host == cfg_.host_id) continue;
    // Address 0: a host that may have members (the directory does not know its containers).
    if (ip && hooks_.tenant_of(ip) != o.tenant) continue;
    int err;
    Link* l = outbound_link(host, o.lane, &err);
    if (!l) continue;  // unreachable now: its members miss the datagram, as on a fabric
    if (std::find(mcast_links_.begin(), mcast_links_.end(), l->id()) == mcast_links_.end()) {
      if (!l->has_room(1)) return false;
      mcast_links_.push_back(l->id());
    }
  }
  shm::Seg data[shm::kMaxSendSge];
  int nseg = 0;
  uint64_t total = 0;
  if (!requester_.gather(o, w, data, nseg, total)) return false;
  wire::Request r{};
  r.src_qpn = o.qpn;
  r.dst_qpn = kMcastQpn;
  r.opcode = w.opcode;
  r.qp_type = IBV_QPT_UD;
  r.imm_data = w.imm_data;
  r.qkey = w.ud_qkey;
  r.src_ipv4 = o.ipv4;
  r.dst_ipv4 = group;
  r.solicited = (w.send_flags & IBV_SEND_SOLICITED) != 0;
  r.length = total;
  for (uint32_t id : mcast_links_) {
    Link* l = find_link(id);
    if (!l) continue;
    l->send(wire::Type::kRequest, &r, sizeof(r), data, nseg, total, true);
    l->last_used_ns = now;
  }
  requester_.complete(o, w, IBV_WC_SUCCESS, static_cast<uint32_t>(total));
  ++o.sent;
  return true;
}

// Responder: a datagram to a group. Its payload is read into the frame's own buffer, then
// copied to each member (deliver_multicast).
void Router::on_mcast_datagram(Link& link, const wire::Request& r, uint32_t payload,
                               PayloadDest& dest) {
  if (!owns_address(link, r.src_ipv4) || r.length > kMaxUdPayload || payload > kMaxUdPayload)
    return;
  uint8_t gid[16];
  ipv4_to_gid(r.dst_ipv4, gid);
  const std::string tenant = hooks_.tenant_of(r.src_ipv4);
  const std::vector<uint32_t> members =
      hooks_.mcast_members ? hooks_.mcast_members(tenant, gid) : std::vector<uint32_t>{};
  if (members.empty()) return;
  auto& f = mcast_rx_[link.id()];
  if (!f) f = std::make_unique<McastRx>();
  f->req = r;
  if (!payload) return deliver_multicast(f->req, f->data.data());
  f->active = true;
  dest.kind = PayloadDest::Kind::kPlace;
  dest.segs[0] = shm::Seg{f->data.data(), payload};
  dest.nsegs = 1;
}

void Router::deliver_multicast(const wire::Request& r, const uint8_t* data) {
  uint8_t gid[16];
  ipv4_to_gid(r.dst_ipv4, gid);
  const std::string tenant = hooks_.tenant_of(r.src_ipv4);
  const std::vector<uint32_t> members =
      hooks_.mcast_members ? hooks_.mcast_members(tenant, gid) : std::vector<uint32_t>{};
  if (members.empty()) return;
  shm::Incoming in;
  in.opcode = r.opcode;
  in.qp_type = IBV_QPT_UD;
  in.src_qpn = r.src_qpn;
  in.imm_data = r.imm_data;
  in.solicited = r.solicited;
  in.length = r.length;
  in.qkey = r.qkey;
  in.src_ipv4 = r.src_ipv4;
  in.dst_ipv4 = r.dst_ipv4;
  const shm::Seg src{const_cast<uint8_t*>(data), r.length};
  for (uint32_t qpn : members) {
    auto it = ud_targets_.find(qpn);
    if (it == ud_targets_.end() || !shm::peer_qp_ready(it->second)) {
      shm::PeerQp t;
      if (!target(qpn, t)) continue;
      it = ud_targets_.insert_or_assign(qpn, std::move(t)).first;
    }
    const shm::PeerQp& t = it->second;
    shm::Placement pl;
    shm::admit_request(t, in, pl);
    if (pl.admission != shm::Admission::kDone || pl.status != IBV_WC_SUCCESS) continue;
    shm::copy_segs(pl.segs, pl.nsegs, &src, 1, r.length);
    shm::commit_request(t, pl, r.length);
  }
}

}  // namespace vrdma::daemon
