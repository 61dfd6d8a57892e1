// Waiting for an owner's move of its pages to end (shm/settle.h).
#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "common/clock.h"
#include "shm/settle.h"

namespace vrdma::shm {
namespace {

void run_on_cpu0() {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(0, &set);
  ASSERT_EQ(pthread_setaffinity_np(pthread_self(), sizeof(set), &set), 0);
}

TEST(MoveWait, EndsWhenTheCountIsEvenAndGivesUpAtTheDeadline) {
  uint32_t n = 4;
  EXPECT_EQ(wait_while_odd([&] { return n; }, now_ns()), 4);
  n = 5;
  const int64_t t0 = now_ns();
  EXPECT_EQ(wait_while_odd([&] { return n; }, t0 + 5'000'000), -1);
  EXPECT_GE(now_ns() - t0, 5'000'000);
}

TEST(MoveWait, AWaiterInTheRealTimeClassLetsAMoverOnItsCoreFinish) {
  // The mover (normal class) and the waiter share CPU 0; as root the waiter runs SCHED_FIFO,
  // as vrdmad's latency thread does, and then yields to nothing the mover could use.
  std::atomic<uint32_t> moves{1};
  std::atomic<bool> ready{false};
  std::thread mover([&] {
    run_on_cpu0();
    ready = true;
    const int64_t until = now_ns() + 2'000'000;  // 2 ms of copying pages
    while (now_ns() < until) {
    }
    moves.store(2);
  });
  int64_t got = 0, waited = 0;
  std::thread waiter([&] {
    run_on_cpu0();
    while (!ready) sched_yield();
    sched_param p{};
    p.sched_priority = 1;
    const bool rt = ::sched_setscheduler(0, SCHED_FIFO, &p) == 0;
    EXPECT_TRUE(rt || geteuid() != 0);
    const int64_t t0 = now_ns();
    got = wait_while_odd([&] { return moves.load(); }, t0 + kMoveWaitNs);
    waited = now_ns() - t0;
    p.sched_priority = 0;
    ::sched_setscheduler(0, SCHED_OTHER, &p);
  });
  waiter.join();
  mover.join();
  EXPECT_EQ(got, 2) << "waited " << waited / 1000 << " us";
}

}  // namespace
}  // namespace vrdma::shm
