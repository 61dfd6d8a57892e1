#include "daemon/core/status.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "common/address.h"
#include "common/protocol.h"
#include "shm/layout.h"

namespace vrdma::daemon {

using nlohmann::json;

const char* qp_type_name(uint32_t type) {
  switch (static_cast<proto::QpType>(type)) {
    case proto::QpType::kRc:
      return "RC";
    case proto::QpType::kUc:
      return "UC";
    case proto::QpType::kUd:
      return "UD";
    case proto::QpType::kXrcSend:
      return "XRC_SEND";
    case proto::QpType::kXrcRecv:
      return "XRC_RECV";
    case proto::QpType::kXrcSrq:
      return "XRC_SRQ";
  }
  return "UNKNOWN";
}

const char* qp_state_name(uint32_t state) {
  static const char* const kNames[] = {"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"};
  return state < sizeof(kNames) / sizeof(kNames[0]) ? kNames[state] : "UNKNOWN";
}

namespace {

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "0x%08x", v);
  return buf;
}

// How a client keeps its other threads' writes while registered pages move (shm::PageMoveGuard).
const char* page_move_guard_name(uint32_t g) {
  switch (g) {
    case shm::kGuardNone:
      return "none";
    case shm::kGuardUserOnly:
      return "userfaultfd-user-only";
    case shm::kGuardSyscall:
      return "userfaultfd";
    case shm::kGuardDevice:
      return "/dev/userfaultfd";
    case shm::kGuardThreads:
      return "threads-stopped";
    default:
      return "unknown";
  }
}

json build(const StatusInput& in, size_t list_cap, size_t client_cap, bool truncated) {
  size_t total_qps = 0, total_mrs = 0;
  for (const auto& c : in.clients) {
    total_qps += c.qps.size();
    total_mrs += c.mrs.size();
  }
  json clients = json::array();
  for (size_t i = 0; i < in.clients.size() && i < client_cap; ++i) {
    const StatusClient& c = in.clients[i];
    json qps = json::array();
    for (size_t j = 0; j < c.qps.size() && j < list_cap; ++j) {
      const StatusQp& q = c.qps[j];
      json qp = {{"qpn", q.qpn},
                 {"type", qp_type_name(q.type)},
                 {"state", q.have_state ? qp_state_name(q.state) : "UNKNOWN"},
                 {"tx_ops", q.tx_ops},
                 {"tx_bytes", q.tx_bytes},
                 {"rx_ops", q.rx_ops},
                 {"rx_bytes", q.rx_bytes},
                 {"errors", q.errors}};
      if (!q.path.empty()) {
        qp["path"] = q.path;
        qp["path_why"] = q.path_why;
      }
      qps.push_back(std::move(qp));
    }
    json mrs = json::array();
    for (size_t j = 0; j < c.mrs.size() && j < list_cap; ++j) {
      const StatusMr& m = c.mrs[j];
      json mr = {{"length", m.length}, {"access", m.access}};
      if (m.key_shown) mr["key"] = hex32(m.key);
      mrs.push_back(std::move(mr));
    }
    json client = {{"id", c.id},
                   {"pid", c.pid},
                   {"uid", c.uid},
                   {"container", c.container},
                   {"ip", ipv4_text(c.ipv4)},
                   {"tenant", c.tenant},
                   {"kind", c.kind},
                   {"qps", std::move(qps)},
                   {"mrs", std::move(mrs)},
                   {"fds", c.fds},
                   {"page_move_guard", page_move_guard_name(c.page_move_guard)}};
    if (c.direct)
      client["direct_traffic"] = {{"sent_bytes", c.direct_sent},
                                  {"received_bytes", c.direct_received},
                                  {"connections", c.direct_connections}};
    clients.push_back(std::move(client));
  }
  json containers = json::array();
  for (size_t i = 0; i < in.containers.size() && i < client_cap; ++i) {
    const StatusContainer& c = in.containers[i];
    json quota = json::object();
    for (size_t r = 0; r < kResourceCount; ++r)
      quota[resource_name(static_cast<Resource>(r))] = json::array({c.used[r], c.limit[r]});
    containers.push_back({{"container", c.name}, {"quota", std::move(quota)}});
  }
  json links = json::array();
  for (const auto& l : in.links)
    links.push_back({{"host_id", l.host_id},
                     {"direction", l.outbound ? "out" : "in"},
                     {"connected", l.connected},
                     {"addr", l.addr},
                     {"bytes_in", l.bytes_in},
                     {"bytes_out", l.bytes_out},
                     {"security", l.security},
                     {"lane", l.lane},
                     {"thread", l.thread}});
  json qos = json::array();
  for (const auto& f : in.qos)
    qos.push_back({{"container", f.container},
                   {"tenant", f.tenant},
                   {"class", f.cls},
                   {"weight", f.weight},
                   {"rate", f.rate},
                   {"msgs_rate", f.msgs_rate},
                   {"tenant_weight", f.tenant_weight},
                   {"tenant_rate", f.tenant_rate},
                   {"bytes", f.bytes},
                   {"msgs", f.msgs},
                   {"delay_ns_avg", f.msgs ? f.delay_ns_sum / f.msgs : 0},
                   {"delay_ns_max", f.delay_ns_max},
                   {"holds", f.holds}});
  return json{{"daemon",
               {{"pid", in.pid},
                {"socket", in.socket},
                {"host_id", in.host_id},
                {"uptime_s", in.uptime_s},
                {"clients", in.clients_connected},
                {"directory",
                 {{"backend", in.directory},
                  {"available", in.directory_available},
                  {"hosts", in.directory_hosts}}},
                {"router",
                 {{"enabled", in.router},
                  {"routed_qps", in.routed_qps},
                  {"bulk_links_per_host", in.router_links},
                  {"threads", in.router_threads},
                  {"cpus", in.router_cpus},
                  {"poll_us", in.router_poll_us},
                  {"latency_thread",
                   {{"scheduling", in.latency_thread},
                    {"realtime_demotions", in.latency_thread_demotions}}},
                  {"bulk_threads",
                   {{"threads", in.bulk_threads},
                    {"realtime", in.bulk_threads_realtime},
                    {"realtime_demotions", in.bulk_threads_demotions}}},
                  {"links", links}}},
                {"direct",
                 {{"enabled", in.direct_path},
                  {"port", in.direct_port},
                  {"containers", in.direct_ports},
                  {"tickets", in.direct_tickets}}},
                {"allow", in.allow}}},
              {"scope", in.scope},
              {"clients", std::move(clients)},
              {"containers", std::move(containers)},
              {"totals", {{"qps", total_qps}, {"mrs", total_mrs}, {"clients", in.clients.size()}}},
              {"qos", std::move(qos)},
              {"truncated", truncated}};
}

std::string dump(const json& j) {
  // Strings come from namespace names and the socket path; never fail on odd bytes.
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace

std::string render_status(const StatusInput& in, size_t limit) {
  size_t longest = 0;
  for (const auto& c : in.clients) longest = std::max({longest, c.qps.size(), c.mrs.size()});
  const size_t everyone = std::max(in.clients.size(), in.containers.size());
  std::string text = dump(build(in, longest, everyone, false));
  if (text.size() <= limit) return text;

  // Largest per-client list length that fits, by bisection.
  auto fits = [&](size_t cap, size_t clients) {
    std::string t = dump(build(in, cap, clients, true));
    if (t.size() > limit) return false;
    text = std::move(t);
    return true;
  };
  if (fits(0, everyone)) {
    size_t lo = 0, hi = longest;  // fits(lo), !fits(hi)
    while (hi - lo > 1) {
      size_t mid = lo + (hi - lo) / 2;
      if (fits(mid, everyone))
        lo = mid;
      else
        hi = mid;
    }
    fits(lo, everyone);
    return text;
  }
  size_t lo = 0, hi = std::max(in.clients.size(), in.containers.size());
  while (hi - lo > 1) {
    size_t mid = lo + (hi - lo) / 2;
    if (fits(0, mid))
      lo = mid;
    else
      hi = mid;
  }
  if (!fits(0, lo)) text = "{\"truncated\":true}";
  return text;
}

}  // namespace vrdma::daemon
