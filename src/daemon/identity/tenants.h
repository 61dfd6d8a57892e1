// Tenants: who may reach whom. A tenant is named by rules NAME=CIDR over container addresses;
// a container that no rule covers is a tenant of its own.
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
// Names hold letters, digits and - _ . : (never '@', which marks the tenants below).
std::optional<TenantRule> parse_tenant_rule(std::string_view text, std::string* error);

// Whether `name` may name a tenant: letters, digits and - _ . : only, not empty.
bool valid_tenant_name(std::string_view name);

// The tenant of an address (network byte order) that no rule covers: its own, "@a.b.c.d".
// Every host names it alike, so a container without a rule shares nothing, here or elsewhere.
std::string own_tenant(uint32_t ipv4_net_order);

// The tenant of the host's own processes when they may have a device without a rule.
inline constexpr const char* kHostTenant = "@host";

// The rule covering an address, or nullptr.
const TenantRule* rule_for(const std::vector<TenantRule>& rules, uint32_t ipv4_net_order);

// The first rule whose CIDR contains the address, else the address's own tenant.
std::string tenant_for(const std::vector<TenantRule>& rules, uint32_t ipv4_net_order);

}  // namespace vrdma::daemon
