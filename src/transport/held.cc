// Requests the responder keeps for a while: RNR (no receive posted) or a destination that is
// not ready (or has not agreed to the connection) yet. A held request's payload is stored as
// it arrives, never allocated at the length a frame announces, and counted against bounds per
// connection, per link and whatever the environment adds; past them a request fails at once
// with the status its wait would have ended with.
#include <algorithm>

#include "common/log.h"
#include "shm/work_request.h"
#include "transport/responder.h"

namespace vrdma::transport {

void Responder::hold(Link& link, InConn& c, const wire::Request& r, uint32_t payload,
                     PayloadDest& dest, Rx& f, int64_t now, int64_t next_ns,
                     ibv_wc_status expiry) {
  const char* over = nullptr;
  if (c.held.size() >= lim_.held_requests_per_connection)
    over = "requests held for the connection";
  else if (link.held_requests >= lim_.held_requests_per_link)
    over = "requests held for the link";
  else if (c.held_bytes + payload > lim_.held_bytes_per_connection)
    over = "bytes held for the connection";
  else if (link.held_bytes + payload > lim_.held_bytes_per_link)
    over = "bytes held for the link";
  else if (!env_.take_held(c.peer_id, payload, &over) && !over)
    over = "bytes held";
  if (over) {
    LOG_INFO("%s %u QP 0x%x -> QP 0x%x: a request of %u bytes is over the bound on %s: it fails",
             env_.who(), c.peer_id, c.src_qpn, c.dst_qpn, payload, over);
    c.failed = true;
    // The requester waits for the oldest request held: it fails with what its own wait would
    // have ended with (the requester flushes the rest). Without an answer it would wait
    // forever, its link alive.
    if (!c.held.empty())
      respond(link, c.held.front().req, c.held.front().expiry, 0, 0, nullptr, 0);
    release_held(c, &link);
    return discard_and_reply(link, f, expiry, payload);
  }
  HeldRequest h;
  h.req = r;
  h.token = next_hold_token_++;
  h.next_ns = next_ns;
  h.rnr_left = r.rnr_retry;
  h.expiry = expiry;
  int64_t bound = shm::ack_timeout_ns(r.timeout) * (int64_t(r.retry_cnt) + 1);
  h.deadline_ns = r.timeout ? now + bound : INT64_MAX;
  h.reserved = payload;
  h.complete = payload == 0;
  c.held_bytes += payload;
  link.held_bytes += payload;
  ++link.held_requests;
  c.held.push_back(std::move(h));
  ++held_count_;
  if (!payload) return;
  dest.kind = PayloadDest::Kind::kSink;
  f.kind = Rx::Kind::kHold;
  f.hold_key = conn_key(link.id(), c.src_qpn);
  f.hold_token = c.held.back().token;
}

void Responder::on_payload_data(Link& link, const uint8_t* data, size_t len) {
  auto fit = rx_.find(link.id());
  if (fit == rx_.end() || fit->second->kind != Rx::Kind::kHold) return;
  Rx& f = *fit->second;
  auto it = conns_.find(f.hold_key);
  if (it == conns_.end() || it->second->held.empty() ||
      it->second->held.back().token != f.hold_token)
    return;  // dropped meanwhile: the rest of the payload goes nowhere
  HeldRequest& h = it->second->held.back();
  while (len && h.received < h.reserved) {
    if (h.chunks.empty() || h.chunks.back().size() == kHeldChunk) {
      h.chunks.emplace_back();
      h.chunks.back().reserve(std::min<uint64_t>(kHeldChunk, h.reserved - h.received));
    }
    auto& chunk = h.chunks.back();
    size_t n = std::min<uint64_t>({len, kHeldChunk - chunk.size(), h.reserved - h.received});
    chunk.insert(chunk.end(), data, data + n);
    h.received += n;
    data += n;
    len -= n;
  }
}

void Responder::unheld(Link* link, InConn& c, const HeldRequest& h) {
  if (link) {
    link->held_bytes -= h.reserved;
    --link->held_requests;
  }
  env_.give_held(c.peer_id, h.reserved);
  c.held_bytes -= h.reserved;
  --held_count_;
}

void Responder::release_held(InConn& c, Link* link) {
  for (const HeldRequest& h : c.held) unheld(link, c, h);
  c.held.clear();
}

bool Responder::execute_held(Link& link, InConn& c, int64_t now) {
  HeldRequest& h = c.held.front();
  auto drop_all = [&](ibv_wc_status st) {
    respond(link, h.req, st, 0, 0, nullptr, 0);
    release_held(c, &link);
    c.failed = true;
    return false;
  };
  shm::Placement pl;
  const shm::PeerQp* dest = admit(c, h.req, pl);
  switch (pl.admission) {
    case shm::Admission::kRnr:
      if (h.req.rnr_retry != 7 && h.rnr_left-- <= 0) return drop_all(IBV_WC_RNR_RETRY_EXC_ERR);
      h.next_ns = now + shm::rnr_timer_ns(c.target.attrs->min_rnr_timer.load() & 31);
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
        for (auto& chunk : h.chunks) src.push_back(shm::Seg{chunk.data(), chunk.size()});
        if (h.received == h.req.length)
          shm::copy_segs(pl.segs, pl.nsegs, src.data(), static_cast<int>(src.size()),
                         h.req.length);
        if (!shm::commit_request(*dest, pl, h.req.length)) return drop_all(IBV_WC_REM_OP_ERR);
        respond(link, h.req, IBV_WC_SUCCESS, h.req.length, 0, nullptr, 0);
      }
      break;
  }
  unheld(&link, c, h);
  c.held.pop_front();
  return true;
}

}  // namespace vrdma::transport
