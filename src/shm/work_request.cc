#include "shm/work_request.h"

namespace vrdma::shm {

int64_t rnr_timer_ns(uint32_t code) {
  // The IB table of RNR NAK timer values, in units of 10 microseconds.
  static constexpr uint32_t k10us[32] = {
      65536, 1,    2,    3,    4,    6,    8,     12,    16,    24,    32,
      48,    64,   96,   128,  192,  256,  384,   512,   768,   1024,  1536,
      2048,  3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768, 49152};
  return int64_t(k10us[code & 31]) * 10000;
}

int64_t ack_timeout_ns(uint32_t timeout) {
  timeout &= 31;
  return timeout == 0 ? 1000000000 : int64_t(4096) << timeout;
}

}  // namespace vrdma::shm
