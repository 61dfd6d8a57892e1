// Data the router placed into a client's memory through a mapping it translated before the
// client moved those pages to another file (a registration next to them split or replaced
// their backing): the bytes went to the old file, which the router still maps (Peer::
// defer_retire), not to the client's pages. Before the operation completes they are placed
// again where the pages are now. A move in progress (KeyTable::moves odd) is waited for: it
// only copies pages and republishes, asking vrdmad nothing.
#include <string.h>

#include <atomic>

#include "common/clock.h"
#include "common/log.h"
#include "daemon/router/router_state.h"
#include "shm/settle.h"

namespace vrdma::daemon {

namespace {

bool moves_settled(const shm::Peer& peer) {
  // The placement's stores before the look at moves (the owner increments it, then copies).
  std::atomic_thread_fence(std::memory_order_seq_cst);
  return shm::wait_for_moves(peer, now_ns() + shm::kMoveWaitNs) >= 0;
}

}  // namespace

void Router::settle(shm::Peer& peer, uint32_t via_qpn, uint32_t pd, const shm::Placement& pl,
                    uint64_t placed) {
  if (!moves_settled(peer)) {
    LOG_WARN("router: client %u is moving registered pages for over %lld ms: data placed "
             "meanwhile may not reach them",
             peer.client_id(), static_cast<long long>(shm::kMoveWaitNs / 1'000'000));
    return;
  }
  for (int i = 0; i < pl.nsegs && placed; ++i) {
    const shm::Seg& s = pl.segs[i];
    const uint64_t n = s.len < placed ? s.len : placed;
    placed -= n;
    if (!n) continue;
    const auto& src = pl.src[i];
    uint8_t* now = peer.translate(via_qpn, pd, src.key, src.addr, n, src.access);
    if (now && now != s.p) memmove(now, s.p, n);
  }
}

}  // namespace vrdma::daemon
