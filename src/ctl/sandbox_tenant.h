// The tenant a sandbox declares for its containers: without --tenant rules of its own, every
// container of every host is in tenant "sandbox" (vrdmad makes each container a tenant of its
// own unless a rule says otherwise). The rules cover the containers' addresses exactly, so
// that the hosts' own addresses (10.77.<i>.1) stay outside: host processes get no device.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ctl/sandbox_state.h"

namespace vrdma::ctl {

inline constexpr const char* kSandboxTenant = "sandbox";

// The fewest CIDRs (a.b.c.d/len) that cover the addresses first..last (host byte order) and
// nothing else.
std::vector<std::string> cidrs_covering(uint32_t first, uint32_t last);

// "sandbox=CIDR" for every block of the sandbox's container addresses.
std::vector<std::string> sandbox_tenant_rules(const Sandbox& sandbox);

}  // namespace vrdma::ctl
