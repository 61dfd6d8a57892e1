// The link from this router to itself: the mediated path between tenants of one host.
//
// Two containers of different tenants that policy lets pair never share memory: instead of
// mapping each other's queues they are connected as if they were on two hosts: an outbound and
// an inbound link of this router, joined in memory (Link::join). The requester queues the
// sender's frames on one end; the responder on the other checks the connection (source
// address, destination QP, tenants, consent) and every request (rkey, bounds, access flags)
// exactly as it checks another host's, and its reads copy each payload from the sender's memory
// into the destination's: one copy, no system call. Each end also has an end of a Unix socket
// pair, which carries no data: it gives the link a descriptor, and the other end the end of the
// stream when one goes. No TLS: both ends are this process.
#include <errno.h>
#include <string.h>
#include <sys/socket.h>

#include "common/clock.h"
#include "common/log.h"
#include "daemon/router/router_state.h"

namespace vrdma::daemon {

Link* Router::self_link(uint32_t lane, int* err) {
  if (auto it = host_links_.find(lane_key(cfg_.host_id, lane)); it != host_links_.end())
    if (Link* l = find_link(it->second); l && l->self) return l;
  if (lane >= wire::kLanes) {
    *err = EINVAL;
    return nullptr;
  }
  if (links_.size() + 2 > lim_.max_links) {
    *err = EAGAIN;
    return nullptr;
  }
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds) < 0) {
    *err = errno;
    return nullptr;
  }
  const int64_t now = now_ns();
  const uint32_t out_id = next_link_id_++, in_id = next_link_id_++;
  auto out = std::make_unique<Link>(out_id, UniqueFd(fds[0]), true);
  auto in = std::make_unique<Link>(in_id, UniqueFd(fds[1]), false);
  for (Link* l : {out.get(), in.get()}) {
    l->self = true;
    l->lane = lane;
    l->host_id = cfg_.host_id;
    l->peer_addr = "this host";
    l->peer_boot = boot_;
    l->opened_ns = now;
    l->last_used_ns = now;
    l->last_rx_ns = now;
  }
  out->tcp_connected();  // open at once: no handshake with ourselves
  in->authenticated = true;
  Link::join(*out, *in);
  watch(*out);
  watch(*in);
  Link* l = out.get();
  links_.emplace(out_id, std::move(out));
  links_.emplace(in_id, std::move(in));
  host_links_[lane_key(cfg_.host_id, lane)] = out_id;
  ++link_connects_[cfg_.host_id];
  LOG_INFO("router: links %u and %u: this host to itself (mediated connections, %s lane)", out_id,
           in_id, lane == wire::kMainLane ? "main" : "latency");
  return l;
}

void Router::connect_local(uint32_t qpn, const LocalQp& qp, uint32_t dst_ipv4, uint32_t dst_qpn,
                           ConnectDone done, int lane) {
  int err = 0;
  const int cls = connect_class(qpn, qp);
  Link* link = self_link(lane >= 0 ? static_cast<uint32_t>(lane) : lane_of(cls), &err);
  if (!link) {
    LOG_WARN("router: no link to this host itself: %s", strerror(err));
    return done(err, 0);
  }
  send_connect(*link, qpn, qp, cls, dst_ipv4, dst_qpn, std::move(done));
}

bool Router::tenants_pair(uint32_t src_ipv4, const std::string& dst_tenant) const {
  const std::string src = hooks_.tenant_of(src_ipv4);
  if (hooks_.tenants_pair) return hooks_.tenants_pair(src, dst_tenant);
  return src == dst_tenant;
}

}  // namespace vrdma::daemon
