#include "daemon/qos/limits.h"

namespace vrdma::qos {

template <typename Map, typename Key>
std::shared_ptr<Limits> LimitTable::get(Map& m, const Key& k) {
  std::lock_guard<std::mutex> g(mu_);
  if (auto it = m.find(k); it != m.end())
    if (auto l = it->second.lock()) return l;
  // Entries nobody holds any more go as new ones come.
  for (auto it = m.begin(); it != m.end();) it = it->second.expired() ? m.erase(it) : std::next(it);
  auto l = std::make_shared<Limits>();
  m[k] = l;
  return l;
}

std::shared_ptr<Limits> LimitTable::container(uint32_t ipv4, const std::string& tenant) {
  return get(containers_, std::make_pair(ipv4, tenant));
}

std::shared_ptr<Limits> LimitTable::tenant(const std::string& name) {
  return get(tenants_, name);
}

}  // namespace vrdma::qos
