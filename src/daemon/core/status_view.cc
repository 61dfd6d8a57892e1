// The Status reply: what the viewer may see of the daemon, its clients and their QPs and MRs.
#include <unistd.h>

#include <chrono>
#include <tuple>

#include "common/address.h"
#include "common/cpu_list.h"
#include "common/clock.h"
#include "daemon/core/daemon.h"
#include "daemon/core/status.h"

namespace vrdma::daemon {

void Daemon::handle(Client& c, const Decoded& d, const proto::StatusReq&) {
  std::string text = status_text(c);
  send(c, proto::Op::kStatus, d.seq, 0, text.data(), text.size());
}

bool Daemon::sees_everything(const Client& viewer) const {
  // The host's administrator: a client in the daemon's own network namespace running as
  // root or as the daemon's user. Everyone else sees its own container and the other clients
  // of its tenant, and the keys of its own container's MRs only.
  return viewer.ident.host && (viewer.ident.uid == 0 || viewer.ident.uid == ::geteuid());
}

std::string Daemon::status_text(const Client& viewer) {
  sample_direct_traffic(now_ns(), true);
  StatusInput in;
  in.pid = ::getpid();
  in.socket = cfg_.socket_path;
  in.host_id = cfg_.host_id;
  in.uptime_s = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::seconds>(
                                          std::chrono::steady_clock::now() - started_at_)
                                          .count());
  bool all = sees_everything(viewer);
  in.directory = directory_->describe();
  in.directory_available = directory_->available();
  in.directory_hosts = directory_->hosts_known();
  if (router_) {
    in.router = true;
    in.routed_qps = router_->routed_qps();
    in.router_links = cfg_.router_links;
    in.router_threads = static_cast<uint32_t>(router_->threads());
    in.router_cpus = cpu_list_text(cfg_.router_cpus);
    in.router_poll_us = cfg_.router_poll_us;
    std::tie(in.latency_thread, in.latency_thread_demotions) = router_->latency_thread();
    const RouterPool::BulkThreads bulk = router_->bulk_threads();
    in.bulk_threads = bulk.threads;
    in.bulk_threads_realtime = bulk.realtime;
    in.bulk_threads_demotions = bulk.demotions;
    if (all)
      for (const auto& l : router_->links())
        in.links.push_back({l.host_id, l.outbound, l.connected, l.addr, l.bytes_in, l.bytes_out,
                            !l.tls   ? "plaintext"
                            : l.ktls ? "ktls"
                                     : "tls",
                            wire::lane_label(l.lane), l.thread});
    for (const auto& f : router_->qos_flows()) {
      if (!all && (viewer.tenant.empty() || f.tenant != viewer.tenant)) continue;
      in.qos.push_back({ipv4_text(f.ipv4), f.tenant, qos::class_name(f.cls), f.container.weight,
                        f.tenant_rule.weight, f.container.bytes_per_s, f.container.msgs_per_s,
                        f.tenant_rule.bytes_per_s, f.counters.bytes, f.counters.msgs,
                        f.counters.delay_ns_sum, f.counters.delay_ns_max, f.counters.holds});
    }
  }
  in.direct_path = cfg_.direct_path;
  in.direct_port = cfg_.direct_port;
  for (const auto& [ns, l] : direct_ports_) in.direct_ports += l.id != 0;
  in.direct_tickets = tickets_.size();
  if (all)
    for (const auto& a : cfg_.allow) in.allow.push_back(a.from + "->" + a.to);
  in.scope = all                     ? "all"
             : viewer.tenant.empty() ? "container:" + viewer.ident.container
                                     : "tenant:" + viewer.tenant;
  for (const auto& [id, cp] : clients_) {
    const Client& c = *cp;
    if (c.doomed || !c.identified) continue;
    ++in.clients_connected;
    const bool same_container = c.ident.netns == viewer.ident.netns;
    if (!all && !same_container && (c.tenant.empty() || c.tenant != viewer.tenant)) continue;
    StatusClient sc;
    sc.id = c.id;
    sc.pid = c.ident.pid;
    sc.uid = c.ident.uid;
    sc.container = c.ident.container;
    sc.ipv4 = c.ident.ipv4;
    sc.tenant = c.tenant;
    sc.kind = !c.hello                                                   ? "none"
              : c.kind == static_cast<uint32_t>(proto::ClientKind::kCli) ? "cli"
                                                                         : "verbs";
    sc.fds = c.fds.size();
    sc.page_move_guard = c.arena.page_move_guard();
    SocketBytes t;
    size_t connections = 0;
    if ((sc.direct = direct_traffic_of(c.ident.netns, &t, &connections))) {
      sc.direct_sent = t.sent;
      sc.direct_received = t.received;
      sc.direct_connections = connections;
    }
    for (uint32_t qpn : registry_.qpns_of(c.id)) {
      const QpRecord* rec = registry_.find_qp(qpn);
      StatusQp q;
      q.qpn = qpn;
      q.type = rec->type;
      if (rec->path != ConnectPath::kNone) {
        q.path = path_name(rec->path);
        q.path_why = rec->path_why;
      }
      QpSnapshot snap;
      if (c.arena.read_qp(rec->arena_offset, &snap)) {
        q.have_state = true;
        q.state = snap.state;
        q.tx_ops = snap.tx_ops;
        q.tx_bytes = snap.tx_bytes;
        q.errors = snap.errors;
      }
      // Receive counters are kept by the senders, in the QP object.
      if (auto f = c.fds.find(rec->object_fd_id); f != c.fds.end())
        f->second.object.read_rx(&q.rx_ops, &q.rx_bytes);
      sc.qps.push_back(q);
    }
    for (uint32_t key : registry_.keys_of(c.id)) {
      const KeyRecord* k = registry_.find_key(key);
      sc.mrs.push_back({key, k->length, k->access, all || same_container});
    }
    in.clients.push_back(std::move(sc));
  }
  for (const auto& [key, u] : quotas_.containers()) {
    if (!all && !(key == viewer.quota_key)) continue;
    StatusContainer sc;
    sc.name = u.name;
    sc.used = u.used;
    sc.limit = quotas_.limits().max;
    in.containers.push_back(std::move(sc));
  }
  return render_status(in, proto::kMaxStatusText);
}

}  // namespace vrdma::daemon
