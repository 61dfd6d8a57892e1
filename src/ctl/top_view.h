// vrdma top's figures: per container and per link totals taken from a vrdmad's status reply
// (the same shared per-QP counters the metrics endpoint reads), and the screen made from two of
// them. Pure: no terminal, no daemon.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

namespace vrdma::ctl {

struct TopContainer {
  std::string ip, tenant;
  uint64_t procs = 0, qps = 0, qps_err = 0, mrs = 0;
  uint64_t tx_bytes = 0, rx_bytes = 0, tx_ops = 0, rx_ops = 0, errors = 0;
};

struct TopLink {
  std::string state;  // "up" or "down"
  uint64_t bytes_in = 0, bytes_out = 0;
};

struct TopSample {
  std::string daemon;                              // one line about the daemon
  std::map<std::string, TopContainer> containers;  // by container name
  std::map<std::string, TopLink> links;            // by "host <id> <in|out>"
};

TopSample top_sample(const nlohmann::ordered_json& status);

// The screen: one line per container and per link, rates over `seconds` between `prev` and
// `cur` (a counter that went back, as when a QP is destroyed, counts as no progress). Lines are
// cut at `width` columns.
std::string render_top(const std::string& title, const TopSample& prev, const TopSample& cur,
                       double seconds, size_t width);

// "12.3 MB/s"-style figures: bytes with decimal prefixes, counts with k/M/G.
std::string human_rate(double per_second, const char* unit);

}  // namespace vrdma::ctl
