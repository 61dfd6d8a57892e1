#include "shm/asym_fence.h"

#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace vrdma::shm {

namespace {

int membarrier(int cmd) { return static_cast<int>(::syscall(__NR_membarrier, cmd, 0, 0)); }

int offered() {
  static const int cmds = [] {
    int c = membarrier(MEMBARRIER_CMD_QUERY);
    return c < 0 ? 0 : c;
  }();
  return cmds;
}

}  // namespace

bool receives_heavy_fences() {
  static const bool registered =
      (offered() & MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED) &&
      membarrier(MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED) == 0;
  return registered;
}

bool can_issue_heavy_fence() { return (offered() & MEMBARRIER_CMD_GLOBAL_EXPEDITED) != 0; }

bool heavy_fence() { return membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED) == 0; }

}  // namespace vrdma::shm
