// UD multicast memberships on this host: which QPs are attached to which group. A group is a
// tenant's: the same GID in two tenants is two groups, and nothing one tenant attaches is seen by
// another. Pure bookkeeping (no I/O), so that unit tests drive it alone.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "common/protocol.h"

namespace vrdma::daemon {

using McastGid = std::array<uint8_t, 16>;

class McastTable {
 public:
  // What the device announces (ibv_query_device) and the table enforces.
  static constexpr uint32_t kMaxGroupsPerClient = proto::kMaxMcastGroups;
  static constexpr uint32_t kMaxQpsPerGroup = proto::kMaxMcastMembers;
  static constexpr uint32_t kMaxAttachesPerClient = proto::kMaxMcastAttaches;

  // 0; 0 again for a QP already attached to the group (as the kernel answers); ENOMEM over a
  // limit.
  int attach(uint32_t client, const std::string& tenant, uint32_t qpn, const McastGid& gid);
  // 0, or EINVAL when the QP is not attached to the group.
  int detach(const std::string& tenant, uint32_t qpn, const McastGid& gid);
  // Forgets a QP's or a client's memberships; returns the tenants whose groups changed.
  std::set<std::string> qp_gone(uint32_t qpn);
  std::set<std::string> client_gone(uint32_t client);

  // The QPs attached to a group (nullptr: none).
  const std::vector<uint32_t>* members(const std::string& tenant, const McastGid& gid) const;
  // The groups a client's QPs are attached to.
  std::vector<McastGid> groups_of(uint32_t client) const;
  size_t groups() const { return groups_.size(); }

 private:
  struct Group {
    std::vector<uint32_t> qpns;
    std::vector<uint32_t> clients;  // the owner of each QP, same index
  };
  template <typename Pred>
  std::set<std::string> remove_if(Pred pred);

  std::map<std::pair<std::string, McastGid>, Group> groups_;
};

}  // namespace vrdma::daemon
