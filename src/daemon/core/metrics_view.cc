// The metrics endpoint: what a scrape reads of the daemon, its clients' shared counters, its
// router and its directory. Runs in the event loop, like the Status reply; reading the counters
// takes no lock from anyone (each is a plain per-QP counter its one writer keeps).
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "common/address.h"
#include "common/clock.h"
#include "common/log.h"
#include "daemon/core/daemon.h"

#ifndef VRDMA_VERSION
#define VRDMA_VERSION "unknown"
#endif

namespace vrdma::daemon {

namespace {

double cpu_seconds() {
  rusage ru{};
  if (::getrusage(RUSAGE_SELF, &ru) != 0) return 0;
  auto s = [](const timeval& t) { return double(t.tv_sec) + double(t.tv_usec) / 1e6; };
  return s(ru.ru_utime) + s(ru.ru_stime);
}

uint64_t resident_bytes() {
  FILE* f = std::fopen("/proc/self/statm", "re");
  if (!f) return 0;
  unsigned long long size = 0, resident = 0;
  int n = std::fscanf(f, "%llu %llu", &size, &resident);
  std::fclose(f);
  return n == 2 ? resident * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE)) : 0;
}

metrics::CounterSet counters_of(const QpSnapshot& s) {
  metrics::CounterSet c;
  for (uint32_t k = 0; k < metrics::kOpClasses; ++k) {
    c.tx_requests[k] = s.class_ops[k];
    c.tx_bytes[k] = s.class_bytes[k];
  }
  static_assert(metrics::kWcStatuses == shm::kWcStatusSlots &&
                metrics::kOpClasses == shm::kOpClasses);
  std::copy(std::begin(s.completions), std::end(s.completions), c.send_completions);
  c.recv_ok = s.recv_ok;
  c.recv_len_err = s.recv_len_err;
  c.recv_prot_err = s.recv_prot_err;
  c.dropped = s.dropped;
  c.rnr_retries = s.rnr_retries;
  c.transport_retries = s.transport_retries;
  return c;
}

}  // namespace

int Daemon::start_metrics() {
  if (cfg_.metrics_listen.empty()) return 0;
  metrics_ = std::make_unique<metrics::MetricsServer>();
  if (int err =
          metrics_->start(epoll_.get(), cfg_.metrics_listen, [this] { return metrics_text(); })) {
    LOG_ERROR("metrics: cannot listen on %s: %s", cfg_.metrics_listen.c_str(), strerror(err));
    metrics_.reset();
    return err;
  }
  LOG_INFO("metrics: serving http://%s/metrics", cfg_.metrics_listen.c_str());
  if (cfg_.metrics_listen.rfind("127.", 0) != 0)
    LOG_WARN("metrics: %s is not a loopback address; the page has no authentication",
             cfg_.metrics_listen.c_str());
  return 0;
}

int Daemon::metrics_timeout(int timeout_ms) const {
  int64_t dl = metrics_->next_deadline();
  if (dl < 0) return timeout_ms;
  int ms = static_cast<int>(std::max<int64_t>(1, (dl - now_ns() + 999999) / 1000000));
  return timeout_ms < 0 ? ms : std::min(timeout_ms, ms);
}

metrics::ContainerSample Daemon::metrics_container(const Client& c) const {
  metrics::ContainerSample cs;
  cs.name = c.ident.container;
  cs.ip = ipv4_text(c.ident.ipv4);
  cs.tenant = c.tenant;
  SocketBytes t;
  size_t connections = 0;
  if ((cs.direct = direct_traffic_of(c.ident.netns, &t, &connections))) {
    cs.direct_sent_bytes = t.sent;
    cs.direct_received_bytes = t.received;
    cs.direct_connections = connections;
  }
  return cs;
}

metrics::QpSample Daemon::metrics_qp(const Client& c, uint32_t qpn, uint32_t* send_cq,
                                     uint32_t* recv_cq) const {
  const QpRecord* rec = registry_.find_qp(qpn);
  metrics::QpSample q;
  q.client = c.id;
  q.qpn = qpn;
  QpSnapshot snap;
  if (c.arena.read_qp(rec->arena_offset, &snap)) {
    q.state = std::min<uint32_t>(snap.state, metrics::kQpStates - 1);
    q.counters = counters_of(snap);
    *send_cq = snap.send_cq_offset;
    *recv_cq = snap.recv_cq_offset;
  }
  // Receive-side counters are kept by the senders, in the QP object.
  if (auto f = c.fds.find(rec->object_fd_id); f != c.fds.end()) {
    uint64_t ops = 0;
    f->second.object.read_rx(&ops, &q.counters.rx_bytes);
    f->second.object.read_rx_requests(q.counters.rx_requests);
  }
  return q;
}

void Daemon::metrics_retire(const Client& c, uint32_t qpn) {
  if (c.kind != static_cast<uint32_t>(proto::ClientKind::kVerbs) || !registry_.find_qp(qpn)) return;
  uint32_t send_cq = 0, recv_cq = 0;
  metrics::QpSample q = metrics_qp(c, qpn, &send_cq, &recv_cq);
  metrics_ledger_.retire(metrics_container(c), c.id, qpn, q.counters);
}

std::string Daemon::metrics_text() {
  sample_direct_traffic(now_ns(), true);
  metrics::Snapshot s;
  metrics::DaemonSample& d = s.daemon;
  d.host_id = cfg_.host_id;
  d.version = VRDMA_VERSION;
  d.cpu_seconds = cpu_seconds();
  d.resident_bytes = resident_bytes();
  d.uptime_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started_at_).count();
  // The backend's kind only: its description changes (leases, host counts) and would make a new
  // series each time.
  d.directory = cfg_.directory.rfind("etcd", 0) == 0 ? "etcd" : "embedded";
  d.directory_up = directory_->available();
  d.directory_hosts = directory_->hosts_known();
  d.scrapes = metrics_ ? metrics_->scrapes() : 0;
  std::map<uint32_t, std::pair<uint64_t, uint64_t>> held;
  if (router_) {
    d.router = true;
    d.routed_qps = router_->routed_qps();
    d.link_connects = router_->link_connects();
    held = router_->held_by_owner();
    for (const auto& l : router_->links()) {
      metrics::LinkSample ls;
      ls.peer_host = l.host_id;
      ls.outbound = l.outbound;
      ls.up = l.connected;
      ls.security = !l.tls ? "plaintext" : l.ktls ? "ktls" : "tls";
      ls.lane = wire::lane_label(l.lane);
      ls.rx_bytes = l.bytes_in;
      ls.tx_bytes = l.bytes_out;
      ls.rx_frames = l.frames_in;
      ls.tx_frames = l.frames_out;
      ls.rtt_s = l.rtt_ns < 0 ? -1.0 : double(l.rtt_ns) / 1e9;
      ls.held_requests = l.held_requests;
      ls.held_bytes = l.held_bytes;
      s.links.push_back(std::move(ls));
    }
    for (const auto& f : router_->qos_flows())
      s.qos.push_back({ipv4_text(f.ipv4), f.tenant, qos::class_name(f.cls), f.container.weight,
                       f.container.bytes_per_s, f.container.msgs_per_s, f.counters.bytes,
                       f.counters.msgs, f.counters.delay_ns_sum, f.counters.delay_ns_max,
                       f.counters.holds});
  }
  // One sample per container (name and address), summed over its verbs clients.
  std::map<std::string, size_t> index;
  for (const auto& [id, cp] : clients_) {
    const Client& c = *cp;
    if (c.doomed || !c.identified) continue;
    ++d.clients;
    if (!c.hello || c.kind != static_cast<uint32_t>(proto::ClientKind::kVerbs)) continue;
    const std::string key = c.ident.container + "/" + ipv4_text(c.ident.ipv4);
    auto [it, fresh] = index.emplace(key, s.containers.size());
    if (fresh) s.containers.push_back(metrics_container(c));
    metrics::ContainerSample& cs = s.containers[it->second];
    ++cs.clients;
    std::vector<uint32_t> cqs;
    for (uint32_t qpn : registry_.qpns_of(c.id)) {
      uint32_t send_cq = 0, recv_cq = 0;
      cs.qps.push_back(metrics_qp(c, qpn, &send_cq, &recv_cq));
      cqs.push_back(send_cq);
      cqs.push_back(recv_cq);
    }
    std::sort(cqs.begin(), cqs.end());
    cqs.erase(std::unique(cqs.begin(), cqs.end()), cqs.end());
    for (uint32_t off : cqs)
      if (c.arena.cq_overflowed(off)) ++cs.cqs_overflowed;
    for (uint32_t key : registry_.keys_of(c.id)) {
      ++cs.mrs;
      cs.registered_bytes += registry_.find_key(key)->length;
    }
    if (auto h = held.find(c.id); h != held.end()) {
      cs.held_requests += h->second.first;
      cs.held_bytes += h->second.second;
    }
  }
  return metrics::render(s, metrics_ledger_);
}

}  // namespace vrdma::daemon
