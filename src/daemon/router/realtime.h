// A router thread runs at real-time priority (SCHED_FIFO) while its work comes in short
// bursts, and in the normal class when it does not.
//
// Woken by a frame or a doorbell, a thread in the normal class gets a core only when the
// scheduler lets it preempt what runs there: a program spinning on memory (ib_write_lat waits
// so for its peer's write) can hold the core until its slice ends at a tick (4 ms at HZ=250),
// and the p99 of ib_write_lat across hosts was that wait (1.1 to 1.8 ms idle). At real-time
// priority the thread preempts at once. What it may take at that priority is metered here, so
// that no traffic, however heavy or hostile, holds a core in the real-time class: a token
// bucket of kBurstNs, refilled at half the wall-clock time, drained by the time the thread is
// awake: a thread awake more than half the time runs dry after a burst. Run dry, it goes back
// to the normal class (its nice kept); it comes back once the bucket is half full again. Latency
// traffic (a frame now and then, the thread asleep in between) never runs dry; a stream of bulk
// traffic, or a flood in the latency class, is scheduled like any thread after at most a few
// milliseconds. A thread run dry that falls asleep wakes itself when its bucket is half full
// again, to return to the real-time class before the next frame wakes it.
#pragma once

#include <algorithm>
#include <cstdint>

namespace vrdma::daemon {

class RealtimeBudget {
 public:
  static constexpr int64_t kBurstNs = 2'000'000;
  static constexpr int64_t kShareDiv = 2;  // the bucket refills at 1/kShareDiv of the time

  explicit RealtimeBudget(int64_t now) : last_(now) {}

  // The thread worked from `from` to `to` (and slept, or did not exist for the bucket, before
  // `from`). Returns whether it should now run in the real-time class.
  bool worked(int64_t from, int64_t to) {
    tokens_ = std::min(kBurstNs, tokens_ + std::max<int64_t>(0, to - last_) / kShareDiv);
    last_ = std::max(last_, to);
    // A debt beyond one bucket is forgiven: once a flood stops, the thread is back within
    // a few milliseconds of quiet.
    tokens_ = std::max(-kBurstNs, tokens_ - std::max<int64_t>(0, to - from));
    if (realtime_ && tokens_ < 0) {
      realtime_ = false;
      ++demotions_;
    } else if (!realtime_ && tokens_ >= kBurstNs / 2) {
      realtime_ = true;
    }
    return realtime_;
  }
  // The change of class worked() asked for could not be made: the thread is still where it
  // was, and the budget says so again (the next call asks once more).
  void refused() {
    if (!realtime_) --demotions_;
    realtime_ = !realtime_;
  }
  bool realtime() const { return realtime_; }
  // When a thread in the normal class that sleeps from its last worked() on may return to the
  // real-time class (its bucket half full again); -1 in the real-time class. The thread wakes
  // itself then, so that the first frame after a flood finds it back in the class.
  int64_t promote_at() const {
    return realtime_ ? -1 : last_ + std::max<int64_t>(0, kBurstNs / 2 - tokens_) * kShareDiv;
  }
  uint64_t demotions() const { return demotions_; }

 private:
  int64_t tokens_ = kBurstNs;
  int64_t last_;
  bool realtime_ = true;
  uint64_t demotions_ = 0;
};

// The real-time priorities of router threads: the latency class's thread is above the bulk
// threads, so that its frames never wait for a bulk thread's pass to end on a busy core (within
// a priority, SCHED_FIFO threads do not preempt each other).
inline constexpr int kBulkRealtimePriority = 1;
inline constexpr int kLatencyRealtimePriority = 2;

// The calling thread's scheduling class: SCHED_FIFO at `priority`, or back to SCHED_OTHER (its
// nice value unchanged). 0 or an errno (without CAP_SYS_NICE: EPERM).
int set_realtime(bool on, int priority = kBulkRealtimePriority);

}  // namespace vrdma::daemon
