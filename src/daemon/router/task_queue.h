// A queue of tasks that any thread may add to and one thread runs: how the control thread and
// the router thread hand each other work (router_thread.h). Taking from an empty queue costs
// one atomic load, no lock: the router looks at its queue on every pass.
#pragma once

#include <atomic>
#include <functional>
#include <mutex>
#include <utility>
#include <vector>

namespace vrdma::daemon {

class TaskQueue {
 public:
  using Task = std::function<void()>;

  // Returns whether the queue was empty (the consumer may be asleep: wake it).
  bool push(Task t) {
    std::lock_guard<std::mutex> g(mu_);
    tasks_.push_back(std::move(t));
    return !pending_.exchange(true, std::memory_order_release);
  }
  bool push_all(std::vector<Task>& ts) {
    if (ts.empty()) return false;
    std::lock_guard<std::mutex> g(mu_);
    for (auto& t : ts) tasks_.push_back(std::move(t));
    ts.clear();
    return !pending_.exchange(true, std::memory_order_release);
  }
  // Moves every task into `out` (in the order they were added); false when there was none.
  bool take(std::vector<Task>& out) {
    if (!pending_.load(std::memory_order_acquire)) return false;
    std::lock_guard<std::mutex> g(mu_);
    pending_.store(false, std::memory_order_relaxed);
    out.swap(tasks_);
    return !out.empty();
  }

 private:
  std::mutex mu_;
  std::vector<Task> tasks_;
  std::atomic<bool> pending_{false};
};

}  // namespace vrdma::daemon
