// The responder: requests of connections executed against this side's QPs (responder.h).
// Held requests (RNR, not ready yet) are in held.cc.
#include "transport/responder.h"

#include <string.h>

#include "common/address.h"
#include "common/log.h"
#include "shm/settle.h"
#include "shm/work_request.h"

namespace vrdma::transport {

namespace {

// The payload of the frame being received goes to the placement's segments.
void place_into(const shm::Placement& pl, PayloadDest& dest) {
  for (int i = 0; i < pl.nsegs; ++i) dest.segs[i] = pl.segs[i];
  dest.nsegs = pl.nsegs;
  dest.kind = PayloadDest::Kind::kPlace;
}

constexpr uint32_t kXrcSrq = static_cast<uint32_t>(proto::QpType::kXrcSrq);

// Destroyed (or its number reused), or its owner died: asked again.
bool gone(const shm::PeerQp& p) {
  return !p.attrs || p.attrs->gone.load(std::memory_order_acquire) || p.peer->dead();
}

}  // namespace

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

bool ResponderEnv::xrc_srq(const InConn&, uint32_t, shm::PeerQp&) { return false; }
const shm::PeerQp* ResponderEnv::ud_target(Link&, const wire::Request&) { return nullptr; }
bool ResponderEnv::take_held(uint32_t, uint64_t, const char**) { return true; }
void ResponderEnv::give_held(uint32_t, uint64_t) {}

Responder::Rx& Responder::rx(uint32_t link_id) {
  auto& f = rx_[link_id];
  if (!f) f = std::make_unique<Rx>();
  return *f;
}

InConn* Responder::connect(Link& link, uint32_t peer_id, uint32_t src_ipv4, uint32_t src_qpn,
                           uint32_t dst_qpn, uint32_t type, uint32_t owner) {
  const uint64_t key = conn_key(link.id(), src_qpn);
  auto existing = conns_.find(key);
  if (existing == conns_.end()) {
    size_t on_link = 0;
    for (auto it = conns_.lower_bound(conn_key(link.id(), 0));
         it != conns_.end() && (it->first >> 32) == link.id(); ++it)
      ++on_link;
    if (on_link >= lim_.connections_per_link) return nullptr;
  } else {
    release_held(*existing->second, &link);
  }
  auto c = std::make_unique<InConn>();
  c->link_id = link.id();
  c->peer_id = peer_id;
  c->src_ipv4 = src_ipv4;
  c->src_qpn = src_qpn;
  c->dst_qpn = dst_qpn;
  c->type = type;
  c->owner = owner;
  env_.target(dst_qpn, c->target);  // may not be ready yet; tried again per request
  InConn* p = c.get();
  conns_[key] = std::move(c);
  return p;
}

InConn* Responder::find(uint32_t link_id, uint32_t src_qpn) {
  auto it = conns_.find(conn_key(link_id, src_qpn));
  return it == conns_.end() ? nullptr : it->second.get();
}

void Responder::drop(Link& link, uint32_t src_qpn, const char* why) {
  auto it = conns_.find(conn_key(link.id(), src_qpn));
  if (it == conns_.end()) return;
  InConn& c = *it->second;
  LOG_WARN("%s %u: connection from %s QP 0x%x to QP 0x%x ended: %s", env_.who(), c.peer_id,
           ipv4_text(c.src_ipv4).c_str(), c.src_qpn, c.dst_qpn, why);
  release_held(c, &link);
  conns_.erase(it);
}

void Responder::forget_link(Link& link) {
  for (auto it = conns_.lower_bound(conn_key(link.id(), 0));
       it != conns_.end() && (it->first >> 32) == link.id();) {
    release_held(*it->second, &link);
    it = conns_.erase(it);
  }
  rx_.erase(link.id());
}

bool Responder::placing() const {
  for (auto& [id, f] : rx_)
    if (f->kind == Rx::Kind::kPlace) return true;
  return false;
}

void Responder::respond(Link& link, const wire::Request& r, ibv_wc_status st, uint64_t byte_len,
                        uint64_t atomic_old, const shm::Seg* data, int nseg) {
  if (r.qp_type == IBV_QPT_UD) return;
  wire::Response rep{r.src_qpn, static_cast<uint32_t>(st), r.seq, byte_len, atomic_old};
  uint64_t payload = data ? byte_len : 0;
  link.send(wire::Type::kResponse, &rep, sizeof(rep), data, nseg, payload, false);
}

const shm::PeerQp* Responder::xrc_dest(InConn& c, uint32_t srqn, ibv_wc_status& st) {
  st = IBV_WC_REM_INV_REQ_ERR;
  auto it = c.xrc_srqs.find(srqn);
  if (it != c.xrc_srqs.end() && gone(it->second)) {
    c.xrc_srqs.erase(it);
    it = c.xrc_srqs.end();
  }
  if (it == c.xrc_srqs.end()) {
    shm::PeerQp p;
    if (!env_.xrc_srq(c, srqn, p) || p.type != kXrcSrq) return nullptr;
    it = c.xrc_srqs.emplace(srqn, std::move(p)).first;
  }
  st = IBV_WC_SUCCESS;
  c.xrc_target = it->second;
  c.xrc_target.attrs = c.target.attrs;
  c.xrc_target.qpn = c.target.qpn;
  return &c.xrc_target;
}

const shm::PeerQp* Responder::admit(InConn& c, const wire::Request& r, shm::Placement& pl) {
  // The destination takes the request only while its RTR names this connection's source;
  // until then it is not ready for it (RC: held and retried; UC: dropped, as a fabric drops
  // what reaches a QP not connected to the sender).
  if (!env_.names_peer(c.dst_qpn, c.src_ipv4, c.src_qpn)) {
    pl = shm::Placement{};
    pl.admission = c.type == IBV_QPT_UC ? shm::Admission::kDrop : shm::Admission::kNotReady;
    return nullptr;
  }
  if (!c.target.valid() || !shm::peer_qp_ready(c.target)) env_.target(c.dst_qpn, c.target);
  if (!c.target.valid() || c.target.peer->client_id() != c.owner) {
    pl = shm::Placement{};
    pl.admission = c.type == IBV_QPT_UC ? shm::Admission::kDrop : shm::Admission::kNotReady;
    return nullptr;
  }
  const shm::PeerQp* dest = &c.target;
  if (c.type == IBV_QPT_XRC_RECV) {
    pl = shm::Placement{};
    if (!(dest = xrc_dest(c, r.xrc_srqn, pl.status))) return nullptr;
  }
  // As the library's responder takes it on one host: an XRC request as its XRC_SEND QP's.
  shm::admit_request(*dest, incoming_of(r, wire::requester_type(c.type)), pl);
  if (r.flags & wire::kMoreQueued) pl.report.flags |= shm::kRecvMore;
  return dest;
}

void Responder::on_request(Link& link, const wire::Request& r, uint32_t payload,
                           PayloadDest& dest, int64_t now) {
  Rx& f = rx(link.id());
  f.kind = Rx::Kind::kNone;
  f.req = r;
  f.reply = true;
  if (r.qp_type == IBV_QPT_UD) return on_datagram(link, r, payload, dest, f);

  const uint64_t key = conn_key(link.id(), r.src_qpn);
  auto it = conns_.find(key);
  if (it == conns_.end()) {
    // Not connected through this link (never, or the connection ended).
    return discard_and_reply(link, f, IBV_WC_REM_INV_REQ_ERR, payload);
  }
  InConn& c = *it->second;
  // In sequence: a gap or a repeat ends the connection.
  if (r.seq != c.next_seq) {
    drop(link, r.src_qpn, "request out of sequence");
    return discard_and_reply(link, f, IBV_WC_REM_INV_REQ_ERR, payload);
  }
  ++c.next_seq;
  if (c.failed) return;
  // The destination's type decides, never the frame's: a request the destination's type does
  // not allow fails the connection.
  if (r.qp_type != c.type || !shm::opcode_allowed(wire::requester_type(c.type), r.opcode)) {
    c.failed = true;
    release_held(c, &link);
    return discard_and_reply(link, f, IBV_WC_REM_INV_REQ_ERR, payload);
  }
  if (!c.held.empty())
    return hold(link, c, r, payload, dest, f, now, 0, c.held.front().expiry);

  const shm::PeerQp* to = admit(c, r, f.pl);
  switch (f.pl.admission) {
    case shm::Admission::kRnr:
      return hold(link, c, r, payload, dest, f, now,
                  now + shm::rnr_timer_ns(c.target.attrs->min_rnr_timer.load() & 31),
                  IBV_WC_RNR_RETRY_EXC_ERR);
    case shm::Admission::kNotReady:
      return hold(link, c, r, payload, dest, f, now, now + 1'000'000, IBV_WC_RETRY_EXC_ERR);
    case shm::Admission::kDrop:
      return discard_and_reply(link, f, IBV_WC_SUCCESS, payload);
    case shm::Admission::kDone:
      break;
  }
  if (f.pl.status != IBV_WC_SUCCESS) {
    if (c.type != IBV_QPT_UC) c.failed = true;
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
  f.kind = Rx::Kind::kPlace;
  if (!payload) {
    on_payload(link);
    return;
  }
  place_into(f.pl, dest);
}

void Responder::on_datagram(Link& link, const wire::Request& r, uint32_t payload,
                            PayloadDest& dest, Rx& f) {
  // A datagram needs no connection: the destination's Q_Key decides (admit_request).
  const shm::PeerQp* t = env_.ud_target(link, r);
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
  f.kind = Rx::Kind::kPlace;
  place_into(f.pl, dest);
}

void Responder::discard_and_reply(Link& link, Rx& f, ibv_wc_status st, uint32_t payload) {
  f.kind = Rx::Kind::kDiscardReply;
  f.status = st;
  if (!payload) on_payload(link);
}

bool Responder::on_payload(Link& link) {
  auto fit = rx_.find(link.id());
  if (fit == rx_.end() || fit->second->kind == Rx::Kind::kNone) return false;
  Rx& f = *fit->second;
  switch (f.kind) {
    case Rx::Kind::kNone:
      break;
    case Rx::Kind::kPlace:
      if (f.req.qp_type != IBV_QPT_UD && f.target.valid())
        shm::settle(*f.target.peer, f.target.via_qpn, f.target.pd, f.pl, f.req.length);
      if (f.reply) {
        bool delivered = shm::commit_request(f.target, f.pl, f.req.length);
        respond(link, f.req, delivered ? IBV_WC_SUCCESS : IBV_WC_REM_OP_ERR, f.req.length, 0,
                nullptr, 0);
      } else {
        shm::commit_request(f.target, f.pl, f.req.length);
      }
      f.target = shm::PeerQp{};
      break;
    case Rx::Kind::kHold: {
      // The held request has its whole payload: retry_held may run it.
      auto it = conns_.find(f.hold_key);
      if (it != conns_.end() && !it->second->held.empty() &&
          it->second->held.back().token == f.hold_token)
        it->second->held.back().complete = true;
      break;
    }
    case Rx::Kind::kDiscardReply:
      respond(link, f.req, f.status, 0, 0, nullptr, 0);
      break;
  }
  f.kind = Rx::Kind::kNone;
  return true;
}

}  // namespace vrdma::transport
