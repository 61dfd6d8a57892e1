// When a thread polling empty CQs naps to leave its core to the router (engine/poll_backoff.h).
#include "engine/poll_backoff.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <thread>

namespace vrdma {
namespace {

struct RoutedQueue : ::testing::Test {
  void SetUp() override {
    mem.reset(static_cast<shm::SendQueue*>(std::aligned_alloc(64, sizeof(shm::SendQueue))));
    sq = new (mem.get()) shm::SendQueue{};
  }
  void set(uint64_t tail, uint64_t done, uint32_t doorbell) {
    sq->tail.store(tail);
    sq->done.store(done);
    sq->doorbell.store(doorbell);
  }
  struct Free {
    void operator()(shm::SendQueue* p) const { std::free(p); }
  };
  std::unique_ptr<shm::SendQueue, Free> mem;
  shm::SendQueue* sq = nullptr;
};

TEST_F(RoutedQueue, TheRouterStreamsADeepQueueItIsAwakeFor) {
  const uint64_t deep = poll_backoff::kDeepQueue;
  set(100 + deep, 100, 0);
  EXPECT_TRUE(poll_backoff::router_streams(*sq));
  set(100 + deep + 50, 100, 0);
  EXPECT_TRUE(poll_backoff::router_streams(*sq));
}

TEST_F(RoutedQueue, AShallowQueueIsWaitedForBySpinning) {
  // Ping-pong and request-response: the completion is what the thread waits for.
  for (uint64_t queued = 0; queued < poll_backoff::kDeepQueue; ++queued) {
    set(7 + queued, 7, 0);
    EXPECT_FALSE(poll_backoff::router_streams(*sq)) << queued << " outstanding";
  }
}

TEST_F(RoutedQueue, ASleepingRouterIsNotWaitedForByNapping) {
  // An armed doorbell: the router sleeps (it waits for acknowledgements, or has nothing).
  set(100 + poll_backoff::kDeepQueue * 4, 100, 1);
  EXPECT_FALSE(poll_backoff::router_streams(*sq));
}

TEST(PollBackoff, APacedNapLastsAsLongAsAQuarterOfTheQueueTakes) {
  using poll_backoff::paced_nap_ns;
  // 10 completions in 100 us: 10 us each; 100 outstanding, a quarter of them: 250 us.
  EXPECT_EQ(paced_nap_ns(100'000, 10, 100), 250'000);
  EXPECT_EQ(paced_nap_ns(100'000, 1, 128), 3'200'000);
  // Within kNapNs and kMaxPacedNapNs, and kNapNs when nothing says how fast the queue goes.
  EXPECT_EQ(paced_nap_ns(100'000, 1000, 8), poll_backoff::kNapNs);
  EXPECT_EQ(paced_nap_ns(1'000'000, 1, 4096), poll_backoff::kMaxPacedNapNs);
  EXPECT_EQ(paced_nap_ns(100'000, 0, 100), poll_backoff::kNapNs);
  EXPECT_EQ(paced_nap_ns(0, 5, 100), poll_backoff::kNapNs);
}

TEST_F(RoutedQueue, APollerOfADeepQueueWakesOncePerManyCompletionsAndKeepsItFull) {
  // A router completes one request every 100 us or so; the poller keeps 128 outstanding,
  // posting one for each completion it finds when it wakes. Paced naps let a quarter of the
  // queue complete per nap, not one or two, and the queue never runs dry.
  constexpr uint64_t kDepth = 128;
  constexpr int kCompletions = 1500;  // about 0.15 s at the router's pace
  sq->capacity = 256;
  set(kDepth, 0, 0);
  std::atomic<bool> stop{false};
  std::atomic<int> dry{0};
  std::thread router([&] {
    for (int i = 0; i < kCompletions && !stop.load(); ++i) {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
      const uint64_t done = sq->done.load();
      if (sq->tail.load() == done) {
        dry.fetch_add(1);
        continue;
      }
      sq->done.store(done + 1);
    }
    stop.store(true);
  });
  int counted_naps = 0;
  uint64_t counted = 0;
  // The poller on a thread of its own (the backoff's state is the thread's).
  std::thread poller([&] {
    uint64_t seen = 0;
    int naps = 0;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!stop.load() && std::chrono::steady_clock::now() < deadline) {
      poll_backoff::nap(sq);
      ++naps;
      const uint64_t done = sq->done.load();
      const uint64_t fresh = done - seen;
      seen = done;
      if (fresh) poll_backoff::found();
      sq->tail.store(done + kDepth);  // refill
      if (naps > 10) {  // past the first naps, whose pace is still kNapNs
        ++counted_naps;
        counted += fresh;
      }
    }
    stop.store(true);
  });
  poller.join();
  router.join();
  ASSERT_GT(counted_naps, 0);
  // kDepth / kQueueShare = 32 per nap at a steady pace; at least 8 whatever the scheduler does.
  EXPECT_GE(counted / counted_naps, 8u) << counted << " completions in " << counted_naps
                                        << " naps";
  EXPECT_LE(dry.load(), kCompletions / 20) << "the router found the queue empty";
}

TEST(PollBackoff, AThreadWaitsLongOnlyAfterFindingNothingForTheSpin) {
  poll_backoff::found();
  EXPECT_FALSE(poll_backoff::waited_long());  // the first empty poll starts the spin
  std::this_thread::sleep_for(std::chrono::nanoseconds(2 * poll_backoff::kSpinNs));
  EXPECT_TRUE(poll_backoff::waited_long());
  EXPECT_TRUE(poll_backoff::waited_long());
  // Completions end the wait: the next empty poll spins again.
  poll_backoff::found();
  EXPECT_FALSE(poll_backoff::waited_long());
}

TEST(PollBackoff, NapsThatFindNothingGrowUpToTheBound) {
  poll_backoff::found();
  long expected = poll_backoff::kNapNs;
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(poll_backoff::nap(), expected) << "nap " << i;
    expected = std::min(expected * 2, poll_backoff::kMaxNapNs);
  }
  EXPECT_EQ(expected, poll_backoff::kMaxNapNs);
  // Completions found after a nap: the next is half of it, and so on down to kNapNs.
  poll_backoff::found();
  EXPECT_EQ(poll_backoff::nap(), poll_backoff::kMaxNapNs / 2);
  poll_backoff::found();
  EXPECT_EQ(poll_backoff::nap(), poll_backoff::kMaxNapNs / 4);
  for (int i = 0; i < 20; ++i) {
    poll_backoff::found();
    poll_backoff::nap();
  }
  poll_backoff::found();
  EXPECT_EQ(poll_backoff::nap(), poll_backoff::kNapNs);
  poll_backoff::found();
}

TEST(PollBackoff, NapsSettleNearTheTimeBetweenCompletions) {
  // Completions every 300 us: a nap shorter than that finds nothing and the next is twice
  // as long; a longer one finds the completion and the next is half. The naps keep within a
  // factor of two of the gap, two naps or so per completion, whatever the start.
  constexpr long kGap = 300'000;
  for (int round = 0; round < 40; ++round) {
    poll_backoff::found();
    long slept = 0;
    int naps = 0;
    while (slept < kGap) {
      slept += poll_backoff::nap();
      ++naps;
    }
    if (round >= 10) {
      EXPECT_LE(naps, 2) << "round " << round;
      EXPECT_LT(slept, 2 * kGap) << "round " << round;
    }
  }
  poll_backoff::found();
}

TEST(PollBackoff, AHintThatMoreIsQueuedHoldsForAWhileAfterTheLastMessage) {
  poll_backoff::MoreHint h;
  EXPECT_FALSE(h.live(1'000'000));  // nothing heard
  h.heard(true);
  // Its time runs from the first empty poll after the message, not from the message.
  EXPECT_TRUE(h.live(5'000'000));
  EXPECT_TRUE(h.live(5'000'000 + poll_backoff::kHintNs - 1));
  EXPECT_FALSE(h.live(5'000'000 + poll_backoff::kHintNs));
  EXPECT_FALSE(h.live(9'000'000'000));
  // The next message renews it; a message without the hint ends it.
  h.heard(true);
  EXPECT_TRUE(h.live(9'000'000'000));
  h.heard(false);
  EXPECT_FALSE(h.live(9'000'000'000));
}

TEST(PollBackoff, EachThreadWaitsOnItsOwn) {
  poll_backoff::found();
  EXPECT_FALSE(poll_backoff::waited_long());
  std::this_thread::sleep_for(std::chrono::nanoseconds(2 * poll_backoff::kSpinNs));
  bool other = true;
  std::thread([&] { other = poll_backoff::waited_long(); }).join();
  EXPECT_FALSE(other);  // a thread that never polled has not waited
  EXPECT_TRUE(poll_backoff::waited_long());
}

}  // namespace
}  // namespace vrdma
