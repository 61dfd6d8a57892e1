#include "daemon/identity/tenants.h"

#include <arpa/inet.h>

namespace vrdma::daemon {

bool valid_tenant_name(std::string_view name) {
  if (name.empty()) return false;
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_' || c == '.' || c == ':';
    if (!ok) return false;
  }
  return true;
}

std::optional<TenantRule> parse_tenant_rule(std::string_view text, std::string* error) {
  auto fail = [&](const std::string& why) -> std::optional<TenantRule> {
    if (error) *error = why + ": '" + std::string(text) + "'";
    return std::nullopt;
  };
  size_t eq = text.find('=');
  if (eq == std::string_view::npos) return fail("expected NAME=CIDR");
  std::string_view name = text.substr(0, eq);
  if (name.empty()) return fail("empty tenant name");
  if (!valid_tenant_name(name))
    return fail("tenant name may hold only letters, digits and - _ . :");
  TenantRule rule;
  std::string why;
  if (!parse_cidr(text.substr(eq + 1), &rule, &why)) return fail(why);
  rule.name = std::string(name);
  return rule;
}

std::string own_tenant(uint32_t ipv4_net_order) {
  return "@" + ipv4_text(ipv4_net_order);
}

const TenantRule* rule_for(const std::vector<TenantRule>& rules, uint32_t ipv4_net_order) {
  uint32_t ip = ntohl(ipv4_net_order);
  for (const auto& r : rules)
    if (r.contains(ip)) return &r;
  return nullptr;
}

std::string tenant_for(const std::vector<TenantRule>& rules, uint32_t ipv4_net_order) {
  const TenantRule* r = rule_for(rules, ipv4_net_order);
  return r ? r->name : own_tenant(ipv4_net_order);
}

}  // namespace vrdma::daemon
