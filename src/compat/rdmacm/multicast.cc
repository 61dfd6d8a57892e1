// rdma_cm multicast: joining a group attaches the id's UD QP to the group's GID (vrdmad keeps
// memberships per tenant; a datagram to the group reaches every member of the sender's tenant)
// and queues RDMA_CM_EVENT_MULTICAST_JOIN with what a sender needs: an address handle to the
// group, QPN 0xFFFFFF and the port space's Q_Key, as rdma-core gives on a RoCE port. There is no
// subnet manager to ask: a join completes at once. The group of an IPv4 address a.b.c.d is the
// GID ::ffff:a.b.c.d (RoCEv2); an AF_INET6 or AF_IB address names its GID itself.
#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/ib.h>
#include <string.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <vector>

#include "internal.h"

namespace vrdma::cm {

namespace {

struct Join {
  ibv_gid mgid;
  void* context;
  bool attached;  // the id's QP was attached (a send-only join attaches nothing)
};

std::mutex g_mc_mu;
std::map<Id*, std::vector<Join>>& joins() {
  static auto* m = new std::map<Id*, std::vector<Join>>();
  return *m;
}

// The group an address names; false for an address that is no multicast group.
bool group_of(const sockaddr* addr, ibv_gid* mgid) {
  memset(mgid, 0, sizeof(*mgid));
  switch (addr->sa_family) {
    case AF_INET: {
      uint32_t ip = reinterpret_cast<const sockaddr_in*>(addr)->sin_addr.s_addr;
      if (!IN_MULTICAST(ntohl(ip))) return false;
      fill_gid(*mgid, ip);
      return true;
    }
    case AF_INET6:
      memcpy(mgid->raw, &reinterpret_cast<const sockaddr_in6*>(addr)->sin6_addr, 16);
      return mgid->raw[0] == 0xff;
    case AF_IB:
      memcpy(mgid->raw, &reinterpret_cast<const sockaddr_ib*>(addr)->sib_addr, 16);
      return mgid->raw[0] == 0xff ||
             (mgid->raw[10] == 0xff && mgid->raw[11] == 0xff && (mgid->raw[12] & 0xf0) == 0xe0);
    default:
      return false;
  }
}

int join(rdma_cm_id* cid, const sockaddr* addr, uint32_t flags, void* context) {
  if (!cid || !addr) return fail(EINVAL);
  Id* id = impl(cid);
  if (cid->ps != RDMA_PS_UDP && cid->ps != RDMA_PS_IPOIB) return fail(EINVAL);
  if (!id->bound) return fail(EINVAL);  // bound or resolved: the device is known
  if (flags != RDMA_MC_JOIN_FLAG_FULLMEMBER && flags != RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER)
    return fail(EINVAL);
  ibv_gid mgid;
  if (!group_of(addr, &mgid)) return fail(EINVAL);
  {
    std::lock_guard lock(g_mc_mu);
    for (const Join& j : joins()[id])
      if (!memcmp(j.mgid.raw, mgid.raw, 16)) return fail(EADDRINUSE);
  }
  // A send-only member receives nothing: its QP stays out of the group.
  const bool attach = cid->qp && flags == RDMA_MC_JOIN_FLAG_FULLMEMBER;
  if (attach) {
    if (cid->qp->qp_type != IBV_QPT_UD) return fail(EINVAL);
    if (int err = ibv_attach_mcast(cid->qp, &mgid, 0)) return fail(err);
  }
  {
    std::lock_guard lock(g_mc_mu);
    joins()[id].push_back(Join{mgid, context, attach});
  }
  {
    std::lock_guard lock(table_mu());
    Event* e = new_event(id, RDMA_CM_EVENT_MULTICAST_JOIN);
    rdma_ud_param& ud = e->ev.param.ud;
    ud.private_data = context;
    ud.ah_attr.is_global = 1;
    ud.ah_attr.grh.dgid = mgid;
    ud.ah_attr.grh.sgid_index = 0;
    ud.ah_attr.grh.hop_limit = 1;
    ud.ah_attr.port_num = cid->port_num ? cid->port_num : 1;
    ud.qp_num = 0xffffff;
    ud.qkey = kUdQkey;
    queue_event(id, e);
  }
  if (id->sync) return wait_event(id, RDMA_CM_EVENT_MULTICAST_JOIN);
  return 0;
}

}  // namespace

void forget_multicast(Id* id) {
  std::vector<Join> left;
  {
    std::lock_guard lock(g_mc_mu);
    auto it = joins().find(id);
    if (it == joins().end()) return;
    left = std::move(it->second);
    joins().erase(it);
  }
  for (Join& j : left)
    if (j.attached && id->id.qp) ibv_detach_mcast(id->id.qp, &j.mgid, 0);
}

}  // namespace vrdma::cm

using namespace vrdma::cm;

extern "C" {

VRDMA_EXPORT int rdma_join_multicast(struct rdma_cm_id* id, struct sockaddr* addr, void* context) {
  return join(id, addr, RDMA_MC_JOIN_FLAG_FULLMEMBER, context);
}

VRDMA_EXPORT int rdma_join_multicast_ex(struct rdma_cm_id* id, struct rdma_cm_join_mc_attr_ex* attr,
                                        void* context) {
  if (!attr) return fail(EINVAL);
  if (attr->comp_mask & ~uint32_t(RDMA_CM_JOIN_MC_ATTR_RESERVED - 1)) return fail(EINVAL);
  if (!(attr->comp_mask & RDMA_CM_JOIN_MC_ATTR_ADDRESS) || !attr->addr) return fail(EINVAL);
  uint32_t flags = (attr->comp_mask & RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS)
                       ? attr->join_flags
                       : uint32_t(RDMA_MC_JOIN_FLAG_FULLMEMBER);
  return join(id, attr->addr, flags, context);
}

VRDMA_EXPORT int rdma_leave_multicast(struct rdma_cm_id* cid, struct sockaddr* addr) {
  if (!cid || !addr) return fail(EINVAL);
  ibv_gid mgid;
  if (!group_of(addr, &mgid)) return fail(EADDRNOTAVAIL);
  Id* id = impl(cid);
  Join left{};
  {
    std::lock_guard lock(g_mc_mu);
    auto it = joins().find(id);
    if (it == joins().end()) return fail(EADDRNOTAVAIL);
    auto& v = it->second;
    auto j = std::find_if(v.begin(), v.end(),
                          [&](const Join& x) { return !memcmp(x.mgid.raw, mgid.raw, 16); });
    if (j == v.end()) return fail(EADDRNOTAVAIL);
    left = *j;
    v.erase(j);
    if (v.empty()) joins().erase(it);
  }
  if (left.attached && cid->qp) {
    if (int err = ibv_detach_mcast(cid->qp, &left.mgid, 0)) return fail(err);
  }
  return 0;
}

}  // extern "C"
