// Tenants: who may reach whom. A tenant is named by rules NAME=CIDR over container addresses.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/address.h"

namespace vrdma::daemon {

struct TenantRule : Ipv4Cidr {
  std::string name;
  bool operator==(const TenantRule&) const = default;
};

// Parses "NAME=CIDR" (a bare address means /32). Returns nullopt and sets *error on failure.
std::optional<TenantRule> parse_tenant_rule(std::string_view text, std::string* error);

inline constexpr const char* kDefaultTenant = "default";

// The first rule whose CIDR contains the address (network byte order), else "default".
std::string tenant_for(const std::vector<TenantRule>& rules, uint32_t ipv4_net_order);

}  // namespace vrdma::daemon
