// Builds the sandbox's namespaces, links, addresses and routes with iproute2.
#pragma once

#include <functional>

#include "ctl/sandbox_state.h"

namespace vrdma::ctl {

// Creates everything `sandbox` describes. Calls `step` between steps (it may
// throw to abandon the build). Throws Error naming the failing command; what
// was created stays for the caller to tear down.
void build_network(const Sandbox& sandbox, const std::function<void()>& step);

}  // namespace vrdma::ctl
