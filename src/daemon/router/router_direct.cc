// The direct path's set-up between hosts. A QP of this host whose destination is a container of
// another host, of the same tenant, connects straight to it over the pod network: its process
// opens a TCP connection from its own container to the destination container's address and
// presents a ticket, which the destination's vrdmad checks before it hands the connection to the
// destination QP's process. The routers carry only the ticket: this host's asks the other's to
// keep it for exactly that source QP, destination QP and connection (kDirect), after the checks
// a routed Connect gets (the source address is the sending host's, the destination QP exists at
// that address, of a type it connects to, in the same tenant); the other's answers (kDirectRep).
// Data never passes through either router.
#include <string.h>

#include "common/address.h"
#include "common/clock.h"
#include "common/log.h"
#include "daemon/router/router_state.h"

namespace vrdma::daemon {

namespace {
constexpr int64_t kDirectReplyNs = 3'000'000'000;  // a kDirect without an answer fails
}  // namespace

void Router::connect_direct(uint32_t qpn, const LocalQp& qp, uint32_t dst_ipv4, uint32_t dst_qpn,
                            const uint8_t* ticket, DirectDone done, uint32_t flags) {
  HostEntry h;
  Lookup r = dir_.host_of(dst_ipv4, &h);
  if (r == Lookup::kUnavailable) {
    LOG_WARN("router: cannot connect QP 0x%x: the directory is unavailable (%s)", qpn,
             dir_.describe().c_str());
    return done(EAGAIN, 0, 0, 0);
  }
  if (r == Lookup::kNotFound || h.host_id == cfg_.host_id) return done(EHOSTUNREACH, 0, 0, 0);
  int err = 0;
  Link* link = outbound_link(h.host_id, &err);
  if (!link) {
    LOG_WARN("router: no link to host %u: %s", h.host_id, strerror(err));
    return done(err, 0, 0, 0);
  }
  const uint64_t id = next_req_++;
  wire::Direct d{id, qp.ipv4, dst_ipv4, qpn, dst_qpn, qp.type, flags, {}};
  memcpy(d.ticket, ticket, sizeof(d.ticket));
  if (!link->send(wire::Type::kDirect, &d, sizeof(d))) return done(EAGAIN, 0, 0, 0);
  link->last_used_ns = now_ns();
  directs_[id] = PendingDirect{link->id(), now_ns() + kDirectReplyNs, std::move(done)};
}

void Router::on_direct(Link& link, const wire::Direct& d) {
  wire::DirectRep rep{d.req_id, wire::kRefused, 0, 0, {}, 0};
  LocalQp q;
  const char* refused = nullptr;
  if (d.flags & wire::kDirectProbe) {
    // A probe of the pod network for a connection rdma_cm is about to ask for: its other
    // checks are the connection's own.
    if (!owns_address(link, d.src_ipv4)) {
      refused = "the source address is not the sending host's";
    } else if (!hooks_.direct_ticket) {
      rep.status = wire::kNoDirect;
      refused = "no direct path on this host";
    } else if (int e = hooks_.direct_ticket(d, nullptr, &rep.port, &rep.dst_key)) {
      rep.status = e == wire::kNoDirect ? wire::kNoDirect : wire::kRefused;
      refused = e == wire::kNoDirect ? "no direct port there" : "refused";
    }
    if (refused) rep.port = 0, rep.dst_key = 0;
    if (!refused) rep.status = 0;
    rep.qp_type = refused ? 0 : d.qp_type;
    link.send(wire::Type::kDirectRep, &rep, sizeof(rep));
    return;
  }
  if (!owns_address(link, d.src_ipv4)) {
    refused = "the source address is not the sending host's";
  } else if (!hooks_.find_qp(d.dst_qpn, &q) || q.ipv4 != d.dst_ipv4) {
    refused = "no such QP at that address";
  } else if (!tenants_pair(d.src_ipv4, q.tenant)) {
    refused = "another tenant";
  } else if (!wire::connects_to(d.qp_type, q.type)) {
    refused = "another QP type";
  } else if (hooks_.tenant_of(d.src_ipv4) != q.tenant) {
    // Tenants that a rule lets pair share nothing but what this router carries.
    rep.status = wire::kNoDirect;
    refused = "tenants that pair through the router";
  } else if (!hooks_.direct_ticket) {
    rep.status = wire::kNoDirect;
    refused = "no direct path on this host";
  } else if (int e = hooks_.direct_ticket(d, &q, &rep.port, &rep.dst_key)) {
    rep.status = e == wire::kNoDirect ? wire::kNoDirect : wire::kRefused;
    refused = e == wire::kNoDirect ? "no direct path to that container" : "no room for a ticket";
  }
  if (refused) {
    LOG_DEBUG("router: host %u: direct %s QP 0x%x -> %s QP 0x%x refused: %s", link.host_id,
              ipv4_text(d.src_ipv4).c_str(), d.src_qpn, ipv4_text(d.dst_ipv4).c_str(),
              d.dst_qpn, refused);
    rep.port = 0;
    rep.dst_key = 0;
  } else {
    rep.status = 0;
    rep.qp_type = q.type;
    LOG_DEBUG("router: host %u QP 0x%x may connect directly to QP 0x%x (port %u)", link.host_id,
              d.src_qpn, d.dst_qpn, rep.port);
  }
  link.send(wire::Type::kDirectRep, &rep, sizeof(rep));
}

void Router::on_direct_rep(Link& link, const wire::DirectRep& r) {
  auto it = directs_.find(r.req_id);
  // Only the host we asked answers.
  if (it == directs_.end() || it->second.link_id != link.id()) return;
  auto done = std::move(it->second.done);
  directs_.erase(it);
  done(r.status, r.qp_type, r.port, r.dst_key);
}

void Router::expire_directs(int64_t now, uint32_t link_id) {
  for (auto it = directs_.begin(); it != directs_.end();) {
    const bool gone = link_id ? it->second.link_id == link_id : it->second.deadline <= now;
    if (!gone) {
      ++it;
      continue;
    }
    auto done = std::move(it->second.done);
    it = directs_.erase(it);
    done(link_id ? EHOSTUNREACH : ETIMEDOUT, 0, 0, 0);
  }
}

}  // namespace vrdma::daemon
