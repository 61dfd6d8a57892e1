// Asks vrdmad who the caller is, as a status-only client (ClientKind::kCli): the Hello reply
// carries the device name, node GUID and address that the libraries in the caller's network
// namespace get. Used to build a container's device view and to follow vrdmad's health; a
// probe never waits longer than its timeout and leaves nothing behind in vrdmad.
#pragma once

#include <optional>
#include <string>

#include "common/protocol.h"

namespace vrdma::platform {

struct ProbeResult {
  std::optional<proto::HelloRep> hello;  // set when vrdmad answered
  std::string error;                     // why not, otherwise
};

ProbeResult probe_daemon(const std::string& socket, int timeout_ms);

}  // namespace vrdma::platform
