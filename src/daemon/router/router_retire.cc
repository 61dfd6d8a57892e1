// The end of a routed QP: what it posted still goes out.
//
// The library writes a routed request into the QP's send queue and returns, as a device's
// post_send does; the router takes it from there on its next pass. An application may destroy
// the QP right after posting (mckey sends its last datagrams unsignaled, leaves the group and
// destroys its QP at once): a device has sent them by then, and so must the router. vrdmad
// answers the library's release of the QP only after the router ran qp_freed, and the library
// frees the queue, and the application the memory the requests name, only after that answer:
// until then every request posted is there to be sent. A UD QP's datagrams are therefore sent
// here (a datagram is complete once it is on its link); RC and UC requests are not (their
// completions need the peer's answers, which nobody would take any more). What finds no room on
// its link after a few writes of the links' queued frames is lost, as datagrams are.
#include <string.h>

#include "common/clock.h"
#include "common/log.h"
#include "daemon/router/router_state.h"

namespace vrdma::daemon {

namespace {

constexpr int kRetireRounds = 8;

}  // namespace

uint64_t Router::send_posted(Outbound& o) {
  if (o.type != IBV_QPT_UD) return 0;
  uint64_t left = 0;
  for (int round = 0; round < kRetireRounds; ++round) {
    const int64_t now = now_ns();
    requester_.pump(o, now, UINT32_MAX);
    uint64_t tail;
    if (o.failed || o.qp->gone.load(std::memory_order_relaxed) ||
        o.qp->state.load(std::memory_order_acquire) == IBV_QPS_RESET || !requester_.tail_of(o, &tail))
      return 0;
    left = tail - o.sent;
    if (!left) return 0;
    // The rest waits for room on a link: write what the links hold, then try again.
    for (auto& [id, l] : links_)
      if (l->open() && l->tx_pending() && !flush_link(*l, now)) doom(id, "send failed");
  }
  LOG_INFO("router: QP 0x%x released with %llu datagram(s) its links had no room for: lost",
           o.qpn, static_cast<unsigned long long>(left));
  return left;
}

}  // namespace vrdma::daemon
