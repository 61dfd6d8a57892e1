// The private interface librdmacm.so.1 uses to reach vrdmad over this library's one control
// connection (version node VRDMA_PRIVATE_1): the daemon then sees one client per process,
// owning both its QPs and its rdma_cm listeners and connections.
#include <errno.h>
#include <string.h>

#include <algorithm>
#include <memory>

#include "compat/verbs/handles.h"
#include "engine/device.h"

using namespace vrdma;

// Sends one request (a proto::Op of the connection manager) and waits for its reply.
// Returns 0 or a positive errno; on success the reply payload (at most *reply_len bytes) is
// copied to `reply` and *reply_len set to its full length.
VRDMA_EXPORT int vrdma_cm_call(uint16_t op, const void* req, size_t len, void* reply,
                               size_t* reply_len) {
  if (reply_len && !reply) *reply_len = 0;
  auto dev = Device::get();
  if (!dev) return errno ? errno : ENODEV;
  auto pkt = std::make_unique<Packet>();
  int rc = dev->control().call(static_cast<proto::Op>(op), req, len, pkt.get());
  pkt->close_fds();
  if (reply_len) {
    if (rc == 0 && reply) {
      size_t n = std::min<size_t>(*reply_len, pkt->header.len);
      memcpy(reply, pkt->payload, n);
      *reply_len = pkt->header.len;
    } else {
      *reply_len = 0;
    }
  }
  return rc;
}

// Installs the handler of the daemon's rdma_cm events (ops proto::kCmRequest..
// kCmDisconnected), or removes it (NULL). The handler runs on whichever thread reads the
// control socket with the control lock held: it must only queue the event.
VRDMA_EXPORT void vrdma_cm_set_handler(void (*fn)(uint16_t op, const void* payload,
                                                  size_t len)) {
  if (!fn) {
    Device::set_cm_handler(nullptr);
    return;
  }
  Device::set_cm_handler(
      [fn](const Packet& p) { fn(p.header.op, p.payload, p.header.len); });
}
