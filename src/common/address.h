// Container addresses as vrdma speaks of them: IPv4 in network byte order, the GID that holds
// one (::ffff:a.b.c.d, RoCEv2), and their text. The one place these conversions live.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace vrdma {

using Gid = uint8_t[16];

// "a.b.c.d" of an address in network byte order (reentrant, unlike inet_ntoa).
std::string ipv4_text(uint32_t ipv4);
// "a.b.c.d:port", the port in host byte order.
std::string ip_port_text(uint32_t ipv4, uint16_t port);
// Parses "a.b.c.d" into network byte order. False when it is not a dotted quad.
bool parse_ipv4(const std::string& text, uint32_t* ipv4);
// Parses "a.b.c.d:port" (port 1..65535) into network byte order and a host-order port.
bool parse_ipv4_port(std::string_view text, uint32_t* ipv4, uint16_t* port);

// An IPv4 network, in host byte order.
struct Ipv4Cidr {
  uint32_t network = 0;
  uint32_t mask = 0;
  bool contains(uint32_t ipv4_host_order) const { return (ipv4_host_order & mask) == network; }
  int prefix_len() const { return __builtin_popcount(mask); }
  bool operator==(const Ipv4Cidr&) const = default;
};
// Parses "a.b.c.d/len" (a bare address is /32). False, with *why set, when malformed.
bool parse_cidr(std::string_view text, Ipv4Cidr* out, std::string* why);
// "a.b.c.d/len".
std::string cidr_text(const Ipv4Cidr& cidr);

// The IPv4 address a GID holds when it is ::ffff:a.b.c.d; false for any other GID.
bool gid_to_ipv4(const uint8_t* gid, uint32_t* ipv4);
// ::ffff:a.b.c.d.
void ipv4_to_gid(uint32_t ipv4, uint8_t* gid);
bool gid_is_zero(const uint8_t* gid);
// A multicast GID: IPv6 multicast (ff00::/8) or IPv4-mapped multicast (::ffff:224.0.0.0/4), as
// the kernel's rdma_is_multicast_addr decides.
bool gid_is_multicast(const uint8_t* gid);

}  // namespace vrdma
