// Who a client is, found by the daemon itself: SO_PEERCRED gives the pid, the pid gives the
// network namespace, the namespace gives the address and (through /run/netns) the name.
// Nothing the client sends is used.
#pragma once

#include <sys/types.h>

#include <compare>
#include <cstdint>
#include <map>
#include <string>

#include "common/unique_fd.h"

namespace vrdma::daemon {

struct NetnsId {
  uint64_t dev = 0;
  uint64_t ino = 0;
  auto operator<=>(const NetnsId&) const = default;
};

struct Identity {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
  NetnsId netns;
  bool host = false;   // the client shares the daemon's network namespace
  bool named = false;  // host, or a namespace pinned in the netns directory
  std::string container;
  uint32_t ipv4 = 0;  // network byte order
};

// First non-loopback IPv4 address of an interface that is up in the calling thread's network
// namespace, in network byte order; 127.0.0.1 when there is none.
uint32_t first_ipv4_of_current_netns();

// The node GUID for an address: bytes 02 76 72 64 a b c d, as a uint64 in network byte order.
uint64_t node_guid_for(uint32_t ipv4_net_order);

class IdentityResolver {
 public:
  // A client's container name is the entry of `netns_dir` that pins its namespace, without
  // `name_prefix` ("vrdma-h0c1" -> "h0c1").
  IdentityResolver(std::string netns_dir, std::string name_prefix);
  IdentityResolver(const IdentityResolver&) = delete;
  IdentityResolver& operator=(const IdentityResolver&) = delete;

  // Remembers the calling thread's network namespace as the daemon's own. 0 or a positive errno.
  int init();

  // Identifies the peer of a connected AF_UNIX socket. Returns 0, or a positive errno with *why
  // set. May switch the calling thread into the client's network namespace for a moment; it always
  // switches back (and aborts the process if it cannot, rather than run in the wrong namespace).
  // Results are cached per namespace while some client of it is known.
  int identify(int sock, Identity* out, std::string* why);

  // A client identified earlier is gone; forget its namespace when it was the last one.
  void release(const NetnsId& ns);

  const NetnsId& own_netns() const { return own_; }
  size_t cached_namespaces() const { return cache_.size(); }

 private:
  struct Entry {
    std::string container;
    uint32_t ipv4 = 0;
    bool host = false;
    bool named = false;
    size_t refs = 0;
  };
  int resolve_foreign(pid_t pid, const NetnsId& ns, Entry* out, std::string* why);
  std::string lookup_name(const NetnsId& ns) const;

  std::string netns_dir_;
  std::string name_prefix_;
  UniqueFd own_fd_;
  NetnsId own_;
  std::map<NetnsId, Entry> cache_;
};

}  // namespace vrdma::daemon
