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

}  // namespace vrdma::daemon
