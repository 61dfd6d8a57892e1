// Lanes: the links one host opens to another, one per group of QoS classes (wire.h). The main
// lane carries bulk QPs, rdma_cm and everything else; the latency lane carries the QPs of the
// latency class alone, so that their frames never wait behind bulk bytes already in a TCP
// stream (the kernel's unsent bytes and the peer's socket buffer, which no scheduler reorders).
//
// A QP's lane is fixed when it connects, from its address's class (SL, GRH traffic class) as
// the library keeps it in the QP's shared state; its QoS flow uses the same class from then on.
// Its Connect, requests, responses, PeerGone and pings then all go on that lane's link, so its
// frames keep their order, and a link that fails takes exactly its own QPs with it. A lane's
// link is opened when its first QP connects (most host pairs never carry the latency class),
// and closes when idle like any link.
//
// With several bulk links per host pair (RouterConfig::bulk_links, vrdmad --router-links), the
// bulk QPs connecting to a host take them in turn: lanes main, bulk1, bulk2, ... Each link is
// its own TCP stream (and TLS session), so the kernel's send and receive work of one QP's
// stream does not queue behind another's.
#include <algorithm>

#include "common/log.h"
#include "daemon/router/router_state.h"

namespace vrdma::daemon {

int Router::connect_class(uint32_t qpn, const LocalQp& qp) {
  // A UD QP already routed keeps its class for every destination it adds.
  if (qp.type == IBV_QPT_UD)
    if (auto it = outbound_.find(qpn); it != outbound_.end()) return it->second->cls;
  auto p = peer(qp.owner);
  if (!p || !shm::offset_ok(p->size(), qp.arena_offset, sizeof(shm::QpShared)))
    return qos::kBulk;  // attaching it will fail as well
  const auto* s = reinterpret_cast<const shm::QpShared*>(p->base() + qp.arena_offset);
  return qos_class_of(s->traffic_class.load(std::memory_order_acquire));
}

uint32_t Router::pick_lane(uint32_t qpn, const LocalQp& qp, bool local) {
  const int cls = connect_class(qpn, qp);
  return local ? lane_of(cls) : connect_lane(qpn, qp, cls);
}

uint32_t Router::connect_lane(uint32_t qpn, const LocalQp& qp, int cls) {
  if (qp.type == IBV_QPT_UD)
    if (auto it = outbound_.find(qpn); it != outbound_.end()) return it->second->lane;
  if (cls == qos::kLatency) return wire::kLatencyLane;
  const uint32_t n = std::clamp<uint32_t>(cfg_.bulk_links, 1, wire::kMaxBulkLinks);
  return lane_of(cls, next_bulk_link_++ % n);
}

}  // namespace vrdma::daemon
