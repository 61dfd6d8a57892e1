// The latency thread's real-time budget (realtime.h), with explicit times, and the switch of
// the calling thread's scheduling class.
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <thread>

#include "daemon/router/realtime.h"

namespace vrdma::daemon {
namespace {

constexpr int64_t kUs = 1000, kMs = 1000 * kUs;

TEST(RealtimeBudget, LatencyTrafficStaysRealTime) {
  // A frame every 50 us, 20 us of work each (40 % of a core), for a second.
  RealtimeBudget b(0);
  for (int64_t t = 0; t < 1000 * kMs; t += 50 * kUs) EXPECT_TRUE(b.worked(t, t + 20 * kUs)) << t;
  EXPECT_EQ(b.demotions(), 0u);
}

TEST(RealtimeBudget, AFloodLeavesTheRealTimeClassWithinAFewMilliseconds) {
  RealtimeBudget b(0);
  int64_t t = 0;
  // Awake without a break, accounted every 10 us as the loop does.
  while (b.worked(t, t + 10 * kUs)) {
    t += 10 * kUs;
    ASSERT_LE(t, 4 * kMs);
  }
  EXPECT_GE(t, 2 * kMs);  // the burst is allowed first
  EXPECT_EQ(b.demotions(), 1u);
  // Still at it: it stays in the normal class, however long.
  for (int i = 0; i < 100'000; ++i, t += 10 * kUs) ASSERT_FALSE(b.worked(t, t + 10 * kUs));
  EXPECT_EQ(b.demotions(), 1u);
  // Once it stops, the debt it ran up counts for one bucket only: from there to half full
  // takes 6 ms of quiet (the bucket refills at half the wall-clock time).
  // Asleep from the end of its last pass (t), it wakes itself when half full again.
  EXPECT_EQ(b.promote_at(), t + 6 * kMs);
  RealtimeBudget early = b, due = b;
  EXPECT_FALSE(early.worked(t + 6 * kMs - kUs, t + 6 * kMs - kUs));
  EXPECT_TRUE(due.worked(t + 6 * kMs, t + 6 * kMs));
  EXPECT_EQ(due.promote_at(), -1);
  t += 10 * kUs;
  EXPECT_FALSE(b.worked(t + 3 * kMs, t + 3 * kMs + kUs));
  EXPECT_TRUE(b.worked(t + 6100 * kUs, t + 6100 * kUs + kUs));
}

// Busy a share of the time in bursts of various lengths, for a second: the time spent awake
// in the real-time class.
int64_t realtime_time(int64_t burst, int64_t gap, uint64_t* demotions) {
  RealtimeBudget b(0);
  int64_t t = 0, rt_time = 0;
  while (t < 1000 * kMs) {
    if (b.realtime()) rt_time += burst;
    b.worked(t, t + burst);
    t += burst + gap;
  }
  *demotions = b.demotions();
  return rt_time;
}

TEST(RealtimeBudget, UnderHalfACoreEveryBurstRunsInTheRealTimeClass) {
  // 40 % of the time, in bursts up to 1 ms.
  for (int64_t burst : {10 * kUs, 100 * kUs, 1 * kMs}) {
    uint64_t demotions = 0;
    EXPECT_EQ(realtime_time(burst, burst * 3 / 2, &demotions), 400 * kMs) << burst;
    EXPECT_EQ(demotions, 0u) << burst;
  }
}

TEST(RealtimeBudget, OverHalfACoreTheThreadRunsInTheNormalClass) {
  // 80 % of the time: whatever the bursts, only the first few milliseconds are real-time.
  for (int64_t burst : {10 * kUs, 100 * kUs, 1 * kMs, 3 * kMs}) {
    uint64_t demotions = 0;
    EXPECT_LE(realtime_time(burst, burst / 4, &demotions), 3 * RealtimeBudget::kBurstNs) << burst;
    EXPECT_EQ(demotions, 1u) << burst;
  }
}

TEST(RealtimeBudget, ARefusedChangeLeavesItWhereTheThreadIs) {
  RealtimeBudget b(0);
  int64_t t = 0;
  while (b.worked(t, t + 10 * kUs)) t += 10 * kUs;
  ASSERT_EQ(b.demotions(), 1u);
  // The kernel refused the way out: the budget says real-time still, no demotion counted,
  // and the next meter asks again.
  b.refused();
  EXPECT_TRUE(b.realtime());
  EXPECT_EQ(b.demotions(), 0u);
  t += 10 * kUs;
  EXPECT_FALSE(b.worked(t, t + 10 * kUs));
  EXPECT_EQ(b.demotions(), 1u);
  // Quiet: it asks to come back; refused, it says normal class.
  t += 20 * kMs;
  ASSERT_TRUE(b.worked(t, t + 10 * kUs));
  b.refused();
  EXPECT_FALSE(b.realtime());
  EXPECT_EQ(b.demotions(), 1u);
}

TEST(RealtimeClass, TheThreadSwitchesAndKeepsItsNice) {
  std::thread th([] {
    const id_t tid = static_cast<id_t>(::syscall(SYS_gettid));
    ASSERT_EQ(::setpriority(PRIO_PROCESS, tid, 3), 0);
    int err = set_realtime(true);
    if (::geteuid() != 0) {
      // Without CAP_SYS_NICE the class cannot be had; the caller keeps the normal one.
      EXPECT_EQ(err, EPERM);
      EXPECT_EQ(::sched_getscheduler(0), SCHED_OTHER);
      return;
    }
    ASSERT_EQ(err, 0);
    EXPECT_EQ(::sched_getscheduler(0), SCHED_FIFO);
    ASSERT_EQ(set_realtime(false), 0);
    EXPECT_EQ(::sched_getscheduler(0), SCHED_OTHER);
    EXPECT_EQ(::getpriority(PRIO_PROCESS, tid), 3);
  });
  th.join();
}

}  // namespace
}  // namespace vrdma::daemon
