// vrdma status: what a vrdmad serves (clients, QPs, MRs, counters).
#pragma once

#include <nlohmann/json.hpp>
#include <ostream>
#include <string>

namespace vrdma::ctl {

struct StatusOptions {
  std::string host;    // "h1" or "1": that sandbox host's daemon
  std::string socket;  // an explicit socket path
  bool all = false;    // every sandbox host
  bool json = false;
};

int status_command(const StatusOptions& options);

// The status reply of the one daemon `options` names (not --all), as `vrdma status` asks it;
// *label says which (a sandbox host's name or the socket). Throws Error.
nlohmann::ordered_json fetch_status(const StatusOptions& options, std::string* label);

// The readable form of one daemon's status reply (tolerant of missing fields).
void print_status(const nlohmann::ordered_json& status, std::ostream& out);

}  // namespace vrdma::ctl
