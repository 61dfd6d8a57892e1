#include "shm/settle.h"

#include <sched.h>
#include <string.h>
#include <time.h>

#include <atomic>

#include "common/clock.h"
#include "common/log.h"

namespace vrdma::shm {

bool moved_since(const Peer& peer, uint32_t before) {
  // The owner increments moves before it copies the pages: the placement's stores must be
  // visible before this load, or a move that began in between copies the pages without them.
  // An owner that follows its increment with a heavy fence (asym_fence.h) orders them for us.
  if (peer.light_fence())
    std::atomic_signal_fence(std::memory_order_seq_cst);
  else
    std::atomic_thread_fence(std::memory_order_seq_cst);
  const uint32_t now = peer.moves();
  return now != before || (now & 1);
}

void move_wait_pause(int tries) {
  if (tries < kMoveYields) {
    sched_yield();
  } else {
    timespec nap{0, kMoveNapNs};
    nanosleep(&nap, nullptr);
  }
}

int64_t wait_for_moves(const Peer& peer, int64_t deadline_ns) {
  return wait_while_odd([&peer] { return peer.moves(); }, deadline_ns);
}

int64_t translate_again(Peer& peer, uint32_t via_qpn, uint32_t pd, const Placement& pl, Seg* out,
                        int64_t deadline_ns) {
  const int64_t m = wait_for_moves(peer, deadline_ns);
  if (m < 0) return -1;
  for (int i = 0; i < pl.nsegs; ++i) {
    const Seg& s = pl.segs[i];
    const auto& src = pl.src[i];
    out[i] = s;
    if (!s.len) continue;
    out[i].p = peer.translate(via_qpn, pd, src.key, src.addr, s.len, src.access);
    if (!out[i].p) return -1;
  }
  return m;
}

void settle(Peer& peer, uint32_t via_qpn, uint32_t pd, const Placement& pl, uint64_t placed) {
  // The placement's stores before the look at moves (the owner increments it, then copies).
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (wait_for_moves(peer, now_ns() + kMoveWaitNs) < 0) {
    LOG_WARN("client %u is moving registered pages for over %lld ms: data placed meanwhile may "
             "not reach them",
             peer.client_id(), static_cast<long long>(kMoveWaitNs / 1'000'000));
    return;
  }
  for (int i = 0; i < pl.nsegs && placed; ++i) {
    const Seg& s = pl.segs[i];
    const uint64_t n = s.len < placed ? s.len : placed;
    placed -= n;
    if (!n) continue;
    const auto& src = pl.src[i];
    uint8_t* now = peer.translate(via_qpn, pd, src.key, src.addr, n, src.access);
    if (now && now != s.p) memmove(now, s.p, n);
  }
}

}  // namespace vrdma::shm
