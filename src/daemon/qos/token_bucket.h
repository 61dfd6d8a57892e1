// A token bucket with time passed in (ns): a rate limit in units (bytes, messages) per second.
// A unit may be taken while the bucket holds any token at all, so a message larger than the
// burst still passes; the bucket then owes the difference and stays closed until it is repaid.
// Over any long stretch what passes is the rate times the time, plus at most one burst and one
// message. An idle bucket fills up to its burst, no further: idle time earns no more credit.
//
// Several router threads may share one bucket (a container's limit over the links of every
// thread, limits.h): refill, open and take are lock-free atomics. Each stretch of time is
// credited once, by the refill that moved the bucket's clock over it; a refill with an older
// clock than the bucket's adds nothing. set_rate is the control path's: a rate set again
// unchanged leaves the bucket as it is.
#pragma once

#include <atomic>
#include <cstdint>

namespace vrdma::qos {

class TokenBucket {
 public:
  // How long a full bucket lasts at its rate; bursts are at least kMinBurst units.
  static constexpr int64_t kBurstNs = 20'000'000;
  static constexpr double kMinBurst = 1.0;

  // rate 0: unlimited. A new rate starts full.
  void set_rate(uint64_t per_second, int64_t now);
  uint64_t rate() const { return rate_.load(std::memory_order_relaxed); }
  bool limited() const { return rate() != 0; }
  // Adds what the time since the last refill earned, up to the burst.
  void refill(int64_t now);
  bool open() const { return rate() == 0 || tokens() > 0; }
  void take(uint64_t units) {
    if (rate()) tokens_.fetch_sub(static_cast<double>(units), std::memory_order_relaxed);
  }
  // When open() turns true with no taking meanwhile (now if it is open).
  int64_t opens_at(int64_t now) const;
  double tokens() const { return tokens_.load(std::memory_order_relaxed); }
  double burst() const { return burst_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> rate_{0};
  std::atomic<double> per_ns_{0};
  std::atomic<double> burst_{0};
  std::atomic<double> tokens_{0};
  std::atomic<int64_t> last_{0};
};

}  // namespace vrdma::qos
