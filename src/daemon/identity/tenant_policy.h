// Which tenants may reach which others: rules "A->B" (--allow). Without a rule, containers of
// different tenants cannot reach each other at all.
//
// A rule is one-way for initiating: "A->B" lets A's containers connect to B's (rdma_cm: A's
// connect reaches B's listeners; B's connect to A's listeners is still refused unless
// "B->A" is also allowed). Once a pair is allowed in either direction, its QPs may be
// connected to each other and exchange datagrams: a connected QP carries work both ways, each
// end's RTR must still name the other (each side's consent), and a UD server must be able to
// answer. Such pairs never share memory: their QPs are connected through vrdmad's router (the
// mediated path), which checks every request as it would one from another host.
#pragma once

#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace vrdma::daemon {

struct TenantAllow {
  std::string from, to;
  bool operator==(const TenantAllow&) const = default;
  auto operator<=>(const TenantAllow&) const = default;
};

// Parses "FROM->TO" (tenant names as --tenant's, or a platform's; two different names).
// Returns nullopt and sets *error on failure.
std::optional<TenantAllow> parse_tenant_allow(std::string_view text, std::string* error);

class TenantPolicy {
 public:
  TenantPolicy() = default;
  explicit TenantPolicy(const std::vector<TenantAllow>& rules)
      : rules_(rules.begin(), rules.end()) {}

  // `from`'s containers may initiate connections to `to`'s: the same tenant, or a rule.
  bool may_initiate(const std::string& from, const std::string& to) const {
    return from == to || (!from.empty() && rules_.count({from, to}) > 0);
  }
  // Two tenants' QPs may be connected through the mediated path: a rule either way.
  bool may_pair(const std::string& a, const std::string& b) const {
    return a != b && !a.empty() && !b.empty() &&
           (rules_.count({a, b}) > 0 || rules_.count({b, a}) > 0);
  }
  bool empty() const { return rules_.empty(); }

 private:
  std::set<TenantAllow> rules_;
};

}  // namespace vrdma::daemon
