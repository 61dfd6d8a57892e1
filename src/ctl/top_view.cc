#include "ctl/top_view.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

namespace vrdma::ctl {

namespace {

using Json = nlohmann::ordered_json;

uint64_t u64(const Json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number_integer()) return 0;
  return it->is_number_unsigned() ? it->get<uint64_t>()
                                  : static_cast<uint64_t>(std::max<int64_t>(0, it->get<int64_t>()));
}

std::string str(const Json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

double rate(uint64_t now, uint64_t before, double seconds) {
  return now > before && seconds > 0 ? double(now - before) / seconds : 0.0;
}

std::string cut(std::string line, size_t width) {
  if (line.size() > width) line.resize(width);
  return line + "\n";
}

}  // namespace

std::string human_rate(double v, const char* unit) {
  static const char* const kPrefix[] = {"", "k", "M", "G", "T"};
  int i = 0;
  while (v >= 999.95 && i < 4) {
    v /= 1000;
    ++i;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f %s%s", v, kPrefix[i], unit);
  return buf;
}

TopSample top_sample(const Json& status) {
  TopSample s;
  if (auto d = status.find("daemon"); d != status.end() && d->is_object()) {
    std::ostringstream o;
    o << "vrdmad pid " << u64(*d, "pid") << ", host " << u64(*d, "host_id") << ", up "
      << u64(*d, "uptime_s") << " s, " << u64(*d, "clients") << " clients";
    if (auto r = d->find("router"); r != d->end() && r->is_object()) {
      if (r->value("enabled", false)) o << ", " << u64(*r, "routed_qps") << " routed QPs";
      if (auto links = r->find("links"); links != r->end() && links->is_array())
        for (const auto& l : *links) {
          TopLink& t =
              s.links["host " + std::to_string(u64(l, "host_id")) + " " + str(l, "direction")];
          t.state = l.value("connected", false) ? "up" : "down";
          t.bytes_in += u64(l, "bytes_in");
          t.bytes_out += u64(l, "bytes_out");
        }
    }
    if (auto dir = d->find("directory"); dir != d->end() && dir->is_object())
      o << ", directory " << str(*dir, "backend")
        << (dir->value("available", true) ? " (up)" : " (DOWN)");
    s.daemon = o.str();
  }
  if (auto clients = status.find("clients"); clients != status.end() && clients->is_array())
    for (const auto& c : *clients) {
      if (str(c, "kind") != "verbs") continue;
      TopContainer& t = s.containers[str(c, "container")];
      t.ip = str(c, "ip");
      t.tenant = str(c, "tenant");
      ++t.procs;
      if (auto qps = c.find("qps"); qps != c.end() && qps->is_array())
        for (const auto& q : *qps) {
          ++t.qps;
          if (str(q, "state") == "ERR") ++t.qps_err;
          t.tx_bytes += u64(q, "tx_bytes");
          t.rx_bytes += u64(q, "rx_bytes");
          t.tx_ops += u64(q, "tx_ops");
          t.rx_ops += u64(q, "rx_ops");
          t.errors += u64(q, "errors");
        }
      if (auto mrs = c.find("mrs"); mrs != c.end() && mrs->is_array()) t.mrs += mrs->size();
    }
  return s;
}

std::string render_top(const std::string& title, const TopSample& prev, const TopSample& cur,
                       double seconds, size_t width) {
  std::string out;
  out += cut(title, width);
  out += cut(cur.daemon, width);
  out += "\n";
  char line[512];
  std::snprintf(line, sizeof(line), "%-16s %-15s %5s %5s %12s %12s %11s %11s %8s %8s", "CONTAINER",
                "IP", "PROCS", "QPS", "TX", "RX", "TX MSG", "RX MSG", "ERR/s", "ERRORS");
  out += cut(line, width);
  static const TopContainer kNone;
  for (const auto& [name, c] : cur.containers) {
    auto p = prev.containers.find(name);
    const TopContainer& b = p == prev.containers.end() ? kNone : p->second;
    std::string qps = std::to_string(c.qps) + (c.qps_err ? "!" : "");
    std::snprintf(line, sizeof(line), "%-16s %-15s %5llu %5s %12s %12s %11s %11s %8.0f %8llu",
                  name.empty() ? "(host)" : name.c_str(), c.ip.c_str(),
                  static_cast<unsigned long long>(c.procs), qps.c_str(),
                  human_rate(rate(c.tx_bytes, b.tx_bytes, seconds), "B/s").c_str(),
                  human_rate(rate(c.rx_bytes, b.rx_bytes, seconds), "B/s").c_str(),
                  human_rate(rate(c.tx_ops, b.tx_ops, seconds), "/s").c_str(),
                  human_rate(rate(c.rx_ops, b.rx_ops, seconds), "/s").c_str(),
                  rate(c.errors, b.errors, seconds), static_cast<unsigned long long>(c.errors));
    out += cut(line, width);
  }
  if (cur.containers.empty()) out += cut("(no container uses vrdma)", width);
  out += "\n";
  std::snprintf(line, sizeof(line), "%-16s %-6s %12s %12s", "LINK", "STATE", "IN", "OUT");
  out += cut(line, width);
  static const TopLink kNoLink;
  for (const auto& [name, l] : cur.links) {
    auto p = prev.links.find(name);
    const TopLink& b = p == prev.links.end() ? kNoLink : p->second;
    std::snprintf(line, sizeof(line), "%-16s %-6s %12s %12s", name.c_str(), l.state.c_str(),
                  human_rate(rate(l.bytes_in, b.bytes_in, seconds), "B/s").c_str(),
                  human_rate(rate(l.bytes_out, b.bytes_out, seconds), "B/s").c_str());
    out += cut(line, width);
  }
  if (cur.links.empty()) out += cut("(no links to other hosts)", width);
  return out;
}

}  // namespace vrdma::ctl
