// The responder side of the router: requests from other hosts executed against this host's
// QPs with the same responder logic the library uses (respond.h), once the request is known to
// belong to a connection the destination QP agreed to.
#include <arpa/inet.h>
#include <string.h>

#include "common/address.h"
#include "common/log.h"
#include "daemon/router/router_state.h"

namespace vrdma::daemon {

namespace {

// The request as the responder's routine takes it: with the destination's QP type, never the
// frame's.
shm::Incoming incoming_of(const wire::Request& r, uint32_t qp_type) {
  shm::Incoming in;
  in.opcode = r.opcode;
  in.qp_type = qp_type;
  in.src_qpn = r.src_qpn;
  in.imm_data = r.imm_data;
  in.solicited = r.solicited;
  in.rkey = r.rkey;
  in.remote_addr = r.remote_addr;
  in.compare_add = r.compare_add;
  in.swap = r.swap;
  in.length = r.length;
  in.qkey = r.qkey;
  in.src_ipv4 = r.src_ipv4;
  in.dst_ipv4 = r.dst_ipv4;
  return in;
}

// The payload of the frame being received goes to the placement's segments.
void place_into(const shm::Placement& pl, PayloadDest& dest) {
  for (int i = 0; i < pl.nsegs; ++i) dest.segs[i] = pl.segs[i];
  dest.nsegs = pl.nsegs;
  dest.kind = PayloadDest::Kind::kPlace;
}

}  // namespace

Router::RxFrame& Router::frame(uint32_t link_id) {
  auto& f = rx_[link_id];
  if (!f) f = std::make_unique<RxFrame>();
  return *f;
}

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
  } else if (q.type != IBV_QPT_UD) {
    const uint64_t key = inbound_key(link.id(), c.src_qpn);
    size_t on_link = 0;
    for (auto it = inbound_.lower_bound(inbound_key(link.id(), 0));
         it != inbound_.end() && (it->first >> 32) == link.id(); ++it)
      ++on_link;
    auto existing = inbound_.find(key);
    if (existing == inbound_.end() && on_link >= lim_.max_connections_per_link) {
      refused = "too many connections on the link";
    } else {
      if (existing != inbound_.end()) release_held(*existing->second, &link);
      auto in = std::make_unique<Inbound>();
      in->link_id = link.id();
      in->host_id = link.host_id;
      in->src_ipv4 = c.src_ipv4;
      in->src_qpn = c.src_qpn;
      in->dst_qpn = c.dst_qpn;
      in->type = q.type;
      in->owner = q.owner;
      target(c.dst_qpn, in->target);  // may not be ready yet; retried per request
      inbound_[key] = std::move(in);
    }
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

void Router::respond(Link& link, const wire::Request& r, ibv_wc_status st, uint64_t byte_len,
                     uint64_t atomic_old, const shm::Seg* data, int nseg) {
  if (r.qp_type == IBV_QPT_UD) return;
  wire::Response rep{r.src_qpn, static_cast<uint32_t>(st), r.seq, byte_len, atomic_old};
  uint64_t payload = data ? byte_len : 0;
  link.send(wire::Type::kResponse, &rep, sizeof(rep), data, nseg, payload, false);
}

const shm::PeerQp* Router::admit(Inbound& ib, const wire::Request& r, shm::Placement& pl) {
  // The destination takes the request only while its RTR names this connection's source;
  // until then it is not ready for it (RC: held and retried; UC: dropped, as a fabric drops
  // what reaches a QP not connected to the sender).
  if (!hooks_.names_peer(ib.dst_qpn, ib.src_ipv4, ib.src_qpn)) {
    pl = shm::Placement{};
    pl.admission = ib.type == IBV_QPT_UC ? shm::Admission::kDrop : shm::Admission::kNotReady;
    return nullptr;
  }
  if (!ib.target.valid() || !shm::peer_qp_ready(ib.target)) target(ib.dst_qpn, ib.target);
  if (!ib.target.valid() || ib.target.peer->client_id() != ib.owner) {
    pl = shm::Placement{};
    pl.admission = ib.type == IBV_QPT_UC ? shm::Admission::kDrop : shm::Admission::kNotReady;
    return nullptr;
  }
  const shm::PeerQp* dest = &ib.target;
  if (ib.type == IBV_QPT_XRC_RECV) {
    pl = shm::Placement{};
    if (!(dest = xrc_dest(ib, r.xrc_srqn, pl.status))) return nullptr;
  }
  // As the library's responder takes it on one host: an XRC request as its XRC_SEND QP's.
  shm::admit_request(*dest, incoming_of(r, wire::requester_type(ib.type)), pl);
  if (r.flags & wire::kMoreQueued) pl.report.flags |= shm::kRecvMore;
  return dest;
}

void Router::drop_inbound(uint64_t key, const char* why) {
  auto it = inbound_.find(key);
  if (it == inbound_.end()) return;
  Inbound& ib = *it->second;
  LOG_WARN("router: host %u: connection from %s QP 0x%x to QP 0x%x ended: %s", ib.host_id,
           ipv4_text(ib.src_ipv4).c_str(), ib.src_qpn, ib.dst_qpn, why);
  release_held(ib, find_link(ib.link_id));
  inbound_.erase(it);
}

void Router::on_request(Link& link, const wire::Request& r, uint32_t payload, PayloadDest& dest) {
  RxFrame& f = frame(link.id());
  f.kind = RxFrame::Kind::kNone;
  f.req = r;
  f.reply = true;
  if (r.qp_type == IBV_QPT_UD) return on_datagram(link, r, payload, dest, f);

  const uint64_t key = inbound_key(link.id(), r.src_qpn);
  auto it = inbound_.find(key);
  if (it == inbound_.end()) {
    // Not connected through this link (never, or the connection ended).
    return discard_and_reply(link, f, IBV_WC_REM_INV_REQ_ERR, payload);
  }
  Inbound& ib = *it->second;
  // In sequence: a gap or a repeat ends the connection.
  if (r.seq != ib.next_seq) {
    drop_inbound(key, "request out of sequence");
    return discard_and_reply(link, f, IBV_WC_REM_INV_REQ_ERR, payload);
  }
  ++ib.next_seq;
  if (ib.failed) return;
  // The destination's type decides, never the frame's: a request the destination's type does
  // not allow fails the connection.
  if (r.qp_type != ib.type || !shm::opcode_allowed(wire::requester_type(ib.type), r.opcode)) {
    ib.failed = true;
    release_held(ib, &link);
    return discard_and_reply(link, f, IBV_WC_REM_INV_REQ_ERR, payload);
  }
  if (!ib.held.empty()) return hold(link, ib, r, payload, dest, f, 0, ib.held.front().expiry);

  const shm::PeerQp* to = admit(ib, r, f.pl);
  switch (f.pl.admission) {
    case shm::Admission::kRnr:
      return hold(link, ib, r, payload, dest, f,
                  now_ + shm::rnr_timer_ns(ib.target.attrs->min_rnr_timer.load() & 31),
                  IBV_WC_RNR_RETRY_EXC_ERR);
    case shm::Admission::kNotReady:
      return hold(link, ib, r, payload, dest, f, now_ + 1'000'000, IBV_WC_RETRY_EXC_ERR);
    case shm::Admission::kDrop:
      return discard_and_reply(link, f, IBV_WC_SUCCESS, payload);
    case shm::Admission::kDone:
      break;
  }
  if (f.pl.status != IBV_WC_SUCCESS) {
    if (ib.type != IBV_QPT_UC) ib.failed = true;
    return discard_and_reply(link, f, f.pl.status, payload);
  }
  switch (r.opcode) {
    case IBV_WR_RDMA_READ:
      return respond(link, r, IBV_WC_SUCCESS, r.length, 0, f.pl.segs, f.pl.nsegs);
    case IBV_WR_ATOMIC_CMP_AND_SWP:
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
      return respond(link, r, IBV_WC_SUCCESS, 8, f.pl.atomic_old, nullptr, 0);
    default:
      break;
  }
  f.target = *to;
  f.kind = RxFrame::Kind::kPlace;
  if (!payload) return on_payload(link);
  place_into(f.pl, dest);
}

void Router::on_datagram(Link& link, const wire::Request& r, uint32_t payload, PayloadDest& dest,
                         RxFrame& f) {
  // A datagram needs no connection: the destination's Q_Key decides (admit_request).
  if (is_multicast_request(r)) return on_mcast_datagram(link, r, payload, dest, f);
  const shm::PeerQp* t = ud_target(link, r);
  if (!t) return;
  shm::admit_request(*t, incoming_of(r, IBV_QPT_UD), f.pl);
  if (r.flags & wire::kMoreQueued) f.pl.report.flags |= shm::kRecvMore;
  if (f.pl.admission != shm::Admission::kDone || f.pl.status != IBV_WC_SUCCESS) return;
  f.target = *t;
  f.reply = false;
  if (!payload) {
    shm::commit_request(*t, f.pl, 0);
    return;
  }
  f.kind = RxFrame::Kind::kPlace;
  place_into(f.pl, dest);
}

void Router::discard_and_reply(Link& link, RxFrame& f, ibv_wc_status st, uint32_t payload) {
  f.kind = RxFrame::Kind::kDiscardReply;
  f.status = st;
  if (!payload) on_payload(link);
}

void Router::on_payload(Link& link) {
  RxFrame& f = frame(link.id());
  switch (f.kind) {
    case RxFrame::Kind::kNone:
      break;
    case RxFrame::Kind::kPlace:
      if (f.req.qp_type != IBV_QPT_UD && f.target.valid())
        settle(*f.target.peer, f.target.via_qpn, f.target.pd, f.pl, f.req.length);
      if (f.reply) {
        bool delivered = shm::commit_request(f.target, f.pl, f.req.length);
        respond(link, f.req, delivered ? IBV_WC_SUCCESS : IBV_WC_REM_OP_ERR, f.req.length, 0,
                nullptr, 0);
      } else {
        shm::commit_request(f.target, f.pl, f.req.length);
      }
      f.target = shm::PeerQp{};
      break;
    case RxFrame::Kind::kHold: {
      // The held request has its whole payload: retry_held may run it.
      auto it = inbound_.find(f.hold_key);
      if (it != inbound_.end() && !it->second->held.empty() &&
          it->second->held.back().token == f.hold_token)
        it->second->held.back().complete = true;
      break;
    }
    case RxFrame::Kind::kDiscardReply:
      respond(link, f.req, f.status, 0, 0, nullptr, 0);
      break;
    case RxFrame::Kind::kMcast:
      deliver_multicast(f);
      break;
    case RxFrame::Kind::kReadData: {
      auto it = outbound_.find(f.qpn);
      if (it == outbound_.end()) break;
      Outbound& o = *it->second;
      if (o.failed || o.done - o.base != f.seq || o.done == o.sent) break;
      Wqe w;
      if (!read_wqe(o, o.done, w)) break;
      if (f.status == IBV_WC_SUCCESS) settle(*o.peer, 0, 0, f.pl, f.byte_len);
      complete(o, w, f.status, static_cast<uint32_t>(f.byte_len));
      if (f.status != IBV_WC_SUCCESS) {
        abort_qp(o, IBV_WC_WR_FLUSH_ERR, true);
      } else {
        o.oldest_ns = now_;
      }
      break;
    }
  }
  f.kind = RxFrame::Kind::kNone;
}

}  // namespace vrdma::daemon
