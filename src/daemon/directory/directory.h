// The cluster directory: which host owns a container address, where each host's router
// listens, and which rdma_cm listeners exist. Two implementations behind one interface:
// embedded (one host, or a fixed set of peers given on the command line) and etcd v3.
//
// Threading: every method is called from the daemon's event-loop thread and must not block
// for long (lookups answer from a local cache; writes are queued). An implementation may run
// its own thread to talk to its backend.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/address.h"

namespace vrdma::daemon {

// A container this host serves, as it publishes it: its name and the tenant vrdmad admitted it
// to (other hosts believe the tenant only in platform-tenant mode: see Directory::tenant_of).
struct ContainerInfo {
  std::string name;
  std::string tenant;
  // The IPv4 multicast groups (network order, sorted) its UD QPs are attached to, so that a
  // host sends a group's datagrams only to the hosts that have members.
  std::vector<uint32_t> groups;
  bool operator==(const ContainerInfo&) const = default;
};

struct HostEntry {
  uint32_t host_id = 0;
  std::string router;           // "a.b.c.d:port"; empty: the host has no router
  std::vector<Ipv4Cidr> cidrs;  // the container networks it owns
};

enum class Lookup {
  kFound,
  kNotFound,     // nobody owns it
  kUnavailable,  // the directory cannot answer now (etcd unreachable): try again later
};

class Directory {
 public:
  virtual ~Directory() = default;

  // Starts talking to the backend. A backend that is down at start is not an error: the
  // directory reports kUnavailable until it comes back. 0 or a positive errno for a bad
  // configuration.
  virtual int start(const HostEntry& self) = 0;
  // Withdraws this host's entries (etcd: revokes the lease, best effort, bounded in time) and
  // ends the backend's thread. Also done by the destructor.
  virtual void stop() = 0;
  // Like stop(), but leaves this host's entries to expire with their lease, as a host that
  // died would (tests). The embedded directory has nothing to leave behind.
  virtual void abandon() { stop(); }

  // This host's containers and rdma_cm listeners, kept under the host's lease (re-published
  // after the backend comes back).
  // Publishing again with other values replaces them (the entry keeps its age, so its claim on
  // the address holds); publishing the same values again costs nothing.
  virtual void publish_container(uint32_t ipv4_net, const ContainerInfo& info) = 0;
  virtual void withdraw_container(uint32_t ipv4_net) = 0;
  virtual void publish_listener(uint32_t ipv4_net, uint16_t port) = 0;
  virtual void withdraw_listener(uint32_t ipv4_net, uint16_t port) = 0;

  // The host that owns an address (network byte order): a published container first, then
  // the hosts' container networks (the longest prefix; this host first on a tie). This host is
  // found too (its own entry); what this host knows of itself (its entry, its published
  // containers, its networks) is answered even while the backend is unavailable.
  virtual Lookup host_of(uint32_t ipv4_net, HostEntry* out) = 0;
  virtual Lookup host_by_id(uint32_t host_id, HostEntry* out) = 0;
  // The host whose router listens at this address (network byte order; any port): who a link
  // from that address can be. This host is found too.
  virtual Lookup host_by_router(uint32_t ipv4_net, HostEntry* out) = 0;

  // The tenant another host published for a container address it owns (network byte order):
  // kFound with *tenant; kNotFound when no other host's accepted entry holds the address or the
  // entry names no tenant. The embedded directory knows no other host's containers.
  virtual Lookup tenant_of(uint32_t ipv4_net, std::string* tenant) = 0;

  // Other hosts' containers whose QPs joined IPv4 multicast group `group_net` (network order):
  // (host id, container address in network order) each, appended to *out; the caller weighs
  // their tenants. A directory that knows no other host's containers names each host that may
  // have members with address 0 (its router decides who receives).
  virtual void group_members(uint32_t /*group_net*/,
                             std::vector<std::pair<uint32_t, uint32_t>>* /*out*/) {}

  // For status: backend, health, number of hosts known.
  virtual std::string describe() const = 0;
  virtual bool available() const = 0;
  // Hosts known, this one included.
  virtual size_t hosts_known() const = 0;
};

// What the directory takes from vrdmad's options.
struct DirectoryConfig {
  std::string spec = "embedded";          // "embedded" or "etcd://host:port[,host:port...]"
  uint32_t host_id = 0;                   // this host's
  std::vector<std::string> static_peers;  // embedded: "ID=a.b.c.d:port=CIDR[,CIDR]"
  int lease_s = 5;                        // etcd: entries of a dead host expire after this
  // etcd: TLS (PEM files): the cluster CA, and this host's certificate (subject CN
  // vrdma-host-<host_id>, the etcd user whose role may write /vrdma/hosts/<host_id>/) and key.
  std::string tls_ca;
  std::string tls_cert;
  std::string tls_key;
};

// nullptr and *error set for a bad specification. Nothing starts before start(), so this also
// validates a configuration.
std::unique_ptr<Directory> make_directory(const DirectoryConfig& cfg, std::string* error);

// An embedded directory's static peer, "ID=a.b.c.d:port=CIDR[,CIDR...]". nullopt and *error
// set when malformed.
std::optional<HostEntry> parse_peer(std::string_view text, std::string* error);

}  // namespace vrdma::daemon
