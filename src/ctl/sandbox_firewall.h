// What keeps the sandbox's containers away from the routers: in every host namespace,
// iptables drops TCP to the router port from every container network, whether the router is
// this host's (INPUT) or another's (FORWARD). As a cluster's firewall would: routers accept
// links from other hosts' router addresses only, and refuse anything else themselves too.
#pragma once

#include "ctl/sandbox_state.h"

namespace vrdma::ctl {

// Throws Error when iptables is missing or refuses the rules.
void firewall_router_ports(const Sandbox& sandbox);

}  // namespace vrdma::ctl
