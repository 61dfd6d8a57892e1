// The page: every family vrdmad exports, in one place. Names follow Prometheus' conventions
// (vrdma_ prefix, base units, _total on counters, _info for metadata) and, where the meaning is
// the same, the kernel's RDMA counter names (rx_write_requests, rnr_nak_retry_err,
// local_ack_timeout_err).
#include <infiniband/verbs.h>

#include "daemon/metrics/exposition.h"
#include "daemon/metrics/snapshot.h"

namespace vrdma::daemon::metrics {

static_assert(IBV_WC_REM_ACCESS_ERR == 10 && IBV_WC_TM_RNDV_INCOMPLETE == kWcStatuses - 1);
static_assert(IBV_QPS_ERR == 6);

namespace {

const char* const kOpNames[kOpClasses] = {"send", "write", "read", "atomic"};

struct Writer {
  Exposition e;
  std::string host;

  Labels container_labels(const ContainerSample& c) const {
    return {{"host", host}, {"container", c.name}, {"ip", c.ip}, {"tenant", c.tenant}};
  }

  void containers(const Snapshot& s, const std::map<std::string, CounterSet>& totals) {
    auto per = [&](const char* name, Type t, const char* help, auto value) {
      e.family(name, t, help);
      for (const auto& c : s.containers)
        e.sample(container_labels(c), value(c, totals.at(c.key())));
    };
    auto per_op = [&](const char* name, const char* help, auto value) {
      e.family(name, Type::kCounter, help);
      for (const auto& c : s.containers)
        for (uint32_t k = 0; k < kOpClasses; ++k) {
          Labels l = container_labels(c);
          l.emplace_back("op", kOpNames[k]);
          e.sample(l, value(totals.at(c.key()), k));
        }
    };
    per_op("vrdma_tx_requests_total",
           "Work requests the container's QPs completed successfully, by operation",
           [](const CounterSet& t, uint32_t k) { return t.tx_requests[k]; });
    per_op("vrdma_tx_bytes_total",
           "Bytes of those work requests (sent; for read, the bytes read), by operation",
           [](const CounterSet& t, uint32_t k) { return t.tx_bytes[k]; });
    per("vrdma_rx_bytes_total", Type::kCounter,
        "Bytes peers' SEND and RDMA WRITE requests placed in the container's memory",
        [](const ContainerSample&, const CounterSet& t) { return t.rx_bytes; });
    static const char* const kRxNames[kOpClasses] = {
        "vrdma_rx_send_requests_total", "vrdma_rx_write_requests_total",
        "vrdma_rx_read_requests_total", "vrdma_rx_atomic_requests_total"};
    static const char* const kRxHelp[kOpClasses] = {
        "SEND requests peers executed on the container's QPs",
        "RDMA WRITE requests peers executed on the container's QPs",
        "RDMA READ requests peers executed on the container's QPs",
        "Atomic requests peers executed on the container's QPs"};
    for (uint32_t k = 0; k < kOpClasses; ++k)
      per(kRxNames[k], Type::kCounter, kRxHelp[k],
          [k](const ContainerSample&, const CounterSet& t) { return t.rx_requests[k]; });

    e.family("vrdma_completions_total", Type::kCounter,
             "Work completions of the container's QPs by queue (send, recv) and status");
    for (const auto& c : s.containers) {
      const CounterSet& t = totals.at(c.key());
      for (uint32_t st = 0; st < kWcStatuses; ++st) {
        Labels l = container_labels(c);
        l.emplace_back("queue", "send");
        l.emplace_back("status", wc_status_name(st));
        e.sample(l, t.send_completions[st]);
      }
      const std::pair<uint32_t, uint64_t> recv[] = {{IBV_WC_SUCCESS, t.recv_ok},
                                                    {IBV_WC_LOC_LEN_ERR, t.recv_len_err},
                                                    {IBV_WC_LOC_PROT_ERR, t.recv_prot_err}};
      for (const auto& [st, v] : recv) {
        Labels l = container_labels(c);
        l.emplace_back("queue", "recv");
        l.emplace_back("status", wc_status_name(st));
        e.sample(l, v);
      }
    }
    per("vrdma_rnr_nak_retry_err_total", Type::kCounter,
        "Requests tried again after the responder had no receive posted (RNR NAK)",
        [](const ContainerSample&, const CounterSet& t) { return t.rnr_retries; });
    per("vrdma_local_ack_timeout_err_total", Type::kCounter,
        "Requests tried again after the local ACK timeout (the destination was not ready)",
        [](const ContainerSample&, const CounterSet& t) { return t.transport_retries; });
    per("vrdma_dropped_completions_total", Type::kCounter,
        "Receive completions a peer reported that named no outstanding receive (dropped)",
        [](const ContainerSample&, const CounterSet& t) { return t.dropped; });

    e.family("vrdma_qps", Type::kGauge, "The container's QPs by state");
    for (const auto& c : s.containers) {
      uint64_t by_state[kQpStates] = {};
      for (const auto& q : c.qps) ++by_state[q.state < kQpStates ? q.state : kQpStates - 1];
      for (uint32_t st = 0; st < kQpStates; ++st) {
        Labels l = container_labels(c);
        l.emplace_back("state", qp_state_label(st));
        e.sample(l, by_state[st]);
      }
    }
    per("vrdma_mrs", Type::kGauge, "Memory regions the container has registered",
        [](const ContainerSample& c, const CounterSet&) { return c.mrs; });
    per("vrdma_registered_bytes", Type::kGauge, "Bytes of memory the container has registered",
        [](const ContainerSample& c, const CounterSet&) { return c.registered_bytes; });
    per("vrdma_cq_overflows", Type::kGauge,
        "The container's CQs that overflowed (a CQ stays in error once it has)",
        [](const ContainerSample& c, const CounterSet&) { return c.cqs_overflowed; });
    per("vrdma_held_requests", Type::kGauge,
        "Requests to the container the router holds (no receive posted, QP not ready yet)",
        [](const ContainerSample& c, const CounterSet&) { return c.held_requests; });
    per("vrdma_held_bytes", Type::kGauge, "Payload bytes of those held requests",
        [](const ContainerSample& c, const CounterSet&) { return c.held_bytes; });
    per("vrdma_container_clients", Type::kGauge, "The container's processes using vrdma",
        [](const ContainerSample& c, const CounterSet&) { return uint64_t(c.clients); });
    // The direct path, from the kernel's statistics of the container's sockets (containers
    // with a direct port only): counted since its first vrdma process of this vrdmad came.
    auto direct = [&](const char* name, Type t, const char* help, uint64_t ContainerSample::*v) {
      e.family(name, t, help);
      for (const auto& c : s.containers)
        if (c.direct) e.sample(container_labels(c), c.*v);
    };
    direct("vrdma_direct_sent_bytes_total", Type::kCounter,
           "Bytes the container sent on the direct path that its peers acknowledged (the "
           "kernel's TCP statistics of its direct-port connections)",
           &ContainerSample::direct_sent_bytes);
    direct("vrdma_direct_received_bytes_total", Type::kCounter,
           "Bytes the container received on the direct path (the kernel's TCP statistics of "
           "its direct-port connections)",
           &ContainerSample::direct_received_bytes);
    direct("vrdma_direct_connections", Type::kGauge,
           "The container's open direct-path connections (both directions)",
           &ContainerSample::direct_connections);
  }

  Labels link_labels(const LinkSample& l) const {
    return {{"host", host},
            {"peer_host", std::to_string(l.peer_host)},
            {"direction", l.outbound ? "out" : "in"},
            {"security", l.security},
            {"lane", l.lane}};
  }

  void links(const Snapshot& s) {
    auto per = [&](const char* name, Type t, const char* help, auto value) {
      e.family(name, t, help);
      for (const auto& l : s.links) e.sample(link_labels(l), value(l));
    };
    per("vrdma_link_up", Type::kGauge, "Whether the link to the peer host carries frames",
        [](const LinkSample& l) { return uint64_t(l.up); });
    per("vrdma_link_rx_bytes_total", Type::kCounter, "Bytes received on the link",
        [](const LinkSample& l) { return l.rx_bytes; });
    per("vrdma_link_tx_bytes_total", Type::kCounter, "Bytes sent on the link",
        [](const LinkSample& l) { return l.tx_bytes; });
    per("vrdma_link_rx_frames_total", Type::kCounter, "Frames received on the link",
        [](const LinkSample& l) { return l.rx_frames; });
    per("vrdma_link_tx_frames_total", Type::kCounter, "Frames queued for sending on the link",
        [](const LinkSample& l) { return l.tx_frames; });
    e.family("vrdma_link_rtt_seconds", Type::kGauge,
             "Round trip of the link's last ping (links ping while they carry work)");
    for (const auto& l : s.links)
      if (l.rtt_s >= 0) e.sample(link_labels(l), l.rtt_s);
    per("vrdma_link_held_requests", Type::kGauge,
        "Requests that came on the link and wait (no receive posted, QP not ready yet)",
        [](const LinkSample& l) { return l.held_requests; });
    per("vrdma_link_held_bytes", Type::kGauge, "Payload bytes of those held requests",
        [](const LinkSample& l) { return l.held_bytes; });
    e.family("vrdma_link_connects_total", Type::kCounter,
             "Links that came up with the peer host since vrdmad started (more than one: "
             "reconnects)");
    for (const auto& [peer, n] : s.daemon.link_connects)
      e.sample({{"host", host}, {"peer_host", std::to_string(peer)}}, n);
  }

  void qos(const Snapshot& s) {
    auto per = [&](const char* name, Type t, const char* help, auto value) {
      e.family(name, t, help);
      for (const auto& q : s.qos)
        e.sample({{"host", host}, {"ip", q.ip}, {"tenant", q.tenant}, {"class", q.cls}}, value(q));
    };
    per("vrdma_qos_tx_bytes_total", Type::kCounter,
        "Bytes the router's scheduler sent for the container in the class",
        [](const QosSample& q) { return q.bytes; });
    per("vrdma_qos_tx_messages_total", Type::kCounter,
        "Requests the router's scheduler sent for the container in the class",
        [](const QosSample& q) { return q.msgs; });
    per("vrdma_qos_queue_delay_seconds_total", Type::kCounter,
        "Time those requests waited in the scheduler, summed (divide by messages: the mean)",
        [](const QosSample& q) { return double(q.delay_ns_sum) / 1e9; });
    per("vrdma_qos_queue_delay_max_seconds", Type::kGauge,
        "The longest a request of the container waited in the scheduler in the class",
        [](const QosSample& q) { return double(q.delay_ns_max) / 1e9; });
    per("vrdma_qos_holds_total", Type::kCounter,
        "Times the container had work in the class but its rate limit held it back",
        [](const QosSample& q) { return q.holds; });
    per("vrdma_qos_weight", Type::kGauge, "The container's weight in fair sharing",
        [](const QosSample& q) { return uint64_t(q.weight); });
    per("vrdma_qos_rate_limit_bytes_per_second", Type::kGauge,
        "The container's rate limit in bytes/s (0: none)",
        [](const QosSample& q) { return q.rate; });
    per("vrdma_qos_rate_limit_messages_per_second", Type::kGauge,
        "The container's rate limit in messages/s (0: none)",
        [](const QosSample& q) { return q.msgs_rate; });
  }

  void daemon(const Snapshot& s) {
    const DaemonSample& d = s.daemon;
    Labels h = {{"host", host}};
    e.family("vrdma_build_info", Type::kGauge, "vrdmad's version (the value is always 1)");
    e.sample({{"host", host}, {"version", d.version}}, uint64_t(1));
    e.family("vrdma_daemon_clients", Type::kGauge, "Connections to vrdmad (CLI included)");
    e.sample(h, uint64_t(d.clients));
    e.family("vrdma_daemon_cpu_seconds_total", Type::kCounter, "CPU time vrdmad used");
    e.sample(h, d.cpu_seconds);
    e.family("vrdma_daemon_resident_memory_bytes", Type::kGauge, "vrdmad's resident memory");
    e.sample(h, d.resident_bytes);
    e.family("vrdma_daemon_uptime_seconds", Type::kGauge, "Time since vrdmad started");
    e.sample(h, d.uptime_s);
    e.family("vrdma_directory_up", Type::kGauge,
             "Whether the cluster directory answers (1 for a single host)");
    e.sample({{"host", host}, {"backend", d.directory}}, uint64_t(d.directory_up));  // kind only
    e.family("vrdma_directory_hosts", Type::kGauge, "Hosts the directory knows (this one too)");
    e.sample(h, uint64_t(d.directory_hosts));
    e.family("vrdma_router_enabled", Type::kGauge, "Whether vrdmad routes to other hosts");
    e.sample(h, uint64_t(d.router));
    e.family("vrdma_router_routed_qps", Type::kGauge, "Local QPs whose work the router carries");
    e.sample(h, uint64_t(d.routed_qps));
    e.family("vrdma_metrics_scrapes_total", Type::kCounter, "Scrapes of this endpoint");
    e.sample(h, d.scrapes);
  }
};

}  // namespace

std::string render(const Snapshot& snapshot, CounterLedger& ledger) {
  Snapshot s = snapshot;
  auto totals = ledger.totals(s);
  Writer w;
  w.host = std::to_string(s.daemon.host_id);
  w.daemon(s);
  w.containers(s, totals);
  w.links(s);
  w.qos(s);
  return w.e.text();
}

}  // namespace vrdma::daemon::metrics
