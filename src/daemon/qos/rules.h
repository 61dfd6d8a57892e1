// QoS rules as vrdmad's options and `vrdma qos set` give them:
//   container=A.B.C.D:weight=3,rate=100M,msgs=50k
//   tenant=NAME:weight=2,rate=1G
// weight: relative share (1..1000, default 1); rate: bytes/s, msgs: messages/s (0 or absent:
// no limit); numbers take k, M, G, T (powers of 1000). A rule names a container by its address
// or a tenant by its name; a later rule for the same one replaces the earlier.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "daemon/qos/scheduler.h"

namespace vrdma::qos {

struct NamedRule {
  enum class Kind : uint8_t { kContainer, kTenant } kind = Kind::kContainer;
  uint32_t ipv4 = 0;  // container (network order)
  std::string tenant;
  Rule rule;
  bool operator==(const NamedRule&) const = default;
};

std::optional<NamedRule> parse_rule(const std::string& text, std::string* error);
std::string rule_text(const NamedRule& r);
// "100M" and the like; false if it is not a number.
bool parse_amount(const std::string& s, uint64_t* out);
std::string amount_text(uint64_t v);

// The rules in force: one per container and per tenant, the last given winning.
class RuleSet {
 public:
  void put(const NamedRule& r);
  // The rule of a container / tenant, or the default (weight 1, no limit).
  Rule container(uint32_t ipv4) const;
  Rule tenant(const std::string& name) const;
  const std::vector<NamedRule>& rules() const { return rules_; }
  bool operator==(const RuleSet&) const = default;

 private:
  std::vector<NamedRule> rules_;
};

}  // namespace vrdma::qos
