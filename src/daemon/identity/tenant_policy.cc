#include "daemon/identity/tenant_policy.h"

#include "daemon/identity/tenants.h"

namespace vrdma::daemon {

std::optional<TenantAllow> parse_tenant_allow(std::string_view text, std::string* error) {
  auto fail = [&](const std::string& why) -> std::optional<TenantAllow> {
    if (error) *error = why + ": '" + std::string(text) + "'";
    return std::nullopt;
  };
  const size_t arrow = text.find("->");
  if (arrow == std::string_view::npos) return fail("expected FROM->TO");
  std::string_view from = text.substr(0, arrow), to = text.substr(arrow + 2);
  if (!valid_tenant_name(from) || !valid_tenant_name(to))
    return fail("tenant names hold only letters, digits and - _ . :");
  if (from == to) return fail("a tenant reaches itself without a rule");
  return TenantAllow{std::string(from), std::string(to)};
}

}  // namespace vrdma::daemon
