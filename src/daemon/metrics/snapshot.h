// What a scrape shows: the daemon's counters as read at one moment, apart from where they come
// from (vrdmad's clients, its router, its directory), so that rendering is testable alone.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace vrdma::daemon::metrics {

inline constexpr uint32_t kOpClasses = 4;    // send, write, read, atomic (shm::OpClass)
inline constexpr uint32_t kWcStatuses = 24;  // IBV_WC_SUCCESS .. IBV_WC_TM_RNDV_INCOMPLETE
inline constexpr uint32_t kQpStates = 8;     // RESET .. ERR, then "UNKNOWN"

// The counters of one QP, or their sum over a container's QPs.
struct CounterSet {
  uint64_t tx_requests[kOpClasses] = {}, tx_bytes[kOpClasses] = {};
  uint64_t rx_requests[kOpClasses] = {};
  uint64_t rx_bytes = 0;  // SEND and WRITE payload that landed in the container
  uint64_t send_completions[kWcStatuses] = {};
  uint64_t recv_ok = 0, recv_len_err = 0, recv_prot_err = 0;
  uint64_t dropped = 0;  // receive completions a peer forged or repeated
  uint64_t rnr_retries = 0, transport_retries = 0;

  void add(const CounterSet& o);
  // Whether any counter is below the one in `earlier` (the QP was replaced meanwhile).
  bool went_back(const CounterSet& earlier) const;
};

struct QpSample {
  uint32_t client = 0;
  uint32_t qpn = 0;
  uint32_t state = kQpStates - 1;  // enum ibv_qp_state; kQpStates - 1 when unreadable
  CounterSet counters;
};

struct ContainerSample {
  std::string name;  // the container's name (its namespace's)
  std::string ip;    // its address
  std::string tenant;
  size_t clients = 0;  // verbs clients (processes) of the container
  std::vector<QpSample> qps;
  uint64_t mrs = 0, registered_bytes = 0;
  uint64_t cqs_overflowed = 0;  // CQs whose ring was found full (each stays in error)
  uint64_t held_requests = 0, held_bytes = 0;  // requests to it the router holds (RNR, not ready)
  // Its direct path as the kernel counts it (daemon/direct/socket_stats.h), when it has one.
  bool direct = false;
  uint64_t direct_sent_bytes = 0, direct_received_bytes = 0, direct_connections = 0;
  std::string key() const { return name + "/" + ip; }
};

struct LinkSample {
  uint32_t peer_host = 0;
  bool outbound = false, up = false;
  std::string security;  // "plaintext", "tls", "ktls"
  std::string lane = "main";  // "main", or "latency" (the latency class's own link)
  uint64_t rx_bytes = 0, tx_bytes = 0, rx_frames = 0, tx_frames = 0;
  double rtt_s = -1;  // the last ping's round trip; < 0: none measured yet
  uint64_t held_requests = 0, held_bytes = 0;
};

// One container's traffic in one QoS class as the router's scheduler counted it (traffic to
// other hosts and on the mediated path), with the rule in force for it.
struct QosSample {
  std::string ip, tenant;
  std::string cls;  // "bulk", "latency"
  uint32_t weight = 1;
  uint64_t rate = 0, msgs_rate = 0;  // limits in bytes/s and messages/s; 0: none
  uint64_t bytes = 0, msgs = 0;
  uint64_t delay_ns_sum = 0, delay_ns_max = 0;  // queueing delay in the scheduler
  uint64_t holds = 0;                           // times a rate limit held work back
};

struct DaemonSample {
  uint32_t host_id = 0;
  std::string version;
  size_t clients = 0;  // every connection, CLI included
  double cpu_seconds = 0;
  uint64_t resident_bytes = 0;
  double uptime_s = 0;
  std::string directory;  // its backend: "embedded" or "etcd"
  bool directory_up = true;
  size_t directory_hosts = 0;
  bool router = false;
  size_t routed_qps = 0;
  std::map<uint32_t, uint64_t> link_connects;  // peer host -> links that came up to/from it
  uint64_t scrapes = 0;
};

struct Snapshot {
  DaemonSample daemon;
  std::vector<ContainerSample> containers;
  std::vector<LinkSample> links;
  std::vector<QosSample> qos;
};

// Keeps container counters monotonic across QPs and processes that come and go. vrdmad hands
// it a QP's final counters when the QP is destroyed or its process ends (retire); a QP that
// disappears otherwise between two scrapes leaves its last seen counters. A container without
// processes keeps its series (with its totals) until kMaxGone other containers went since.
class CounterLedger {
 public:
  static constexpr size_t kMaxGone = 1024;

  void retire(const ContainerSample& container, uint32_t client, uint32_t qpn,
              const CounterSet& final_counters);
  // Adds a sample (no processes, no QPs) for every container the ledger remembers that `s`
  // lacks, then returns the totals per ContainerSample::key(), every QP so far included.
  std::map<std::string, CounterSet> totals(Snapshot& s);

 private:
  struct Record {
    std::string name, ip, tenant;
    CounterSet retired;
    uint64_t gone_since = 0;  // 0: alive at the last scrape; else the scrape it went missing
  };
  struct Seen {
    std::string container;
    CounterSet last;
  };
  Record& record(const ContainerSample& c);
  std::map<std::pair<uint32_t, uint32_t>, Seen> seen_;  // (client, qpn)
  std::map<std::string, Record> records_;
  uint64_t scrape_ = 0;
};

const char* wc_status_name(uint32_t status);  // "IBV_WC_SUCCESS", ...
const char* qp_state_label(uint32_t state);   // "RESET", ..., "ERR", "UNKNOWN"

// The page: Prometheus text format 0.0.4.
std::string render(const Snapshot& s, CounterLedger& ledger);

}  // namespace vrdma::daemon::metrics
