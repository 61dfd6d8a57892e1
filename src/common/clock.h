// The one clock of vrdma's timers: CLOCK_MONOTONIC in nanoseconds.
#pragma once

#include <time.h>

#include <cstdint>

namespace vrdma {

inline int64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

}  // namespace vrdma
