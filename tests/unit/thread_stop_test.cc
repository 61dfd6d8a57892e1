// ThreadStop: the process's other threads wait in a signal handler from stop() to release();
// a thread blocked in a system call finishes it afterwards; threads that cannot be held (the
// signal blocked for good, vrdma's own) are not waited for.
#include "engine/thread_stop.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

namespace vrdma {
namespace {

using Clock = std::chrono::steady_clock;

// A thread that counts as fast as it can.
struct Spinner {
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> n{0};
  std::thread t{[this] {
    while (!stop.load(std::memory_order_relaxed)) n.fetch_add(1, std::memory_order_relaxed);
  }};
  Spinner() {
    while (n.load() == 0) std::this_thread::yield();
  }
  ~Spinner() {
    stop = true;
    t.join();
  }
};

bool moves_within(const std::atomic<uint64_t>& n, std::chrono::milliseconds d) {
  const uint64_t start = n.load();
  const auto end = Clock::now() + d;
  while (Clock::now() < end)
    if (n.load() != start) return true;
  return false;
}

TEST(ThreadStop, HoldsARunningThreadUntilReleased) {
  Spinner s;
  ThreadStop stop;
  ASSERT_TRUE(stop.stop());
  EXPECT_TRUE(stop.held());
  EXPECT_NE(ThreadStop::signal_number(), 0);
  EXPECT_FALSE(moves_within(s.n, std::chrono::milliseconds(30)));
  stop.release();
  EXPECT_TRUE(moves_within(s.n, std::chrono::seconds(5)));
}

TEST(ThreadStop, ASparedThreadGoesOn) {
  std::atomic<pid_t> tid{0};
  Spinner s;
  std::atomic<bool> quit{false};
  std::atomic<uint64_t> m{0};
  std::thread spared([&] {
    tid = static_cast<pid_t>(::syscall(SYS_gettid));
    while (!quit) m.fetch_add(1, std::memory_order_relaxed);
  });
  while (tid == 0 || m == 0) std::this_thread::yield();
  {
    ThreadStop stop;
    ASSERT_TRUE(stop.stop(tid));
    EXPECT_TRUE(stop.held());
    EXPECT_TRUE(moves_within(m, std::chrono::seconds(5)));
    EXPECT_FALSE(moves_within(s.n, std::chrono::milliseconds(30)));
  }
  quit = true;
  spared.join();
}

TEST(ThreadStop, AThreadInReadFinishesItsCallAfterTheRelease) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  std::atomic<ssize_t> got{-2};
  char buf[8] = {};
  std::thread reader([&] { got = ::read(fds[0], buf, sizeof(buf)); });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // blocked in read by now
  {
    ThreadStop stop;
    ASSERT_TRUE(stop.stop());
    EXPECT_TRUE(stop.held());
  }
  // Restarted, not failed with EINTR: it still waits for the data.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(got, -2);
  ASSERT_EQ(::write(fds[1], "abc", 3), 3);
  reader.join();
  EXPECT_EQ(got, 3);
  EXPECT_EQ(std::memcmp(buf, "abc", 3), 0);
  ::close(fds[0]);
  ::close(fds[1]);
}

TEST(ThreadStop, AThreadThatBlocksTheSignalForGoodIsNotWaitedForTwice) {
  Spinner s;
  std::atomic<bool> quit{false};
  std::thread blocker([&] {
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, nullptr);
    while (!quit) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
  for (int i = 0; i < 2; ++i) {
    const auto t0 = Clock::now();
    ThreadStop stop;
    ASSERT_TRUE(stop.stop());
    const auto took = Clock::now() - t0;
    EXPECT_FALSE(stop.held());                                       // the blocker runs on
    EXPECT_FALSE(moves_within(s.n, std::chrono::milliseconds(20)));  // the spinner does not
    stop.release();
    // The first stop gives it a few milliseconds; the second does not wait for it at all (the
    // bound is loose: this machine may be busy).
    EXPECT_LT(took, std::chrono::milliseconds(i == 0 ? 900 : 400));
  }
  quit = true;
  blocker.join();
  // Its signal, pending all along, is taken once it unblocks (it has exited here: nothing to
  // see), and the next stop holds everyone.
  ThreadStop stop;
  ASSERT_TRUE(stop.stop());
  EXPECT_TRUE(stop.held());
}

TEST(ThreadStop, ExemptThreadsAreLeftAlone) {
  std::atomic<bool> quit{false};
  std::atomic<uint64_t> m{0};
  std::thread own([&] {
    ThreadStop::Exempt exempt;
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, nullptr);
    while (!quit) m.fetch_add(1, std::memory_order_relaxed);
  });
  while (m == 0) std::this_thread::yield();
  {
    ThreadStop stop;
    ASSERT_TRUE(stop.stop());
    EXPECT_TRUE(stop.held());  // nothing it could not hold but the exempt thread
    EXPECT_TRUE(moves_within(m, std::chrono::seconds(5)));
  }
  quit = true;
  own.join();
}

TEST(ThreadStop, AProgramsOwnHandlerOnTheSignalMakesItChooseAnother) {
  ThreadStop first;
  ASSERT_TRUE(first.stop());
  first.release();
  const int sig = ThreadStop::signal_number();
  struct sigaction mine {
  }, old{};
  mine.sa_handler = [](int) {};
  ASSERT_EQ(::sigaction(sig, &mine, &old), 0);
  {
    Spinner s;
    ThreadStop stop;
    ASSERT_TRUE(stop.stop());
    EXPECT_NE(ThreadStop::signal_number(), sig);
    EXPECT_TRUE(stop.held());
    EXPECT_FALSE(moves_within(s.n, std::chrono::milliseconds(20)));
  }
  struct sigaction now {};
  ASSERT_EQ(::sigaction(sig, nullptr, &now), 0);
  EXPECT_EQ(now.sa_handler, mine.sa_handler);  // the program's handler stays
  ::sigaction(sig, &old, nullptr);
}

TEST(ThreadStop, TheSignalFromOutsideIsIgnored) {
  ThreadStop first;
  ASSERT_TRUE(first.stop());
  first.release();
  // Another process (here: this one through kill(2), not tgkill) sending the signal neither
  // kills the process nor holds a thread.
  ASSERT_EQ(::kill(::getpid(), ThreadStop::signal_number()), 0);
  Spinner s;
  EXPECT_TRUE(moves_within(s.n, std::chrono::seconds(5)));
}

}  // namespace
}  // namespace vrdma
