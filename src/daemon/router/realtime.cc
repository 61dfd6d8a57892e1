// The latency thread's scheduling class (realtime.h).
#include "daemon/router/realtime.h"

#include <errno.h>
#include <sched.h>

namespace vrdma::daemon {

int set_realtime(bool on, int priority) {
  sched_param p{};
  p.sched_priority = on ? priority : 0;
  return ::sched_setscheduler(0, on ? SCHED_FIFO : SCHED_OTHER, &p) == 0 ? 0 : errno;
}

}  // namespace vrdma::daemon
