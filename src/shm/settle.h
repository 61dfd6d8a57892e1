// Placing again what went to pages the owner moved meanwhile.
//
// An initiator (a same-host process, or vrdmad's router) translates a target address to its
// mapping of the owner's backing file, then copies the payload there. If the owner moves those
// pages to another file in between (a registration next to them splits or replaces their
// backing), the bytes land in the old file, not in the owner's pages. The owner's
// KeyTable::moves is odd while it moves and changes on every move: an initiator that reads it
// before translating and again after placing knows whether a move overlapped, and then places
// the bytes again where the pages are now.
#pragma once

#include <cstdint>

#include "common/clock.h"
#include "shm/peer.h"
#include "shm/respond.h"

namespace vrdma::shm {

// How long an initiator waits for a move in progress: an owner stopped mid-move is not waited
// for longer.
inline constexpr int64_t kMoveWaitNs = 200'000'000;

// Whether a move may have overlapped a placement made through translations taken after
// `before` was read (Peer::moves()). Orders the placement's stores before the check.
bool moved_since(const Peer& peer, uint32_t before);

// Waits (at most until deadline_ns, now_ns()'s clock) for a move in progress to end: moves() then,
// or -1 when the owner stayed mid-move until the deadline.
int64_t wait_for_moves(const Peer& peer, int64_t deadline_ns);

// How wait_for_moves waits, for any reading of the count: -1 past the deadline. It yields the
// core a few times (the mover may be queued behind the caller on it), then sleeps in short
// naps: a caller in the real-time class (vrdmad's latency thread) yields to no thread of the
// normal class, and would otherwise keep a mover that shares its core from ever finishing.
// (A template: the router calls wait_for_moves for every placement, where the count is even.)
inline constexpr int kMoveYields = 16;
inline constexpr long kMoveNapNs = 20'000;
void move_wait_pause(int tries);  // a yield, or past kMoveYields tries a nap
template <typename Count>
int64_t wait_while_odd(Count count, int64_t deadline_ns) {
  uint32_t m;
  for (int tries = 0; (m = count()) & 1; ++tries) {
    if (now_ns() > deadline_ns) return -1;
    move_wait_pause(tries);
  }
  return m;
}

// Waits (at most until deadline_ns, now_ns()'s clock) for a move in progress to end, then
// translates each of pl's segments again into `out` (where the owner's pages are now). Returns
// moves() as it was before translating, for a later moved_since(), or -1 when the owner stayed
// mid-move until the deadline or a segment no longer translates (the MR is gone).
int64_t translate_again(Peer& peer, uint32_t via_qpn, uint32_t pd, const Placement& pl, Seg* out,
                        int64_t deadline_ns);

// Data placed through a mapping translated before the owner moved those pages to another file
// (a registration next to them split or replaced their backing) went to the old file, which the
// placer still maps (Peer::defer_retire), not to the owner's pages: placed again where the pages
// are now, the first `placed` bytes of pl's segments. A move in progress is waited for (it only
// copies pages and republishes).
void settle(Peer& peer, uint32_t via_qpn, uint32_t pd, const Placement& pl, uint64_t placed);

}  // namespace vrdma::shm
