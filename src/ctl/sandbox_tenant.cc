#include "ctl/sandbox_tenant.h"

#include <arpa/inet.h>

#include <algorithm>

namespace vrdma::ctl {

namespace {

std::string dotted(uint32_t host_order) {
  in_addr a{htonl(host_order)};
  char buf[INET_ADDRSTRLEN];
  return inet_ntop(AF_INET, &a, buf, sizeof(buf)) ? buf : "";
}

bool parse(const std::string& text, uint32_t* host_order) {
  in_addr a{};
  if (inet_pton(AF_INET, text.c_str(), &a) != 1) return false;
  *host_order = ntohl(a.s_addr);
  return true;
}

}  // namespace

std::vector<std::string> cidrs_covering(uint32_t first, uint32_t last) {
  std::vector<std::string> out;
  uint64_t at = first;
  while (at <= last) {
    // The largest block that starts at `at` (aligned) and ends by `last`.
    int bits = 0;
    while (bits < 32 && (at & ((1ull << (bits + 1)) - 1)) == 0 &&
           at + (1ull << (bits + 1)) - 1 <= last)
      ++bits;
    out.push_back(dotted(static_cast<uint32_t>(at)) + "/" + std::to_string(32 - bits));
    at += 1ull << bits;
  }
  return out;
}

std::vector<std::string> sandbox_tenant_rules(const Sandbox& sandbox) {
  std::vector<std::string> rules;
  for (const auto& h : sandbox.hosts) {
    uint32_t lo = UINT32_MAX, hi = 0;
    for (const auto& c : sandbox.containers) {
      uint32_t ip;
      if (c.host != h.name || !parse(c.ip, &ip)) continue;
      lo = std::min(lo, ip);
      hi = std::max(hi, ip);
    }
    if (lo > hi) continue;
    for (const auto& cidr : cidrs_covering(lo, hi))
      rules.push_back(std::string(kSandboxTenant) + "=" + cidr);
  }
  return rules;
}

}  // namespace vrdma::ctl
