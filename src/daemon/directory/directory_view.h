// What the etcd directory believes of the other hosts: their entries, each checked
// (entries.h) and then weighed against the others. Pure (no I/O, no exceptions), so a fuzzer
// drives it with any sequence of updates.
//
// The rules, applied by settle() after every batch of updates:
//   - A host counts only with a valid info entry; it holds at most kMaxCidrsPerHost networks.
//   - A network is a host's only if nobody holds it already. This host's networks are always
//     its own; among the other hosts, a network that overlaps one claimed earlier by another
//     host (the network key etcd created first: lower create revision; on a tie, the lower
//     host id) is refused. The first claim holds because every host reads the same revisions
//     from etcd and so reaches the same verdict, and because a host that joins or adds a
//     network later cannot take addresses away from one that already serves them.
//   - A container entry counts only if its address lies inside one of its host's accepted
//     networks (so no host can claim an address another host holds); one owner per address,
//     again the earliest entry.
// Entries of this host are not kept (it knows its own).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "daemon/directory/directory.h"
#include "daemon/directory/directory_backends.h"

namespace vrdma::daemon {

// One put or delete of a key under /vrdma/, as etcd reported it.
struct DirectoryUpdate {
  bool deleted = false;
  std::string key;
  std::string value;
  int64_t create_revision = 0;  // of the key's current version (puts)
};

class DirectoryView {
 public:
  explicit DirectoryView(HostEntry self = {}) : self_(std::move(self)) { settle(); }

  void set_self(HostEntry self);
  // Applies one update. Returns why it was ignored ("" when it was taken or needs no note):
  // a malformed key or value.
  std::string apply(const DirectoryUpdate& u);
  void clear();
  // Weighs the entries against each other (the rules above). Returns the refusals that are
  // new since the last call, one line each.
  std::vector<std::string> settle();

  // Lookups answer from the last settle(). Addresses in host byte order.
  std::optional<HostEntry> host_by_id(uint32_t id) const;
  // A container entry, else the host whose accepted network holds the address (this host's
  // own first).
  std::optional<HostEntry> host_of(uint32_t ipv4_host) const;
  // The accepted container entry for an address: what its owner published.
  const ContainerInfo* container(uint32_t ipv4_host) const;
  // The accepted container entries that joined IPv4 multicast group `group_net` (network
  // order): (host, container address in host order) each.
  const std::vector<std::pair<uint32_t, uint32_t>>* group_members(uint32_t group_net) const {
    auto it = groups_.find(group_net);
    return it == groups_.end() ? nullptr : &it->second;
  }
  // The host (this one or an accepted one) whose router listens at this IPv4 address (network
  // order; any port).
  const HostEntry* host_by_router(uint32_t ipv4_net) const {
    return host_by_router_ip(self_, accepted_, ipv4_net);
  }
  // Other hosts with a valid info entry, plus this one.
  size_t hosts_known() const { return accepted_.size() + (accepted_.count(self_.host_id) ? 0 : 1); }

 private:
  struct HostRecord {
    HostEntry entry;  // its router; no networks
    int64_t created = 0;
  };
  struct Claim {
    ContainerInfo info;
    int64_t created = 0;
  };
  struct Block {
    uint32_t last;  // the block's last address
    uint32_t host;
  };

  HostEntry self_;
  // As published (each entry valid on its own).
  std::map<uint32_t, HostRecord> hosts_;
  // host -> (network, mask) -> create revision
  std::map<uint32_t, std::map<std::pair<uint32_t, uint32_t>, int64_t>> networks_;
  std::map<uint32_t, std::map<uint32_t, Claim>> claims_;  // address -> host -> claim
  // From settle().
  std::map<uint32_t, HostEntry> accepted_;  // hosts with only their accepted networks
  std::map<uint32_t, Block> blocks_;        // first address -> accepted network (disjoint)
  std::map<uint32_t, uint32_t> owners_;     // address -> host of the accepted container entry
  // multicast group (network order) -> (host, address) of the accepted entries that joined it
  std::map<uint32_t, std::vector<std::pair<uint32_t, uint32_t>>> groups_;
  std::set<std::string> refusals_;          // as of the last settle()
};

}  // namespace vrdma::daemon
