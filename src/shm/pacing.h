// Rate limits on one host. Traffic between containers of one host is copied by the sending
// process itself, so vrdmad's router never sees it; a container's (and its tenant's) QoS rate
// limits are kept there by the senders, in pages vrdmad shares with every process of the
// container (and of the tenant). Each page holds the limits vrdmad wrote and two rate meters
// (bytes and messages). A meter is a token bucket kept as one time: the moment its budget is
// used up to. A request goes when that moment is not in the future, and moves it on by the
// request's cost (its bytes or one message at the limit); it never lags more than
// kPacingBurstNs behind now, which is the most an idle sender saves up, and what lets a sender
// that is woken late catch up. Lock-free (one compare-and-swap per meter), no system call.
//
// The pages are writable by the processes that share them: a hostile process can ignore or
// rewrite them, exceeding its own container's and tenant's limits, or slow down the other
// containers of its tenant (it could do that by sending anyway). Other tenants never share a
// page with it, and traffic to other hosts is limited by the router, which no client controls.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>

namespace vrdma::shm {

inline constexpr int64_t kPacingBurstNs = 5'000'000;  // what a meter saves up: 5 ms of its rate

struct PacingMeter {
  std::atomic<int64_t> used_to_ns{0};  // the budget is spent up to this moment

  // 0 and the meter charged, or how many ns from now the request may go.
  int64_t admit(uint64_t cost_ns, int64_t now) {
    int64_t used = used_to_ns.load(std::memory_order_relaxed);
    for (;;) {
      if (used > now) return used - now;
      int64_t next = std::max(used, now - kPacingBurstNs) + static_cast<int64_t>(cost_ns);
      if (used_to_ns.compare_exchange_weak(used, next, std::memory_order_relaxed)) return 0;
    }
  }
  void refund(uint64_t cost_ns) {
    used_to_ns.fetch_sub(static_cast<int64_t>(cost_ns), std::memory_order_relaxed);
  }
};

struct alignas(64) PacingPage {
  static constexpr uint32_t kMagic = 0x76706163;  // "vpac"
  uint32_t magic;
  uint32_t version;
  std::atomic<uint64_t> bytes_per_s{0};  // written by vrdmad; 0: no limit
  std::atomic<uint64_t> msgs_per_s{0};
  alignas(64) PacingMeter bytes;
  alignas(64) PacingMeter msgs;
  std::atomic<uint64_t> holds{0};  // requests that had to wait for a meter
};
inline constexpr uint64_t kPacingPageSize = 4096;
static_assert(sizeof(PacingPage) <= kPacingPageSize);

// Whether vrdmad set a limit in the page.
inline bool limited(const PacingPage& p) {
  return p.bytes_per_s.load(std::memory_order_relaxed) |
         p.msgs_per_s.load(std::memory_order_relaxed);
}

// What one request costs each meter of `p` at its limits, in ns of the rate (0: no limit).
struct PacingCost {
  uint64_t bytes_ns, msg_ns;
};
inline PacingCost pacing_cost(const PacingPage& p, uint64_t bytes) {
  const uint64_t bps = p.bytes_per_s.load(std::memory_order_relaxed);
  const uint64_t mps = p.msgs_per_s.load(std::memory_order_relaxed);
  return {
      bps ? static_cast<uint64_t>(static_cast<unsigned __int128>(bytes) * 1'000'000'000 / bps) : 0,
      mps ? 1'000'000'000 / mps : 0};
}

// A request of `bytes` against one page: 0 (it may go; both meters charged), or the ns to wait.
inline int64_t pace(PacingPage& p, uint64_t bytes, int64_t now) {
  const PacingCost c = pacing_cost(p, bytes);
  if (c.bytes_ns) {
    if (int64_t wait = p.bytes.admit(c.bytes_ns, now)) {
      p.holds.fetch_add(1, std::memory_order_relaxed);
      return wait;
    }
  }
  if (c.msg_ns) {
    if (int64_t wait = p.msgs.admit(c.msg_ns, now)) {
      if (c.bytes_ns) p.bytes.refund(c.bytes_ns);
      p.holds.fetch_add(1, std::memory_order_relaxed);
      return wait;
    }
  }
  return 0;
}

// Gives back what pace() charged for a request that did not go after all (the destination had
// no receive posted, or was not ready).
inline void unpace(PacingPage& p, uint64_t bytes) {
  const PacingCost c = pacing_cost(p, bytes);
  if (c.bytes_ns) p.bytes.refund(c.bytes_ns);
  if (c.msg_ns) p.msgs.refund(c.msg_ns);
}

}  // namespace vrdma::shm
