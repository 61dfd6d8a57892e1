// A thread that bumps a counter in memory and, before each bump, checks that its last value is
// still there: it counts the writes it lost (pages moved under it without them).
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>

namespace vrdma::testing {

class CounterWriter {
 public:
  // Starts writing at `counter` and returns once the first write is made.
  explicit CounterWriter(volatile uint64_t* counter)
      : thread_([this, counter] {
          uint64_t last = 0;
          while (!stop_.load(std::memory_order_relaxed)) {
            if (*counter != last) lost_.fetch_add(1);
            *counter = ++last;
            bumps_.fetch_add(1, std::memory_order_relaxed);
          }
        }) {
    while (bumps_.load() == 0) std::this_thread::yield();
  }
  ~CounterWriter() { stop(); }
  CounterWriter(const CounterWriter&) = delete;
  CounterWriter& operator=(const CounterWriter&) = delete;

  void stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  uint64_t bumps() const { return bumps_.load(); }
  long lost() const { return lost_.load(); }

 private:
  std::atomic<bool> stop_{false};
  std::atomic<long> lost_{0};
  std::atomic<uint64_t> bumps_{0};
  std::thread thread_;  // last: starts once the counters above exist
};

}  // namespace vrdma::testing
