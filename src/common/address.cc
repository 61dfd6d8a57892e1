#include "common/address.h"

#include <arpa/inet.h>

#include <algorithm>
#include <charconv>
#include <cstring>

namespace vrdma {

namespace {
constexpr uint8_t kV4Mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
}

std::string ipv4_text(uint32_t ipv4) {
  char buf[INET_ADDRSTRLEN] = {};
  in_addr a{ipv4};
  ::inet_ntop(AF_INET, &a, buf, sizeof(buf));
  return buf;
}

std::string ip_port_text(uint32_t ipv4, uint16_t port) {
  return ipv4_text(ipv4) + ":" + std::to_string(port);
}

bool parse_ipv4(const std::string& text, uint32_t* ipv4) {
  in_addr a{};
  if (::inet_pton(AF_INET, text.c_str(), &a) != 1) return false;
  *ipv4 = a.s_addr;
  return true;
}

bool parse_ipv4_port(std::string_view text, uint32_t* ipv4, uint16_t* port) {
  size_t colon = text.rfind(':');
  if (colon == std::string_view::npos) return false;
  uint32_t addr;
  if (!parse_ipv4(std::string(text.substr(0, colon)), &addr)) return false;
  std::string_view digits = text.substr(colon + 1);
  uint32_t p = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), p);
  if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size() || p == 0 ||
      p > 65535)
    return false;
  *ipv4 = addr;
  *port = static_cast<uint16_t>(p);
  return true;
}

bool parse_cidr(std::string_view text, Ipv4Cidr* out, std::string* why) {
  auto fail = [&](const char* what) {
    if (why) *why = what;
    return false;
  };
  unsigned prefix = 32;
  std::string_view addr = text;
  if (size_t slash = text.find('/'); slash != std::string_view::npos) {
    addr = text.substr(0, slash);
    std::string_view len = text.substr(slash + 1);
    auto [p, ec] = std::from_chars(len.data(), len.data() + len.size(), prefix);
    if (ec != std::errc() || p != len.data() + len.size() || len.empty() || prefix > 32)
      return fail("bad prefix length");
  }
  uint32_t ip;
  if (!parse_ipv4(std::string(addr), &ip)) return fail("bad IPv4 address");
  out->mask = prefix == 0 ? 0 : ~uint32_t{0} << (32 - prefix);
  out->network = ntohl(ip) & out->mask;
  return true;
}

std::string cidr_text(const Ipv4Cidr& cidr) {
  return ipv4_text(htonl(cidr.network)) + "/" + std::to_string(cidr.prefix_len());
}

bool gid_to_ipv4(const uint8_t* gid, uint32_t* ipv4) {
  if (std::memcmp(gid, kV4Mapped, sizeof(kV4Mapped)) != 0) return false;
  std::memcpy(ipv4, gid + 12, 4);
  return true;
}

void ipv4_to_gid(uint32_t ipv4, uint8_t* gid) {
  std::memcpy(gid, kV4Mapped, sizeof(kV4Mapped));
  std::memcpy(gid + 12, &ipv4, 4);
}

bool gid_is_zero(const uint8_t* gid) {
  return std::all_of(gid, gid + 16, [](uint8_t b) { return b == 0; });
}

bool gid_is_multicast(const uint8_t* gid) {
  if (gid[0] == 0xff) return true;
  uint32_t ip;
  return gid_to_ipv4(gid, &ip) && (ntohl(ip) & 0xf0000000u) == 0xe0000000u;
}

}  // namespace vrdma
