// Who a client is, found by the daemon itself: SO_PEERCRED gives the pid (pinned so that a
// reused pid is never taken for the client, peer_process.h), the pid gives the network
// namespace, the namespace gives the address and (through the netns directory) the name.
// Nothing the client sends is used.
//
// A namespace's address only names a container when someone the host trusts made the
// namespace: the daemon's own (the host), one pinned in the netns directory (the platform
// pins its containers' namespaces there), or, when told to trust them, any namespace of the
// host's user namespace. Any other namespace is *anonymous*: anyone can make one
// (`unshare -Urn`) and give it any address, so its address never selects a tenant and is never
// published. One address names one namespace: a second live namespace with an address that
// another one claimed first is a duplicate.
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
  // Neither the host's nor named nor trusted, or made in a user namespace that is not the
  // daemon's: its address names nothing.
  bool anonymous = false;
  bool foreign_userns = false;  // the namespace belongs to another user namespace
  // Another live namespace claimed this address first (never set for anonymous namespaces,
  // which claim nothing).
  bool duplicate = false;
  std::string container;
  uint32_t ipv4 = 0;  // network byte order
};

// First non-loopback IPv4 address of an interface that is up in the calling thread's network
// namespace, in network byte order; 127.0.0.1 when there is none.
uint32_t first_ipv4_of_current_netns();

// The node GUID for an address: bytes 02 76 72 64 a b c d, as a uint64 in network byte order.
uint64_t node_guid_for(uint32_t ipv4_net_order);

struct IdentityOptions {
  // A client's container name is the entry of `netns_dir` that pins its namespace, without
  // `name_prefix` ("vrdma-h0c1" -> "h0c1").
  std::string netns_dir = "/run/netns";
  std::string name_prefix = "vrdma-";
  // Namespaces of the host's user namespace that are not pinned in netns_dir are trusted
  // with their address (else they are anonymous).
  bool trust_unnamed = false;
  // Ask the kernel for the peer's pidfd (SO_PEERPIDFD, Linux 6.5). False: identify clients as
  // on older kernels (tests of that path).
  bool peer_pidfd = true;
};

class IdentityResolver {
 public:
  explicit IdentityResolver(IdentityOptions options);
  IdentityResolver(const IdentityResolver&) = delete;
  IdentityResolver& operator=(const IdentityResolver&) = delete;

  // Remembers the calling thread's network and user namespaces as the daemon's own. 0 or a
  // positive errno.
  int init();

  // Identifies the peer of a connected AF_UNIX socket. Returns 0, or a positive errno with *why
  // set. May switch the calling thread into the client's network namespace for a moment; it
  // always switches back (and aborts the process if it cannot, rather than run in the wrong
  // namespace). What it finds is kept per namespace while some client of it is known, and the
  // namespace is held open meanwhile, so that it cannot be replaced by another one with the
  // same inode. Each successful call must be paired with release().
  int identify(int sock, Identity* out, std::string* why);

  // A client identified earlier is gone; forget its namespace when it was the last one.
  void release(const NetnsId& ns);

  // A socket made inside namespace `ns`, which a known client's: what it sends and receives
  // crosses that namespace's network (the direct path's sockets, core/direct.cc). Invalid with
  // *err (ENOENT: no client of that namespace is known).
  UniqueFd socket_in(const NetnsId& ns, int domain, int type, int* err, int protocol = 0);

  // Whether an entry of the netns directory still pins namespace `ns` (the container exists).
  bool pinned(const NetnsId& ns) const { return !lookup_name(ns, false).empty(); }

  const NetnsId& own_netns() const { return own_; }
  size_t cached_namespaces() const { return cache_.size(); }
  const IdentityOptions& options() const { return opt_; }

 private:
  struct Entry {
    UniqueFd fd;  // held while the entry exists: the namespace cannot go away
    std::string container;
    uint32_t ipv4 = 0;
    bool host = false;
    bool named = false;
    bool anonymous = false;
    bool foreign_userns = false;
    size_t refs = 0;
  };
  int resolve_foreign(pid_t pid, int ns_fd, const NetnsId& ns, Entry* out, std::string* why);
  bool owned_by_our_userns(int ns_fd) const;
  // The netns directory's entry that pins `ns` (the first by name), without the name prefix
  // when `strip_prefix`; empty when none does.
  std::string lookup_name(const NetnsId& ns, bool strip_prefix = true) const;

  IdentityOptions opt_;
  UniqueFd own_fd_;
  NetnsId own_;
  NetnsId own_userns_;
  std::map<NetnsId, Entry> cache_;
  std::map<uint32_t, NetnsId> claims_;  // address -> the namespace that claimed it first
};

}  // namespace vrdma::daemon
