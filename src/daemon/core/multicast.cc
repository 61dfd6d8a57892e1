// UD multicast requests: attach and detach a local UD QP to a group of its tenant, and the
// group's members on this host. Senders on this host deliver to the members themselves (as to
// any UD destination of their tenant); every change bumps the mcast_gen of the tenant's
// clients' arenas so that their cached member lists are asked for again.
#include <errno.h>
#include <string.h>

#include <algorithm>

#include "common/address.h"
#include "common/log.h"
#include "daemon/core/daemon.h"

namespace vrdma::daemon {

void Daemon::mcast_changed(const std::set<std::string>& tenants) {
  if (tenants.empty()) return;
  for (auto& [id, cl] : clients_)
    if (!cl->doomed && cl->arena.mapped() && tenants.count(cl->tenant)) cl->arena.bump_mcast_gen();
}

ContainerInfo Daemon::container_info(const Client& c) const {
  ContainerInfo info{c.ident.container, c.tenant, {}};
  for (const auto& [id, cl] : clients_) {
    if (cl->doomed || !cl->identified || cl->ident.ipv4 != c.ident.ipv4) continue;
    for (const McastGid& g : mcast_.groups_of(id)) {
      uint32_t ip;
      if (gid_to_ipv4(g.data(), &ip)) info.groups.push_back(ip);
    }
  }
  std::sort(info.groups.begin(), info.groups.end());
  info.groups.erase(std::unique(info.groups.begin(), info.groups.end()), info.groups.end());
  return info;
}

void Daemon::publish_groups(const Client& c) {
  if (c.kind == static_cast<uint32_t>(proto::ClientKind::kVerbs) && c.ident.ipv4 && !c.ident.host)
    directory_->publish_container(c.ident.ipv4, container_info(c));
}

void Daemon::handle(Client& c, const Decoded& d, const proto::McastReq& r) {
  const QpRecord* qp = registry_.find_qp(r.qpn);
  if (!qp || qp->owner != c.id) return void(reply_error(c, d, EPERM));
  if (qp->type != static_cast<uint32_t>(proto::QpType::kUd) || !gid_is_multicast(r.gid))
    return void(reply_error(c, d, EINVAL));
  McastGid gid;
  memcpy(gid.data(), r.gid, 16);
  switch (d.op) {
    case proto::Op::kMcastAttach: {
      const std::vector<uint32_t>* before = mcast_.members(c.tenant, gid);
      const size_t n = before ? before->size() : 0;
      if (int err = mcast_.attach(c.id, c.tenant, r.qpn, gid)) return void(reply_error(c, d, err));
      if (mcast_.members(c.tenant, gid)->size() != n) {
        LOG_DEBUG("client %u: QP 0x%x attached to a multicast group of tenant %s", c.id, r.qpn,
                  c.tenant.c_str());
        mcast_changed({c.tenant});
        publish_groups(c);
      }
      return void(send(c, d.op, d.seq, 0, nullptr, 0));
    }
    case proto::Op::kMcastDetach:
      if (int err = mcast_.detach(c.tenant, r.qpn, gid)) return void(reply_error(c, d, err));
      mcast_changed({c.tenant});
      publish_groups(c);
      return void(send(c, d.op, d.seq, 0, nullptr, 0));
    case proto::Op::kMcastMembers: {
      proto::McastMembersRep rep{};
      if (const std::vector<uint32_t>* m = mcast_.members(c.tenant, gid)) {
        rep.count = static_cast<uint32_t>(std::min<size_t>(m->size(), proto::kMaxMcastMembers));
        for (uint32_t i = 0; i < rep.count; ++i) rep.qpn[i] = (*m)[i];
      }
      if (router_) {
        LocalQp q;
        q.owner = c.id;
        q.arena_offset = qp->arena_offset;
        q.type = qp->type;
        q.ipv4 = c.ident.ipv4;
        q.tenant = c.tenant;
        // The answer waits for the router thread (the client is alive when its reply is sent:
        // its death reaches the router after this).
        router_->attach_multicast(
            r.qpn, q, [this, id = c.id, op = d.op, seq = d.seq, qpn = r.qpn, rep](int fd) mutable {
              Client* cl = find_live(id);
              if (!cl) return;
              if (fd >= 0) {
                rep.routed = 1;
                return void(send(*cl, op, seq, 0, &rep, sizeof(rep), std::span<const int>(&fd, 1)));
              }
              LOG_WARN("client %u: QP 0x%x: multicast to other hosts unavailable", id, qpn);
              send(*cl, op, seq, 0, &rep, sizeof(rep));
            });
        return;
      }
      return void(send(c, d.op, d.seq, 0, &rep, sizeof(rep)));
    }
    default:
      return void(reply_error(c, d, EINVAL));
  }
}

}  // namespace vrdma::daemon
