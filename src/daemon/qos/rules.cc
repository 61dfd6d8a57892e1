#include "daemon/qos/rules.h"

#include <arpa/inet.h>

#include <cstdio>

namespace vrdma::qos {

bool parse_amount(const std::string& s, uint64_t* out) {
  if (s.empty() || s.size() > 24) return false;
  size_t i = 0;
  uint64_t v = 0;
  while (i < s.size() && s[i] >= '0' && s[i] <= '9') {
    if (v > (UINT64_MAX - 9) / 10) return false;
    v = v * 10 + uint64_t(s[i++] - '0');
  }
  if (i == 0) return false;
  uint64_t mult = 1;
  if (i < s.size()) {
    switch (s[i++]) {
      case 'k':
      case 'K':
        mult = 1000;
        break;
      case 'M':
        mult = 1000'000;
        break;
      case 'G':
        mult = 1000'000'000;
        break;
      case 'T':
        mult = 1000'000'000'000;
        break;
      default:
        return false;
    }
  }
  if (i != s.size() || (v && mult > UINT64_MAX / v)) return false;
  *out = v * mult;
  return true;
}

std::string amount_text(uint64_t v) {
  static const char* const kUnits[] = {"", "k", "M", "G", "T"};
  int u = 0;
  while (u < 4 && v && v % 1000 == 0) {
    v /= 1000;
    ++u;
  }
  return std::to_string(v) + kUnits[u];
}

std::optional<NamedRule> parse_rule(const std::string& text, std::string* error) {
  auto fail = [&](const std::string& why) -> std::optional<NamedRule> {
    *error = "QoS rule '" + text + "': " + why +
             " (expected container=A.B.C.D:KEY=VALUE,... or tenant=NAME:KEY=VALUE,... with "
             "keys weight, rate (bytes/s), msgs (messages/s))";
    return std::nullopt;
  };
  NamedRule r;
  size_t eq = text.find('=');
  if (eq == std::string::npos) return fail("no '='");
  std::string kind = text.substr(0, eq);
  size_t colon = text.find(':', eq + 1);
  std::string name =
      text.substr(eq + 1, colon == std::string::npos ? std::string::npos : colon - eq - 1);
  if (kind == "container") {
    r.kind = NamedRule::Kind::kContainer;
    in_addr a{};
    if (inet_pton(AF_INET, name.c_str(), &a) != 1) return fail("'" + name + "' is no IPv4 address");
    r.ipv4 = a.s_addr;
  } else if (kind == "tenant") {
    r.kind = NamedRule::Kind::kTenant;
    if (name.empty() || name.size() > 64) return fail("a tenant name of 1 to 64 characters");
    for (char ch : name)
      if (ch == ',' || ch == ':' || ch == '=' || ch <= ' ' || ch > '~')
        return fail("the tenant name has '" + std::string(1, ch) + "'");
    r.tenant = name;
  } else {
    return fail("'" + kind + "' is neither container nor tenant");
  }
  if (colon == std::string::npos) return r;  // the defaults again
  std::string rest = text.substr(colon + 1);
  size_t pos = 0;
  while (pos <= rest.size()) {
    size_t comma = rest.find(',', pos);
    std::string item =
        rest.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    pos = comma == std::string::npos ? rest.size() + 1 : comma + 1;
    size_t e = item.find('=');
    if (e == std::string::npos) return fail("'" + item + "' is not KEY=VALUE");
    std::string key = item.substr(0, e), value = item.substr(e + 1);
    uint64_t v;
    if (!parse_amount(value, &v)) return fail("'" + value + "' is not a number");
    if (key == "weight") {
      if (v < 1 || v > 1000) return fail("weight is 1 to 1000");
      r.rule.weight = static_cast<uint32_t>(v);
    } else if (key == "rate") {
      r.rule.bytes_per_s = v;
    } else if (key == "msgs") {
      r.rule.msgs_per_s = v;
    } else {
      return fail("unknown key '" + key + "'");
    }
  }
  return r;
}

std::string rule_text(const NamedRule& r) {
  std::string s;
  if (r.kind == NamedRule::Kind::kContainer) {
    char ip[INET_ADDRSTRLEN] = "";
    in_addr a{r.ipv4};
    inet_ntop(AF_INET, &a, ip, sizeof(ip));
    s = std::string("container=") + ip;
  } else {
    s = "tenant=" + r.tenant;
  }
  s += ":weight=" + std::to_string(r.rule.weight);
  if (r.rule.bytes_per_s) s += ",rate=" + amount_text(r.rule.bytes_per_s);
  if (r.rule.msgs_per_s) s += ",msgs=" + amount_text(r.rule.msgs_per_s);
  return s;
}

void RuleSet::put(const NamedRule& r) {
  for (auto& have : rules_)
    if (have.kind == r.kind && have.ipv4 == r.ipv4 && have.tenant == r.tenant) {
      have = r;
      return;
    }
  rules_.push_back(r);
}

Rule RuleSet::container(uint32_t ipv4) const {
  for (const auto& r : rules_)
    if (r.kind == NamedRule::Kind::kContainer && r.ipv4 == ipv4) return r.rule;
  return Rule{};
}

Rule RuleSet::tenant(const std::string& name) const {
  for (const auto& r : rules_)
    if (r.kind == NamedRule::Kind::kTenant && r.tenant == name) return r.rule;
  return Rule{};
}

}  // namespace vrdma::qos
