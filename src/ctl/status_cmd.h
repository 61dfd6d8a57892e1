// vrdma status: what a vrdmad serves (clients, QPs, MRs, counters).
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "ctl/netns.h"

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
// The vrdmad(s) a command speaks to: --socket, --host, --all, else $VRDMA_SOCKET, else the
// sandbox's h0 if a sandbox is up, else the default socket. Throws Error or UsageError.
struct Target {
  std::string label;  // sandbox host name, or the socket path
  std::string socket;
  std::string netns = {};  // a sandbox host's: ask from inside it (enter_host_of)
};
std::vector<Target> choose_targets(const StatusOptions& o);

// vrdmad shows everything only to root in its own network namespace (the host's
// administrator), so for a sandbox host we ask from inside that namespace when
// we can. Sockets given by --socket or $VRDMA_SOCKET (as inside `sandbox exec`)
// are asked from where we are, which shows that namespace's view. Enters `in_host` for that.
void enter_host_of(const Target& t, std::optional<ScopedNetns>& in_host);

class DaemonClient;
// Runs `action` with a client of each daemon `o` names, asked from inside its sandbox host
// (enter_host_of); `label` is "NAME: " when there are several, else empty. With one daemon its
// Error propagates; with several each failure is reported on stderr as "vrdma COMMAND: NAME:
// why" and the others go on. Returns kExitOk, or kExitError if one failed.
int for_each_daemon(const StatusOptions& o, const char* command,
                    const std::function<void(DaemonClient&, const std::string& label)>& action);
// Writes `text` line by line, each line prefixed with `label`.
void print_lines(std::ostream& out, const std::string& label, const std::string& text);

// The readable form of one daemon's status reply (tolerant of missing fields).
void print_status(const nlohmann::ordered_json& status, std::ostream& out);

}  // namespace vrdma::ctl
