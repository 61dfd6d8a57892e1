// Requests the responder keeps for a while: RNR (no receive posted) or a destination that is
// not ready (or has not agreed to the connection) yet. A held request's payload is stored as
// it arrives, never allocated at the length a frame announces, and counted against bounds per
// connection, per link and per host; past them a request fails at once with the status its
// wait would have ended with.
#include <algorithm>

#include "common/log.h"
#include "daemon/router/router_state.h"

namespace vrdma::daemon {

void Router::hold(Link& link, Inbound& ib, const wire::Request& r, uint32_t payload,
                  PayloadDest& dest, RxFrame& f, int64_t next_ns, ibv_wc_status expiry) {
  uint64_t& host_bytes = host_held_[link.host_id];
  const char* over = nullptr;
  if (ib.held.size() >= lim_.held_requests_per_connection)
    over = "requests held for the connection";
  else if (link.held_requests >= lim_.held_requests_per_link)
    over = "requests held for the link";
  else if (ib.held_bytes + payload > lim_.held_bytes_per_connection)
    over = "bytes held for the connection";
  else if (link.held_bytes + payload > lim_.held_bytes_per_link)
    over = "bytes held for the link";
  else if (host_bytes + payload > lim_.held_bytes_per_host)
    over = "bytes held for the host";
  if (over) {
    if (!host_bytes) host_held_.erase(link.host_id);
    LOG_INFO("router: host %u QP 0x%x -> QP 0x%x: a request of %u bytes is over the bound on %s: "
             "it fails",
             link.host_id, ib.src_qpn, ib.dst_qpn, payload, over);
    ib.failed = true;
    // The requester waits for the oldest request held: it fails with what its own wait would
    // have ended with (the requester flushes the rest). Without an answer it would wait
    // forever, its link alive.
    if (!ib.held.empty())
      respond(link, ib.held.front().req, ib.held.front().expiry, 0, 0, nullptr, 0);
    release_held(ib, &link);
    return discard_and_reply(link, f, expiry, payload);
  }
  HeldRequest h;
  h.req = r;
  h.token = next_hold_token_++;
  h.next_ns = next_ns;
  h.rnr_left = r.rnr_retry;
  h.expiry = expiry;
  int64_t bound = shm::ack_timeout_ns(r.timeout) * (int64_t(r.retry_cnt) + 1);
  h.deadline_ns = r.timeout ? now_ + bound : INT64_MAX;
  h.reserved = payload;
  h.complete = payload == 0;
  ib.held_bytes += payload;
  link.held_bytes += payload;
  ++link.held_requests;
  host_bytes += payload;
  ib.held.push_back(std::move(h));
  ++held_count_;
  if (!payload) return;
  dest.kind = PayloadDest::Kind::kSink;
  f.kind = RxFrame::Kind::kHold;
  f.hold_key = inbound_key(link.id(), ib.src_qpn);
  f.hold_token = ib.held.back().token;
}

void Router::on_payload_data(Link& link, const uint8_t* data, size_t len) {
  RxFrame& f = frame(link.id());
  if (f.kind != RxFrame::Kind::kHold) return;
  auto it = inbound_.find(f.hold_key);
  if (it == inbound_.end() || it->second->held.empty() ||
      it->second->held.back().token != f.hold_token)
    return;  // dropped meanwhile: the rest of the payload goes nowhere
  HeldRequest& h = it->second->held.back();
  while (len && h.received < h.reserved) {
    if (h.chunks.empty() || h.chunks.back().size() == kHeldChunk) {
      h.chunks.emplace_back();
      h.chunks.back().reserve(std::min<uint64_t>(kHeldChunk, h.reserved - h.received));
    }
    auto& c = h.chunks.back();
    size_t n = std::min<uint64_t>({len, kHeldChunk - c.size(), h.reserved - h.received});
    c.insert(c.end(), data, data + n);
    h.received += n;
    data += n;
    len -= n;
  }
}

void Router::release_held(Inbound& ib, Link* link) {
  if (ib.held.empty()) return;
  auto host = host_held_.find(ib.host_id);
  for (const HeldRequest& h : ib.held) {
    if (link) {
      link->held_bytes -= h.reserved;
      --link->held_requests;
    }
    if (host != host_held_.end()) host->second -= h.reserved;
  }
  if (host != host_held_.end() && host->second == 0) host_held_.erase(host);
  held_count_ -= ib.held.size();
  ib.held_bytes = 0;
  ib.held.clear();
}

bool Router::execute_held(Link& link, Inbound& ib, int64_t now) {
  HeldRequest& h = ib.held.front();
  auto drop_all = [&](ibv_wc_status st) {
    respond(link, h.req, st, 0, 0, nullptr, 0);
    release_held(ib, &link);
    ib.failed = true;
    return false;
  };
  shm::Placement pl;
  const shm::PeerQp* dest = admit(ib, h.req, pl);
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
      } else if (shm::is_atomic(h.req.opcode)) {
        respond(link, h.req, IBV_WC_SUCCESS, 8, pl.atomic_old, nullptr, 0);
      } else {
        std::vector<shm::Seg> src;
        src.reserve(h.chunks.size());
        for (auto& c : h.chunks) src.push_back(shm::Seg{c.data(), c.size()});
        if (h.received == h.req.length)
          shm::copy_segs(pl.segs, pl.nsegs, src.data(), static_cast<int>(src.size()),
                         h.req.length);
        if (!shm::commit_request(*dest, pl, h.req.length))
          return drop_all(IBV_WC_REM_OP_ERR);
        respond(link, h.req, IBV_WC_SUCCESS, h.req.length, 0, nullptr, 0);
      }
      break;
  }
  link.held_bytes -= h.reserved;
  --link.held_requests;
  if (auto host = host_held_.find(ib.host_id); host != host_held_.end()) {
    host->second -= h.reserved;
    if (!host->second) host_held_.erase(host);
  }
  ib.held_bytes -= h.reserved;
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
      if (!h.complete || h.next_ns > now) break;
      if (!execute_held(*l, ib, now)) break;
    }
  }
}

}  // namespace vrdma::daemon
