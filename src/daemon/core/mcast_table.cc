#include "daemon/core/mcast_table.h"

#include <errno.h>

#include <algorithm>

namespace vrdma::daemon {

int McastTable::attach(uint32_t client, const std::string& tenant, uint32_t qpn,
                       const McastGid& gid) {
  auto key = std::make_pair(tenant, gid);
  auto it = groups_.find(key);
  if (it != groups_.end() &&
      std::find(it->second.qpns.begin(), it->second.qpns.end(), qpn) != it->second.qpns.end())
    return 0;
  if (it != groups_.end() && it->second.qpns.size() >= kMaxQpsPerGroup) return ENOMEM;
  uint32_t attaches = 0;
  std::set<McastGid> mine;
  for (const auto& [k, g] : groups_)
    for (uint32_t c : g.clients)
      if (c == client) {
        ++attaches;
        mine.insert(k.second);
      }
  if (attaches >= kMaxAttachesPerClient) return ENOMEM;
  if (!mine.count(gid) && mine.size() >= kMaxGroupsPerClient) return ENOMEM;
  Group& g = groups_[key];
  g.qpns.push_back(qpn);
  g.clients.push_back(client);
  return 0;
}

int McastTable::detach(const std::string& tenant, uint32_t qpn, const McastGid& gid) {
  auto it = groups_.find(std::make_pair(tenant, gid));
  if (it == groups_.end()) return EINVAL;
  Group& g = it->second;
  auto pos = std::find(g.qpns.begin(), g.qpns.end(), qpn);
  if (pos == g.qpns.end()) return EINVAL;
  size_t i = static_cast<size_t>(pos - g.qpns.begin());
  g.qpns.erase(pos);
  g.clients.erase(g.clients.begin() + static_cast<std::ptrdiff_t>(i));
  if (g.qpns.empty()) groups_.erase(it);
  return 0;
}

template <typename Pred>
std::set<std::string> McastTable::remove_if(Pred pred) {
  std::set<std::string> changed;
  for (auto it = groups_.begin(); it != groups_.end();) {
    Group& g = it->second;
    for (size_t i = 0; i < g.qpns.size();) {
      if (pred(g.qpns[i], g.clients[i])) {
        g.qpns.erase(g.qpns.begin() + static_cast<std::ptrdiff_t>(i));
        g.clients.erase(g.clients.begin() + static_cast<std::ptrdiff_t>(i));
        changed.insert(it->first.first);
      } else {
        ++i;
      }
    }
    it = g.qpns.empty() ? groups_.erase(it) : std::next(it);
  }
  return changed;
}

std::set<std::string> McastTable::qp_gone(uint32_t qpn) {
  return remove_if([qpn](uint32_t q, uint32_t) { return q == qpn; });
}

std::set<std::string> McastTable::client_gone(uint32_t client) {
  return remove_if([client](uint32_t, uint32_t c) { return c == client; });
}

const std::vector<uint32_t>* McastTable::members(const std::string& tenant,
                                                 const McastGid& gid) const {
  auto it = groups_.find(std::make_pair(tenant, gid));
  return it == groups_.end() ? nullptr : &it->second.qpns;
}

std::vector<McastGid> McastTable::groups_of(uint32_t client) const {
  std::vector<McastGid> out;
  for (const auto& [k, g] : groups_)
    if (std::find(g.clients.begin(), g.clients.end(), client) != g.clients.end())
      out.push_back(k.second);
  return out;
}

}  // namespace vrdma::daemon
