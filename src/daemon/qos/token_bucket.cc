#include "daemon/qos/token_bucket.h"

#include <algorithm>
#include <cmath>

namespace vrdma::qos {

void TokenBucket::set_rate(uint64_t per_second, int64_t now) {
  rate_ = per_second;
  per_ns_ = static_cast<double>(per_second) / 1e9;
  burst_ = std::max(kMinBurst, per_ns_ * static_cast<double>(kBurstNs));
  tokens_ = burst_;
  last_ = now;
}

void TokenBucket::refill(int64_t now) {
  if (!rate_ || now <= last_) return;
  tokens_ = std::min(burst_, tokens_ + per_ns_ * static_cast<double>(now - last_));
  last_ = now;
}

int64_t TokenBucket::opens_at(int64_t now) const {
  if (open()) return now;
  // tokens_ <= 0: the time until it is positive again, from the last refill.
  double ns = (-tokens_) / per_ns_;
  return std::max(now, last_ + static_cast<int64_t>(std::ceil(ns)) + 1);
}

}  // namespace vrdma::qos
