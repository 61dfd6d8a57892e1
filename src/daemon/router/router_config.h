// What the router takes from vrdmad's options, and the bounds it keeps.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "daemon/qos/rules.h"
#include "transport/wire.h"
#include "daemon/router/tls.h"

namespace vrdma::daemon {

// What one host may make this router hold, and how long links may wait. The defaults suit a
// cluster; tests shrink them.
struct RouterLimits {
  uint32_t max_links = 256;          // links in every state, both directions
  // From one router address, links that said Hello: one per lane, and two more.
  uint32_t max_links_per_host = wire::kLanes + 2;
  // From one address, connections that have not said Hello yet (its oldest makes room).
  uint32_t pending_links_per_host = 8;
  uint32_t max_connections_per_link = 65536;  // inbound connections (Connect) on one link
  int64_t handshake_ns = 2'000'000'000;        // TCP connect + TLS handshake
  int64_t hello_ns = 3'000'000'000;            // from accept to a valid Hello
  int64_t idle_ns = 60'000'000'000;            // a link nothing uses is closed after this
  int64_t tx_stall_ns = 30'000'000'000;        // a peer that reads nothing of what we queue
  // Requests held for RNR or a destination not ready yet: payload bytes and requests.
  uint64_t held_bytes_per_connection = 16ull << 20;
  uint64_t held_bytes_per_link = 64ull << 20;
  uint64_t held_bytes_per_host = 64ull << 20;
  uint32_t held_requests_per_connection = 16384;
  uint32_t held_requests_per_link = 65536;
  uint32_t wqes_per_pump = 256;  // work requests taken from one SendQueue per pass
  // Request bytes queued on a link and not yet written to its socket beyond which no more are
  // queued: what waits is in the QPs' queues, where the QoS scheduler chooses what goes next.
  uint64_t link_window_bytes = 1ull << 20;
  // A container's QoS state and counters stay this long after its last routed QP went.
  int64_t qos_linger_ns = 300'000'000'000;
};

struct RouterConfig {
  uint32_t host_id = 0;
  std::string listen;  // "a.b.c.d:port" this host's router accepts links on
  TlsFiles tls;        // the cluster CA, this host's certificate and key
  bool plaintext = false;  // no TLS between routers (insecure: benchmarks, trusted networks)
  // A router for this host alone (the mediated path between tenants): no listener, no TLS,
  // no links but the one to itself.
  bool local_only = false;
  RouterLimits limits;
  // Bulk links to each other host (1..wire::kMaxBulkLinks): the bulk QPs to a host are spread
  // over them in turn, each QP on one.
  uint32_t bulk_links = 1;
  // Router threads (1..kMaxThreads, router_pool.h) and which of them this Router runs on. Each
  // lane's links belong to one thread (thread_of): the latency lane's to the last thread, which
  // carries nothing else, and bulk link k to thread k mod (threads - 1).
  static constexpr uint32_t kMaxThreads = 8;
  uint32_t threads = 1;
  uint32_t thread = 0;
  uint32_t thread_of(uint32_t lane) const {
    if (threads <= 1) return 0;
    if (lane == wire::kLatencyLane) return threads - 1;
    const uint32_t k = lane == wire::kMainLane ? 0 : lane - wire::kLatencyLane;  // bulk link k
    return k % (threads - 1);
  }
  qos::RuleSet qos;  // weights and rate limits of containers and tenants (default: equal, none)
  // The CPUs every router thread may run on (ascending); empty: wherever the scheduler puts
  // them. A thread that wakes another wakes it on the other's CPU: on a CPU of its own that
  // takes an interrupt between CPUs, on the same CPU it does not.
  std::vector<uint32_t> cpus;
  // After a pass that did work, a router thread goes on polling this long before it sleeps
  // (0: it sleeps at once). Polling spares the next frame a wake-up where the router threads
  // have cores of their own; where programs spin on every core it takes time from them.
  int64_t poll_ns = 0;
};

}  // namespace vrdma::daemon
