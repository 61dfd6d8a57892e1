// Implicit ODP MRs: one key over the owner's whole address space, with the MR's rights and
// protection domain, and no pages of its own. The owner's library registers the ranges its own
// requests name; a peer (or the router) that asks for a range of the key is granted a
// registration of the owner's that covers it, with the same protection domain and rights: what
// the implicit MR allows anyway. When none does, the owner is asked to register the range
// (kOdpFault; its library checks the pages are mapped with the MR's rights, then registers them)
// and the asker to try again a little later (EAGAIN), within its own time bound.
#include <errno.h>

#include "common/log.h"
#include "daemon/core/daemon.h"

namespace vrdma::daemon {

void Daemon::alloc_implicit_key(Client& c, const Decoded& d, const proto::AllocKeyReq& r) {
  const uint32_t access = r.access & ~proto::kKeyImplicit;
  if ((r.access & proto::kKeyWindow) || r.length != 0 || r.replaces ||
      !(access & IBV_ACCESS_ON_DEMAND))
    return void(reply_error(c, d, EINVAL));
  if (int err = charge(c, Resource::kMrs)) return void(reply_error(c, d, err));
  proto::AllocKeyRep rep{};
  if (int err = registry_.alloc_key(c.id, r.index, access, 0, SIZE_MAX, &rep.key, r.pd)) {
    release(c, Resource::kMrs);
    return void(reply_error(c, d, err));
  }
  registry_.mark_implicit(rep.key);
  send(c, proto::Op::kAllocKey, d.seq, 0, &rep, sizeof(rep));
}

int Daemon::implicit_target(const Client& owner, const KeyRecord& k, uint32_t key, uint64_t addr,
                            uint64_t length, bool notify_here, uint32_t& target) {
  if (length == 0 || addr + length < addr) return EACCES;
  for (uint32_t candidate : registry_.keys_of(owner.id)) {
    const KeyRecord* c = registry_.find_key(candidate);
    if (!c || c->window || c->implicit || c->owner != owner.id || c->pd != k.pd ||
        c->access != k.access)
      continue;
    shm::MrEntry e;
    if (!owner.arena.read_mr(c->index, candidate, &e)) continue;
    // At its own addresses (as the implicit MR's iova is the address), and covering the range.
    if (e.iova != e.va || addr < e.va || length > e.length || addr - e.va > e.length - length)
      continue;
    target = candidate;
    return 0;
  }
  proto::OdpFaultEvent ev{key, 0, addr, length};
  const uint32_t id = owner.id;
  auto notify = [this, id, ev] {
    if (Client* o = find_live(id)) send(*o, proto::Op::kOdpFault, 0, 0, &ev, sizeof(ev));
  };
  if (notify_here)
    notify();
  else if (router_)
    router_->post_to_control(notify);
  LOG_DEBUG("client %u: implicit ODP key 0x%x: range 0x%llx+%llu asked for", owner.id, key,
            static_cast<unsigned long long>(addr), static_cast<unsigned long long>(length));
  return EAGAIN;
}

}  // namespace vrdma::daemon
