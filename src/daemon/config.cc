#include "daemon/config.h"

#include <arpa/inet.h>

#include <charconv>

namespace vrdma::daemon {

std::optional<TenantRule> parse_tenant_rule(std::string_view text, std::string* error) {
  auto fail = [&](const char* why) -> std::optional<TenantRule> {
    if (error) *error = std::string(why) + ": '" + std::string(text) + "'";
    return std::nullopt;
  };
  size_t eq = text.find('=');
  if (eq == std::string_view::npos) return fail("expected NAME=CIDR");
  std::string_view name = text.substr(0, eq);
  std::string_view cidr = text.substr(eq + 1);
  if (name.empty()) return fail("empty tenant name");
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_' || c == '.' || c == ':';
    if (!ok) return fail("tenant name may hold only letters, digits and - _ . :");
  }
  unsigned prefix = 32;
  std::string_view addr = cidr;
  if (size_t slash = cidr.find('/'); slash != std::string_view::npos) {
    addr = cidr.substr(0, slash);
    std::string_view len = cidr.substr(slash + 1);
    auto [p, ec] = std::from_chars(len.data(), len.data() + len.size(), prefix);
    if (ec != std::errc() || p != len.data() + len.size() || len.empty() || prefix > 32)
      return fail("bad prefix length");
  }
  in_addr in{};
  if (::inet_pton(AF_INET, std::string(addr).c_str(), &in) != 1) return fail("bad IPv4 address");
  TenantRule rule;
  rule.name = std::string(name);
  rule.mask = prefix == 0 ? 0 : ~uint32_t{0} << (32 - prefix);
  rule.network = ntohl(in.s_addr) & rule.mask;
  return rule;
}

std::string tenant_for(const std::vector<TenantRule>& rules, uint32_t ipv4_net_order) {
  uint32_t ip = ntohl(ipv4_net_order);
  for (const auto& r : rules)
    if (r.contains(ip)) return r.name;
  return kDefaultTenant;
}

}  // namespace vrdma::daemon
