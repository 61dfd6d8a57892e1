#include "engine/poll_backoff.h"

#include <time.h>

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

}  // namespace

void found() {
  empty_since = 0;
  if (napped) next_nap = napped / 2 < kNapNs ? kNapNs : napped / 2;
  napped = 0;
}

bool waited_long() {
  const int64_t now = now_ns();
  if (!empty_since) {
    empty_since = now;
    return false;
  }
  return now - empty_since >= kSpinNs;
}

long nap() {
  const long ns = next_nap;
  timespec ts{0, ns};
  nanosleep(&ts, nullptr);
  napped = ns;
  next_nap = ns * 2 > kMaxNapNs ? kMaxNapNs : ns * 2;
  return ns;
}

}  // namespace vrdma::poll_backoff
