// The responder side of the router: requests from other hosts executed against this host's
// QPs with the same responder logic the library uses (respond.h).
#include <string.h>

#include "common/log.h"
#include "daemon/router/router_state.h"

namespace vrdma::daemon {

namespace {

shm::Incoming incoming_of(const wire::Request& r) {
  shm::Incoming in;
  in.opcode = r.opcode;
  in.qp_type = r.qp_type;
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

const shm::PeerQp* Router::ud_target(const wire::Request& r) {
  auto it = ud_targets_.find(r.dst_qpn);
  if (it != ud_targets_.end() && shm::peer_qp_ready(it->second)) return &it->second;
  LocalQp q;
  if (!hooks_.find_qp(r.dst_qpn, &q) || q.type != IBV_QPT_UD || q.ipv4 != r.dst_ipv4 ||
      hooks_.tenant_of(r.src_ipv4) != q.tenant)
    return nullptr;
  shm::PeerQp t;
  if (!target(r.dst_qpn, t)) return nullptr;
  return &(ud_targets_[r.dst_qpn] = std::move(t));
}

void Router::on_connect(Link& link, const wire::Connect& c) {
  wire::ConnectRep rep{c.req_id, 0, 0};
  LocalQp q;
  if (!hooks_.find_qp(c.dst_qpn, &q) || q.ipv4 != c.dst_ipv4) {
    rep.status = ENOENT;
  } else if (hooks_.tenant_of(c.src_ipv4) != q.tenant) {
    LOG_INFO("router: host %u QP 0x%x -> QP 0x%x refused: tenant %s -> %s", link.host_id, c.src_qpn,
             c.dst_qpn, hooks_.tenant_of(c.src_ipv4).c_str(), q.tenant.c_str());
    rep.status = EACCES;
  } else if (q.type != c.qp_type) {
    rep.status = EINVAL;
  } else {
    rep.qp_type = q.type;
    if (q.type != IBV_QPT_UD) {
      auto& in = inbound_[inbound_key(link.id(), c.src_qpn)];
      if (in) held_count_ -= in->held.size();
      in = std::make_unique<Inbound>();
      in->link_id = link.id();
      in->src_qpn = c.src_qpn;
      in->dst_qpn = c.dst_qpn;
      in->owner = q.owner;
      target(c.dst_qpn, in->target);  // may not be ready yet; retried per request
    }
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

namespace {

// The payload of the frame being received goes to the placement's segments.
void place_into(const shm::Placement& pl, PayloadDest& dest) {
  for (int i = 0; i < pl.nsegs; ++i) dest.segs[i] = pl.segs[i];
  dest.nsegs = pl.nsegs;
  dest.discard = false;
}

}  // namespace

void Router::on_request(Link& link, const wire::Request& r, uint32_t payload, PayloadDest& dest) {
  RxFrame& f = frame(link.id());
  f.kind = RxFrame::Kind::kNone;
  f.req = r;
  f.reply = true;
  const bool data = shm::carries_data(r.opcode);
  if ((data && payload != r.length) || (!data && payload)) return;  // malformed: drop
  if (r.qp_type == IBV_QPT_UD) return on_datagram(r, payload, dest, f);

  auto it = inbound_.find(inbound_key(link.id(), r.src_qpn));
  if (it == inbound_.end()) {
    // Not connected through this link (the destination's host restarted?).
    return discard_and_reply(link, f, IBV_WC_REM_INV_REQ_ERR, payload);
  }
  Inbound& ib = *it->second;
  if (ib.failed) return;
  if (!ib.held.empty()) return hold(ib, r, payload, dest, f, 0);

  if (!ib.target.valid() || !shm::peer_qp_ready(ib.target)) target(ib.dst_qpn, ib.target);
  if (!ib.target.valid()) {
    f.pl = shm::Placement{};
    f.pl.admission = shm::Admission::kNotReady;
  } else {
    shm::admit_request(ib.target, incoming_of(r), f.pl);
  }
  switch (f.pl.admission) {
    case shm::Admission::kRnr:
      return hold(ib, r, payload, dest, f,
                  now_ + shm::rnr_timer_ns(ib.target.attrs->min_rnr_timer.load() & 31));
    case shm::Admission::kNotReady:
      return hold(ib, r, payload, dest, f, now_ + 1'000'000);
    case shm::Admission::kDrop:
      return discard_and_reply(link, f, IBV_WC_SUCCESS, payload);
    case shm::Admission::kDone:
      break;
  }
  if (f.pl.status != IBV_WC_SUCCESS) {
    if (r.qp_type == IBV_QPT_RC) ib.failed = true;
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
  f.target = ib.target;
  f.kind = RxFrame::Kind::kPlace;
  if (!payload) return on_payload(link);
  place_into(f.pl, dest);
}

void Router::on_datagram(const wire::Request& r, uint32_t payload, PayloadDest& dest, RxFrame& f) {
  const shm::PeerQp* t = ud_target(r);
  if (!t || !shm::carries_data(r.opcode)) return;
  shm::admit_request(*t, incoming_of(r), f.pl);
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

void Router::hold(Inbound& ib, const wire::Request& r, uint32_t payload, PayloadDest& dest,
                  RxFrame& f, int64_t next_ns) {
  HeldRequest h;
  h.req = r;
  h.next_ns = next_ns;
  h.rnr_left = r.rnr_retry;
  int64_t bound = shm::ack_timeout_ns(r.timeout) * (int64_t(r.retry_cnt) + 1);
  h.deadline_ns = r.timeout ? now_ + bound : INT64_MAX;
  h.data.resize(payload);
  ib.held.push_back(std::move(h));
  ++held_count_;
  if (!payload) return;
  HeldRequest& b = ib.held.back();
  dest.segs[0] = shm::Seg{b.data.data(), payload};
  dest.nsegs = 1;
  dest.discard = false;
  f.kind = RxFrame::Kind::kHold;
  f.in = &ib;
}

void Router::on_payload(Link& link) {
  RxFrame& f = frame(link.id());
  switch (f.kind) {
    case RxFrame::Kind::kNone:
      break;
    case RxFrame::Kind::kPlace:
      if (f.reply) {
        bool delivered = shm::commit_request(f.target, f.pl, f.req.length);
        respond(link, f.req, delivered ? IBV_WC_SUCCESS : IBV_WC_REM_OP_ERR, f.req.length, 0,
                nullptr, 0);
      } else {
        shm::commit_request(f.target, f.pl, f.req.length);
      }
      f.target = shm::PeerQp{};
      break;
    case RxFrame::Kind::kHold:
      break;  // the held request is complete; retry_held runs it
    case RxFrame::Kind::kDiscardReply:
      respond(link, f.req, f.status, 0, 0, nullptr, 0);
      break;
    case RxFrame::Kind::kReadData: {
      auto it = outbound_.find(f.qpn);
      if (it == outbound_.end()) break;
      Outbound& o = *it->second;
      if (o.failed || o.done != f.seq || o.done == o.sent) break;
      Wqe w;
      if (!read_wqe(o, o.done, w)) break;
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

bool Router::execute_held(Link& link, Inbound& ib, int64_t now) {
  HeldRequest& h = ib.held.front();
  auto drop_all = [&](ibv_wc_status st) {
    respond(link, h.req, st, 0, 0, nullptr, 0);
    held_count_ -= ib.held.size();
    ib.held.clear();
    ib.failed = true;
    return false;
  };
  if (!ib.target.valid() || !shm::peer_qp_ready(ib.target)) target(ib.dst_qpn, ib.target);
  shm::Placement pl;
  if (ib.target.valid()) {
    shm::admit_request(ib.target, incoming_of(h.req), pl);
  } else {
    pl.admission = shm::Admission::kNotReady;
  }
  switch (pl.admission) {
    case shm::Admission::kRnr:
      if (h.req.rnr_retry != 7 && h.rnr_left-- <= 0) return drop_all(IBV_WC_RNR_RETRY_EXC_ERR);
      h.next_ns = now + shm::rnr_timer_ns(ib.target.attrs->min_rnr_timer.load() & 31);
      return false;
    case shm::Admission::kNotReady:
      if (now > h.deadline_ns) return drop_all(IBV_WC_RETRY_EXC_ERR);
      h.next_ns = now + 1'000'000;
      return false;
    case shm::Admission::kDrop:
      respond(link, h.req, IBV_WC_SUCCESS, 0, 0, nullptr, 0);
      break;
    case shm::Admission::kDone:
      if (pl.status != IBV_WC_SUCCESS) return drop_all(pl.status);
      if (h.req.opcode == IBV_WR_RDMA_READ) {
        respond(link, h.req, IBV_WC_SUCCESS, h.req.length, 0, pl.segs, pl.nsegs);
      } else if (h.req.opcode == IBV_WR_ATOMIC_CMP_AND_SWP ||
                 h.req.opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
        respond(link, h.req, IBV_WC_SUCCESS, 8, pl.atomic_old, nullptr, 0);
      } else {
        shm::Seg src{h.data.data(), h.data.size()};
        shm::copy_segs(pl.segs, pl.nsegs, &src, 1, h.req.length);
        if (!shm::commit_request(ib.target, pl, h.req.length))
          return drop_all(IBV_WC_REM_OP_ERR);
        respond(link, h.req, IBV_WC_SUCCESS, h.req.length, 0, nullptr, 0);
      }
      break;
  }
  ib.held.pop_front();
  --held_count_;
  return true;
}

void Router::retry_held(int64_t now) {
  for (auto& [key, ibp] : inbound_) {
    Inbound& ib = *ibp;
    if (ib.held.empty()) continue;
    Link* l = find_link(ib.link_id);
    if (!l) continue;
    while (!ib.held.empty() && l->has_room(64)) {
      HeldRequest& h = ib.held.front();
      // Its payload may still be arriving (the frame being received on the link).
      auto f = rx_.find(ib.link_id);
      if (f != rx_.end() && f->second->kind == RxFrame::Kind::kHold && ib.held.size() == 1 &&
          f->second->in == &ib)
        break;
      if (h.next_ns > now) break;
      if (!execute_held(*l, ib, now)) break;
    }
  }
}

}  // namespace vrdma::daemon
