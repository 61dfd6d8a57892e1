// rdma_cm between hosts: connection-manager messages forwarded by the routers.
#include "daemon/daemon.h"
#include "daemon/log.h"

namespace vrdma::daemon {

void Daemon::on_remote_cm(uint32_t host, const wire::Cm& m) {
  LOG_DEBUG("cm: message %u from host %u ignored", m.op, host);
}

}  // namespace vrdma::daemon
