// The Status reply: a JSON document describing the daemon and its clients.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "daemon/core/quotas.h"

namespace vrdma::daemon {

struct StatusQp {
  uint32_t qpn = 0;
  uint32_t type = 0;        // proto::QpType
  bool have_state = false;  // false when the arena could not be read
  uint32_t state = 0;
  uint64_t tx_ops = 0, tx_bytes = 0, rx_ops = 0, rx_bytes = 0, errors = 0;
  std::string path;      // how it reaches its destination ("" before it connects)
  std::string path_why;  // and why that way
};

struct StatusMr {
  uint32_t key = 0;
  uint64_t length = 0;
  uint32_t access = 0;
  bool key_shown = true;  // false: another container's MR, listed without its key
};

// A container's use of vrdmad against its quotas.
struct StatusContainer {
  std::string name;
  std::array<uint64_t, kResourceCount> used{};
  std::array<uint64_t, kResourceCount> limit{};
};

struct StatusClient {
  uint32_t id = 0;
  int pid = 0;
  uint32_t uid = 0;
  std::string container;
  uint32_t ipv4 = 0;  // network byte order
  std::string tenant;
  std::string kind;  // "verbs", "cli", or "none" before Hello
  size_t fds = 0;
  uint32_t page_move_guard = 0;  // shm::PageMoveGuard, the client's word
  // Its container's direct path as the kernel counts it (when the container has a port).
  bool direct = false;
  uint64_t direct_sent = 0, direct_received = 0, direct_connections = 0;
  std::vector<StatusQp> qps;
  std::vector<StatusMr> mrs;
};

struct StatusInput {
  int pid = 0;
  std::string socket;
  uint32_t host_id = 0;
  uint64_t uptime_s = 0;
  size_t clients_connected = 0;  // all clients, whether listed or not
  std::string scope;             // "all" or "tenant:<name>"
  std::vector<StatusClient> clients;
  std::vector<StatusContainer> containers;
  // Across hosts.
  std::string directory;  // its description
  bool directory_available = true;
  size_t directory_hosts = 1;
  bool router = false;
  size_t routed_qps = 0;
  uint32_t router_links = 0;    // bulk links per host pair (--router-links)
  uint32_t router_threads = 0;  // --router-threads
  std::string router_cpus;      // --router-cpus as a CPU list; "": any CPU
  uint32_t router_poll_us = 0;  // --router-poll-us
  // The direct path: on or off (--no-direct-path), its port, the containers that have one,
  // and the tickets kept for connections not made yet.
  bool direct_path = false;
  uint32_t direct_port = 0;
  size_t direct_ports = 0, direct_tickets = 0;
  std::string latency_thread;   // RouterPool::latency_thread
  uint64_t latency_thread_demotions = 0;
  uint32_t bulk_threads = 0, bulk_threads_realtime = 0;  // RouterPool::bulk_threads
  uint64_t bulk_threads_demotions = 0;
  struct Link {
    uint32_t host_id;
    bool outbound, connected;
    std::string addr;
    uint64_t bytes_in, bytes_out;
    std::string security;       // "plaintext", "tls" (user space) or "ktls" (the kernel encrypts)
    std::string lane = "main";  // "main", or "latency": the latency class's own link
    uint32_t thread = 0;        // the router thread that carries it
  };
  std::vector<Link> links;
  // Pairs of tenants allowed to reach each other ("A->B"; the administrator sees them).
  std::vector<std::string> allow;
  // QoS on the router's links: per container and class, its rule and what it sent.
  struct QosFlow {
    std::string container;  // its address
    std::string tenant;
    std::string cls;  // "latency" or "bulk"
    uint32_t weight, tenant_weight;
    uint64_t rate, msgs_rate, tenant_rate;  // limits (0: none)
    uint64_t bytes, msgs, delay_ns_sum, delay_ns_max, holds;
  };
  std::vector<QosFlow> qos;
};

const char* qp_type_name(uint32_t type);
const char* qp_state_name(uint32_t state);  // RESET, INIT, RTR, RTS, SQD, SQE, ERR, UNKNOWN

// Renders the JSON text, at most `limit` bytes. When the full document does not fit, the
// per-client QP and MR lists are shortened (then, if need be, the client and container lists)
// and "truncated" is true. Totals always count everything in `in`.
std::string render_status(const StatusInput& in, size_t limit);

}  // namespace vrdma::daemon
