// Registry::hand_over: a QP changes owner (a shared XRC_RECV QP whose owner let it go).
#include <errno.h>

#include "daemon/registry/registry.h"

namespace vrdma::daemon {

namespace {
void drop_link(std::map<uint32_t, uint32_t>& links_to, uint32_t owner) {
  auto n = links_to.find(owner);
  if (n != links_to.end() && --n->second == 0) links_to.erase(n);
}
}  // namespace

int Registry::hand_over(uint32_t qpn, uint32_t to) {
  auto it = qps_.find(qpn);
  if (it == qps_.end()) return ENOENT;
  QpRecord& q = it->second;
  const uint32_t from = q.owner;
  if (from == to) return 0;
  for (uint32_t dest : q.out) {
    const uint32_t dest_owner = qps_.at(dest).owner;
    drop_link(clients_[from].links_to, dest_owner);
    ++clients_[to].links_to[dest_owner];
  }
  for (uint32_t l : q.in) {
    auto& links_to = clients_[qps_.at(l).owner].links_to;
    drop_link(links_to, from);
    ++links_to[to];
  }
  clients_[from].qpns.erase(qpn);
  clients_[to].qpns.insert(qpn);
  q.owner = to;
  q.arena_offset = 0;  // it was in the old owner's arena
  forget_if_empty(from);
  return 0;
}

}  // namespace vrdma::daemon
