#include "engine/poll_backoff.h"

#include <time.h>

#include <algorithm>

#include "common/clock.h"

namespace vrdma::poll_backoff {

namespace {

// Since when this thread's polls have found nothing (0: its last poll found something).
thread_local int64_t empty_since = 0;
// The next nap's length: doubled by every nap after which the polls still find nothing (up to
// kMaxNapNs), halved (down to kNapNs) by every nap after which they found completions.
thread_local long next_nap = kNapNs;
// The length of this thread's last nap if it has not found anything since (0: it has).
thread_local long napped = 0;
// next_nap was paced by a send queue's rate (nap(sq)): completions found do not halve it.
thread_local bool paced = false;

}  // namespace

void found() {
  empty_since = 0;
  if (napped && !paced) next_nap = napped / 2 < kNapNs ? kNapNs : napped / 2;
  napped = 0;
}

long paced_nap_ns(int64_t slept_ns, uint64_t completed, uint64_t left) {
  if (!completed || slept_ns <= 0) return kNapNs;
  // slept_ns per `completed`, for left / kQueueShare of them.
  const double ns = static_cast<double>(slept_ns) * static_cast<double>(left) /
                    (static_cast<double>(completed) * static_cast<double>(kQueueShare));
  if (ns < kNapNs) return kNapNs;
  if (ns > kMaxPacedNapNs) return kMaxPacedNapNs;
  return static_cast<long>(ns);
}

bool waited_long() {
  const int64_t now = now_ns();
  if (!empty_since) {
    empty_since = now;
    return false;
  }
  return now - empty_since >= kSpinNs;
}

long nap(const shm::SendQueue* sq) {
  const long ns = next_nap;
  const uint64_t done_before = sq ? sq->done.load(std::memory_order_acquire) : 0;
  const int64_t start = sq ? now_ns() : 0;
  timespec ts{0, ns};
  nanosleep(&ts, nullptr);
  napped = ns;
  paced = false;
  if (sq) {
    const uint64_t done = sq->done.load(std::memory_order_acquire);
    const uint64_t left = sq->tail.load(std::memory_order_relaxed) - done;
    if (done != done_before && left >= kDeepQueue && left <= sq->capacity) {
      next_nap = paced_nap_ns(now_ns() - start, done - done_before, left);
      paced = true;
      return ns;
    }
  }
  // Found nothing (or no queue to pace by): twice as long, up to kMaxNapNs.
  next_nap = std::min(ns * 2, kMaxNapNs);
  return ns;
}

}  // namespace vrdma::poll_backoff
