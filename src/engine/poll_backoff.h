// What a thread that keeps finding its CQs empty does while this host's router works for it.
//
// Completions of routed work come from the router, a thread of vrdmad that needs a core to make
// them. An application spinning on ibv_poll_cq holds a core; where the host has cores to spare
// that costs nothing, but where the router has to wait for a core (a small host, or a busy one)
// the spinning thread delays the very completions it waits for: sched_yield does not help when
// the router waits on another core's run queue. So a thread whose polls have found nothing for
// kSpinNs, while one of the CQ's QPs has kDeepQueue routed requests or more outstanding and its
// router thread is awake (the QP's doorbell is not armed: the router works on it), or while the
// last message the CQ received said its sender had more queued behind it (shm::kRecvMore, from
// the sending router's wire::kMoreQueued), naps and
// leaves the core free: kNapNs at first, twice as long after each nap that found nothing (up to
// kMaxNapNs), half as long after each nap that found completions, so that the naps settle near
// the time between the stream's completions (a nap or two per completion, not a climb from
// kNapNs after every one), and many streams sharing a few cores, each waiting longer, do not
// wake their threads ever more often than their completions come. A nap that waits on a deep
// send queue it can see (the router streams it) is paced by that queue instead: the next one
// lasts as long as 1/kQueueShare of the requests still outstanding take at the rate the last
// nap saw them complete (kNapNs to kMaxPacedNapNs), so a program that keeps a hundred requests
// in flight wakes once per many completions, not once per completion (on a small host every
// wake-up is a context switch taken from the router), and the router never runs dry: most of
// the queue is still there when the program wakes to refill it. Latency-bound traffic (a
// request or two in flight) never naps, so its latency is unchanged; a stream deep enough to
// keep the router busy does not notice the naps (its queue holds more work than a nap's worth).
#pragma once

#include <cstdint>

#include "shm/layout.h"

namespace vrdma::poll_backoff {

inline constexpr int64_t kSpinNs = 5'000;
inline constexpr long kNapNs = 20'000;
inline constexpr long kMaxNapNs = 1'000'000;
// A paced nap (above) wakes when 1/kQueueShare of the queue's outstanding requests are done,
// after kMaxPacedNapNs at most (what a queue whose rate jumps, say when the streams sharing its
// link end, may wait for its poller).
inline constexpr uint64_t kQueueShare = 4;
inline constexpr long kMaxPacedNapNs = 4'000'000;
// Requests outstanding on a QP for its poller to nap: with one or a few in flight (ping-pong,
// request-response) the completion is what the thread waits for, and it spins.
inline constexpr uint64_t kDeepQueue = 4;

// Whether the router is awake working on a queue of the QP's routed requests at least
// kDeepQueue long: requests posted and not completed, and the doorbell not armed (the router
// arms it only before it sleeps).
inline bool router_streams(const shm::SendQueue& sq) {
  const uint64_t queued =
      sq.tail.load(std::memory_order_relaxed) - sq.done.load(std::memory_order_relaxed);
  return queued >= kDeepQueue && !sq.doorbell.load(std::memory_order_relaxed);
}

// What the last message a CQ received said of its sender's queue (shm::kRecvMore), trusted for
// kHintNs from the first poll that found nothing after it: a sender whose next message does not
// come (it queued only WRITEs behind it, which complete nothing here, or it lied) delays this
// CQ's noticing its next message by that at most, not by a nap every time.
inline constexpr int64_t kHintNs = 1'000'000;
class MoreHint {
 public:
  void heard(bool more) {
    more_ = more;
    since_ = 0;
  }
  // Whether the hint holds at `now` (the caller's poll found nothing).
  bool live(int64_t now) {
    if (!more_) return false;
    if (!since_) since_ = now;
    return now - since_ < kHintNs;
  }

 private:
  bool more_ = false;
  int64_t since_ = 0;  // the first empty poll after the hint (0: none yet)
};

// A poll of this thread returned completions: it is not waiting. Found after a nap, they make
// the next nap half that one (at least kNapNs).
void found();
// A poll of this thread found nothing: whether it has found nothing for kSpinNs.
bool waited_long();
// Sleeps (the thread's timer slack comes on top) and returns for how long it meant to: twice
// the last nap if that one found nothing (at most kMaxNapNs), half of it if it found
// completions (at least kNapNs); kNapNs for the thread's first. With `sq`, the send queue
// whose completions the thread waits for, a nap during which some of its requests completed
// while kDeepQueue or more stay outstanding sets the next one by their rate (paced_nap_ns).
long nap(const shm::SendQueue* sq = nullptr);

// The paced nap after one of `slept_ns` during which `completed` requests completed and
// `left` stay outstanding: as long as left / kQueueShare of them take at that rate, from
// kNapNs to kMaxPacedNapNs.
long paced_nap_ns(int64_t slept_ns, uint64_t completed, uint64_t left);

}  // namespace vrdma::poll_backoff
