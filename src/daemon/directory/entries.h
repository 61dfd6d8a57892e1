// The etcd directory's keys and values, and the checks every entry passes before it is used.
// Pure functions: no I/O, no exceptions (whatever the bytes), so that a fuzzer drives them.
//
// Every key a host writes is under its own prefix, which etcd's auth lets only that host (the
// user named by its certificate, vrdma-host-<id>) write; every host may read all of /vrdma/.
//
//   key under /vrdma/hosts/<id>/    value
//   info                            {"router": "a.b.c.d:port"}
//   networks/<a.b.c.d>/<len>        {}                  a container network the host owns
//   containers/<a.b.c.d>            {"name": "h1c0", "tenant": "team-a", "groups": ["224.1.2.3"]}
//   listeners/<a.b.c.d>:<port>      {}
//
// The host an entry speaks for is the <id> of its key, never a field of its value. Each
// network is a key of its own, so that etcd's create revision tells when it was claimed.
// Values are JSON objects of at most kMaxValueBytes; unknown fields are ignored.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "daemon/directory/directory.h"

namespace vrdma::daemon {

inline constexpr std::string_view kDirectoryRoot = "/vrdma/";
inline constexpr std::string_view kHostsRoot = "/vrdma/hosts/";
inline constexpr size_t kMaxValueBytes = 4096;
inline constexpr size_t kMaxCidrsPerHost = 16;
inline constexpr size_t kMaxNameBytes = 253;
// Multicast groups a container entry may list (its value stays under kMaxValueBytes).
inline constexpr size_t kMaxGroupsPerContainer = 128;
// A host's network is at most a /8: a broader claim is refused, not believed.
inline constexpr int kMinPrefixLen = 8;

// Keys of host `id` (addresses in network byte order, ports in host order).
std::string host_prefix(uint32_t id);  // "/vrdma/hosts/<id>/"
std::string host_info_key(uint32_t id);
std::string network_key(uint32_t id, const Ipv4Cidr& cidr);
std::string container_key(uint32_t id, uint32_t ipv4_net);
std::string listener_key(uint32_t id, uint32_t ipv4_net, uint16_t port);

// Values.
std::string host_info_value(const HostEntry& h);  // its router
std::string network_value();
std::string container_value(const ContainerInfo& info);
std::string listener_value();

enum class EntryKind { kHostInfo, kNetwork, kContainer, kListener };

struct EntryKey {
  EntryKind kind = EntryKind::kHostInfo;
  uint32_t host = 0;
  uint32_t ipv4 = 0;  // host byte order; containers and listeners
  uint16_t port = 0;  // listeners
  Ipv4Cidr cidr;      // networks: prefix length kMinPrefixLen..32
};

// The entry a key names. nullopt and *why for anything else under /vrdma/ (numbers, addresses
// and networks must be written the one canonical way: "7", not "07"; "10.0.0.1", not
// "10.0.0.01"; "10.77.0.0/24", not "10.77.0.5/24").
std::optional<EntryKey> parse_entry_key(std::string_view key, std::string* why);

// A host's info value: its router address ("" or a unicast IPV4:PORT). The HostEntry it
// returns has no networks: they are keys of their own. nullopt and *why if bad.
std::optional<HostEntry> parse_host_info(uint32_t id, std::string_view value, std::string* why);
// A network's value: any JSON object. false and *why if not.
bool parse_network_value(std::string_view value, std::string* why);
// A container's value: its name and tenant (each printable ASCII without spaces, at most
// kMaxNameBytes; absent means ""). nullopt and *why if bad.
std::optional<ContainerInfo> parse_container_value(std::string_view value, std::string* why);
// A listener's value: any JSON object. false and *why if not.
bool parse_listener_value(std::string_view value, std::string* why);

// `bytes` made printable for a log line: at most `max` characters, others escaped.
std::string printable(std::string_view bytes, size_t max = 96);

}  // namespace vrdma::daemon
