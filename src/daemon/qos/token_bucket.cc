#include "daemon/qos/token_bucket.h"

#include <algorithm>
#include <cmath>

namespace vrdma::qos {

void TokenBucket::set_rate(uint64_t per_second, int64_t now) {
  if (per_second == rate()) return;
  const double per_ns = static_cast<double>(per_second) / 1e9;
  const double burst = std::max(kMinBurst, per_ns * static_cast<double>(kBurstNs));
  per_ns_.store(per_ns, std::memory_order_relaxed);
  burst_.store(burst, std::memory_order_relaxed);
  tokens_.store(burst, std::memory_order_relaxed);
  last_.store(now, std::memory_order_relaxed);
  rate_.store(per_second, std::memory_order_release);
}

void TokenBucket::refill(int64_t now) {
  if (!rate()) return;
  int64_t last = last_.load(std::memory_order_relaxed);
  // The time from `last` to `now` is this refill's to credit, unless another took it first.
  if (now <= last || !last_.compare_exchange_strong(last, now, std::memory_order_relaxed))
    return;
  const double add = per_ns_.load(std::memory_order_relaxed) * static_cast<double>(now - last);
  const double cap = burst();
  double t = tokens_.load(std::memory_order_relaxed);
  while (!tokens_.compare_exchange_weak(t, std::min(cap, t + add), std::memory_order_relaxed)) {
  }
}

int64_t TokenBucket::opens_at(int64_t now) const {
  if (open()) return now;
  // tokens <= 0: the time until it is positive again, from the last refill.
  double ns = (-tokens()) / per_ns_.load(std::memory_order_relaxed);
  return std::max(now, last_.load(std::memory_order_relaxed) + static_cast<int64_t>(std::ceil(ns)) + 1);
}

}  // namespace vrdma::qos
