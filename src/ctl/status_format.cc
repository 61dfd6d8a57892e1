// The readable form of a vrdmad status reply.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>

#include "ctl/format.h"
#include "ctl/status_cmd.h"

namespace vrdma::ctl {

namespace {

using json = nlohmann::ordered_json;

// A field as text, whatever its JSON type; "-" if missing.
std::string text(const json& j, const char* key) {
  if (!j.is_object()) return "-";
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return "-";
  return it->is_string() ? it->get<std::string>() : it->dump();
}

// A field as a number; strings such as "0x1f" are parsed, anything else is 0.
uint64_t number(const json& j, const char* key) {
  if (!j.is_object()) return 0;
  auto it = j.find(key);
  if (it == j.end()) return 0;
  if (it->is_number_unsigned()) return it->get<uint64_t>();
  if (it->is_number_integer())
    return static_cast<uint64_t>(std::max<int64_t>(0, it->get<int64_t>()));
  if (it->is_number_float()) return static_cast<uint64_t>(std::max(0.0, it->get<double>()));
  if (it->is_string()) return std::strtoull(it->get<std::string>().c_str(), nullptr, 0);
  return 0;
}

const json& list(const json& j, const char* key) {
  static const json empty = json::array();
  if (!j.is_object()) return empty;
  auto it = j.find(key);
  return it != j.end() && it->is_array() ? *it : empty;
}

std::string hex(uint64_t v, int digits) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "0x%0*llx", digits, static_cast<unsigned long long>(v));
  return buf;
}

// ibv_access_flags, spelled as in verbs.h without the IBV_ACCESS_ prefix.
std::string access_text(uint64_t access) {
  static const std::pair<uint64_t, const char*> flags[] = {
      {1, "LOCAL_WRITE"},   {2, "REMOTE_WRITE"}, {4, "REMOTE_READ"},
      {8, "REMOTE_ATOMIC"}, {16, "MW_BIND"},     {32, "ZERO_BASED"},
      {64, "ON_DEMAND"},    {128, "HUGETLB"},    {1u << 20, "RELAXED_ORDERING"}};
  std::string out;
  for (const auto& [bit, name] : flags) {
    if (!(access & bit)) continue;
    out += (out.empty() ? "" : "|") + std::string(name);
    access &= ~bit;
  }
  if (access) out += (out.empty() ? "" : "|") + hex(access, 1);
  return out.empty() ? "0" : out;
}

// How the client keeps its other threads' writes while registered pages move; nothing for a
// client that did not say (the vrdma command's own).
std::string page_moves_text(const json& c) {
  const std::string g = c.contains("page_move_guard") ? text(c, "page_move_guard") : "unknown";
  if (g == "unknown") return "";
  if (g == "none") return "  page moves UNPROTECTED (no userfaultfd)";
  if (g == "userfaultfd-user-only") return "  page moves held (user-mode writes)";
  if (g == "threads-stopped") return "  page moves held (threads stopped)";
  return "  page moves held (" + g + ")";
}

void print_client(const json& c, std::ostream& out) {
  const json& qps = list(c, "qps");
  const json& mrs = list(c, "mrs");
  out << "  client " << text(c, "id") << "  pid " << text(c, "pid") << "  " << text(c, "kind")
      << "  " << plural(number(c, "fds"), "fd") << "  " << plural(qps.size(), "QP") << "  "
      << plural(mrs.size(), "MR") << page_moves_text(c) << "\n";
  if (!qps.empty()) {
    Table t({"QPN", "TYPE", "STATE", "TX_OPS", "TX_BYTES", "RX_OPS", "RX_BYTES", "ERRORS"});
    for (const auto& q : qps)
      t.add({hex(number(q, "qpn"), 6), text(q, "type"), text(q, "state"),
             std::to_string(number(q, "tx_ops")), human_bytes(number(q, "tx_bytes")),
             std::to_string(number(q, "rx_ops")), human_bytes(number(q, "rx_bytes")),
             std::to_string(number(q, "errors"))});
    t.print(out, "    ");
  }
  if (!mrs.empty()) {
    Table t({"MR_KEY", "LENGTH", "ACCESS"});
    for (const auto& m : mrs)
      t.add({text(m, "key"), human_bytes(number(m, "length")), access_text(number(m, "access"))});
    t.print(out, "    ");
  }
}

// QPs, MRs and registered bytes of some clients.
struct Usage {
  size_t qps = 0, mrs = 0;
  uint64_t registered = 0;
  void add(const json& client) {
    qps += list(client, "qps").size();
    for (const auto& m : list(client, "mrs")) {
      ++mrs;
      registered += number(m, "length");
    }
  }
  void add(const Usage& other) {
    qps += other.qps;
    mrs += other.mrs;
    registered += other.registered;
  }
  std::string text() const {
    return plural(qps, "QP") + ", " + plural(mrs, "MR") + ", " + human_bytes(registered) +
           " registered";
  }
};

// "QPs 3/16384, ...": a container's use against its quotas (status "containers").
std::string quota_text(const json& quota) {
  static const std::pair<const char*, const char*> kShown[] = {
      {"connections", "connections"},
      {"qps", "QPs"},
      {"mrs", "MRs"},
      {"registered_bytes", "registered"},
      {"fds", "fds"},
      {"cm_listeners", "rdma_cm listeners"},
      {"cm_connections", "rdma_cm connections"},
      {"directory_entries", "directory entries"}};
  std::string out;
  for (const auto& [key, label] : kShown) {
    auto it = quota.find(key);
    if (it == quota.end() || !it->is_array() || it->size() != 2) continue;
    uint64_t used = number(json::object({{"v", (*it)[0]}}), "v");
    uint64_t limit = number(json::object({{"v", (*it)[1]}}), "v");
    bool bytes = std::string(key) == "registered_bytes";
    out += (out.empty() ? "" : ", ") + std::string(label) + " " +
           (bytes ? human_bytes(used) + "/" + human_bytes(limit)
                  : std::to_string(used) + "/" + std::to_string(limit));
  }
  return out;
}

}  // namespace

void print_status(const json& status, std::ostream& out) {
  static const json none = json::object();
  const json& d = status.is_object() && status.contains("daemon") ? status["daemon"] : none;
  out << "vrdmad pid " << text(d, "pid") << " on host " << text(d, "host_id") << ", up "
      << human_duration(number(d, "uptime_s")) << ", socket " << text(d, "socket") << "\n";
  if (d.contains("directory") && d["directory"].is_object())
    out << "directory: " << text(d["directory"], "backend") << "\n";
  if (d.contains("router") && d["router"].is_object() && text(d["router"], "enabled") == "true") {
    const json& r = d["router"];
    out << "router: " << plural(static_cast<size_t>(number(r, "routed_qps")), "routed QP");
    if (r.contains("latency_thread") && r["latency_thread"].is_object()) {
      const json& lt = r["latency_thread"];
      const std::string sched = text(lt, "scheduling");
      if (sched == "realtime" || sched == "normal")
        out << "; latency thread " << (sched == "realtime" ? "real-time" : "normal class") << " ("
            << plural(static_cast<size_t>(number(lt, "realtime_demotions")), "demotion") << ")";
    }
    if (r.contains("cpus") && r["cpus"].is_string() && !r["cpus"].get<std::string>().empty())
      out << "; on CPUs " << r["cpus"].get<std::string>();
    if (number(r, "poll_us") > 0)
      out << "; polls " << static_cast<uint64_t>(number(r, "poll_us")) << " us after work";
    if (r.contains("bulk_threads") && r["bulk_threads"].is_object()) {
      const json& bt = r["bulk_threads"];
      out << "; bulk threads real-time " << text(bt, "realtime") << "/" << text(bt, "threads")
          << " (" << plural(static_cast<size_t>(number(bt, "realtime_demotions")), "demotion")
          << ")";
    }
    for (const auto& l : list(r, "links"))
      out << "; link " << text(l, "direction") << " host " << text(l, "host_id") << " "
          << (text(l, "connected") == "true" ? "" : "(connecting) ") << "in "
          << human_bytes(static_cast<uint64_t>(number(l, "bytes_in"))) << " out "
          << human_bytes(static_cast<uint64_t>(number(l, "bytes_out")));
    out << "\n";
  }
  std::string scope = text(status, "scope");
  if (scope != "-" && scope != "all")
    out << "showing only what this client may see (" << scope
        << "); root in the daemon's network namespace sees all\n";
  if (text(status, "truncated") == "true")
    out << "(the daemon cut its lists short to fit one reply)\n";

  // Clients grouped by container, containers in name order; CLI clients such as
  // this one are left out.
  std::map<std::string, std::vector<const json*>> by_container;
  size_t shown = 0;
  for (const auto& c : list(status, "clients")) {
    if (text(c, "kind") == "cli") continue;
    by_container[text(c, "container")].push_back(&c);
    ++shown;
  }
  if (!shown) {
    out << "no clients connected\n";
    return;
  }
  Usage total;
  for (const auto& [container, members] : by_container) {
    Usage usage;
    for (const json* c : members) usage.add(*c);
    total.add(usage);
    const json& first = *members.front();
    out << "\n"
        << container << "  " << text(first, "ip") << "  tenant " << text(first, "tenant") << ": "
        << plural(members.size(), "client") << ", " << usage.text() << "\n";
    for (const auto& q : list(status, "containers"))
      if (text(q, "container") == container && q.contains("quota") && q["quota"].is_object())
        out << "  quota: " << quota_text(q["quota"]) << "\n";
    if (first.contains("direct_traffic") && first["direct_traffic"].is_object()) {
      const json& d = first["direct_traffic"];
      out << "  direct path: sent " << human_bytes(number(d, "sent_bytes")) << ", received "
          << human_bytes(number(d, "received_bytes")) << ", "
          << plural(number(d, "connections"), "connection") << " (kernel socket statistics)\n";
    }
    for (const json* c : members) print_client(*c, out);
  }
  out << "\ntotal: " << plural(by_container.size(), "container") << ", " << plural(shown, "client")
      << ", " << total.text() << "\n";
}

}  // namespace vrdma::ctl
