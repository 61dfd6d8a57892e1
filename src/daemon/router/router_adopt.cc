// Links handed to the router already connected and authenticated (Router::adopt_link): the
// seam through which a transport other than the router's own TCP dialling and accepting (the
// unit tests' socket pairs) reaches the requester and responder.
#include <errno.h>

#include "common/address.h"
#include "common/log.h"
#include "daemon/router/router_state.h"

namespace vrdma::daemon {

int Router::adopt_link(UniqueFd fd, uint32_t host_id, bool outbound, int64_t now,
                       uint32_t lane) {
  if (!fd) return EBADF;
  if (lane >= wire::kLanes) return EINVAL;
  HostEntry h;
  if (host_id == cfg_.host_id || dir_.host_by_id(host_id, &h) != Lookup::kFound)
    return EHOSTUNREACH;
  uint32_t ip = 0;
  uint16_t port = 0;
  if (!parse_ipv4_port(h.router, &ip, &port)) return EHOSTUNREACH;
  if (outbound) {
    if (auto it = host_links_.find(lane_key(host_id, lane));
        it != host_links_.end() && find_link(it->second))
      return EEXIST;
  }
  if (links_.size() >= lim_.max_links) return EAGAIN;
  const uint32_t id = next_link_id_++;
  auto link = std::make_unique<Link>(id, std::move(fd), outbound);
  if (outbound) link->tcp_connected();  // no TLS session: open at once
  link->host_id = host_id;
  link->lane = lane;
  link->authenticated = true;
  link->peer_ipv4 = ip;
  link->peer_addr = h.router;
  link->peer_cidrs = h.cidrs;
  link->opened_ns = now;
  link->last_used_ns = now;
  link->last_rx_ns = now;
  watch(*link);
  links_.emplace(id, std::move(link));
  if (outbound) {
    host_links_[lane_key(host_id, lane)] = id;
    ++link_connects_[host_id];
  }
  LOG_INFO("router: link %u %s host %u adopted (plaintext, %s lane)", id,
           outbound ? "to" : "from", host_id, lane == wire::kMainLane ? "main" : "latency");
  return 0;
}

}  // namespace vrdma::daemon
