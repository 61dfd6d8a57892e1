// What a client may get of another client's shared memory, and on what grounds: the QPs of the
// owner its QP reached over an agreed connection, the objects of those QPs, the key table, and
// registered memory as RDMA semantics allow (remote access flags, the QP's protection domain,
// read-only unless REMOTE_WRITE or REMOTE_ATOMIC; receive buffers while a receive of the reached
// QP points into them). Never the arena, never a CQ's channel, never memory by its fd id.
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "common/log.h"
#include "daemon/core/daemon.h"
#include "shm/shared_file.h"

namespace vrdma::daemon {

namespace {

constexpr uint32_t kRemoteAccess =
    IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC;
constexpr uint32_t kRemoteWrites = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC;
constexpr uint64_t kMaxMemoryFile = 1ull << 40;

bool is_eventfd(int fd) {
  char path[64], target[64] = {};
  std::snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
  ssize_t n = ::readlink(path, target, sizeof(target) - 1);
  return n > 0 && std::strcmp(target, "anon_inode:[eventfd]") == 0;
}

}  // namespace

ClientFd::~ClientFd() {
  if (!kept) return;
  if (unmap_kept)
    unmap_kept(kept, size);
  else
    ::munmap(kept, size);
}

// ---- handing descriptors over ------------------------------------------------------------

int Daemon::accept_fd(Client& c, const proto::PutFdReq& r, UniqueFd& fd, ClientFd& out) {
  auto kind = static_cast<proto::FdKind>(r.kind);
  out.kind = kind;
  out.size = r.size;
  uint64_t size = 0;
  switch (kind) {
    case proto::FdKind::kArena:
      if (int err = c.arena.map(fd.get(), r.size)) return err;
      out.size = c.arena.size();
      return 0;
    case proto::FdKind::kEvent:
      return is_eventfd(fd.get()) ? 0 : EINVAL;
    case proto::FdKind::kMemory:
      if (int err = shm::check_sealed(fd.get(), kMaxMemoryFile, size)) return err;
      if (size < r.size || size % shm::kPage) return EINVAL;
      out.size = size;
      if (r.flags & proto::kSealWrites) {
        // The router may have to write into it (a READ's data coming back from another host):
        // its mapping is made now, then nobody can make a writable one again.
        void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
        if (p == MAP_FAILED) return errno == ENOMEM ? ENOMEM : EACCES;
        if (::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_FUTURE_WRITE | F_SEAL_SEAL) < 0) {
          ::munmap(p, size);
          return EPERM;
        }
        out.kept = p;
        if (router_)
          out.unmap_kept = [r = router_.get()](void* a, size_t n) { r->unmap_when_idle(a, n); };
      }
      return 0;
    case proto::FdKind::kQpObject:
      if (int err = out.object.map(fd.get(), c.id)) return err;
      return shm::check_sealed(fd.get(), shm::kMaxObjectSize, out.size);
    case proto::FdKind::kSrqObject:
      return shm::check_sealed(fd.get(), shm::kMaxObjectSize, out.size);
    case proto::FdKind::kKeyTable:
      if (int err = shm::check_sealed(fd.get(), sizeof(shm::KeyTable) + shm::kPage, out.size))
        return err;
      // Read by every peer: nobody but the owner's own mapping may ever write it.
      return shm::write_sealed(fd.get()) ? 0 : EPERM;
  }
  return EINVAL;
}

// ---- who reaches what ----------------------------------------------------------------------

// The QPs of `owner` that the requester's QP `via` reaches: for RC and UC the QP its RTR named,
// when that QP's RTR named it back (QPN and address); for UD every UD QP of the owner it
// resolved.
std::vector<const QpRecord*> Daemon::reachable(const Client& req, uint32_t via,
                                               const Client& owner) const {
  std::vector<const QpRecord*> out;
  const QpRecord* q = registry_.find_qp(via);
  if (!q || q->owner != req.id || owner.tenant != req.tenant) return out;
  if (q->type == static_cast<uint32_t>(proto::QpType::kUd)) {
    for (uint32_t d : q->out) {
      const QpRecord* rec = registry_.find_qp(d);
      if (rec && rec->owner == owner.id && rec->type == q->type) out.push_back(rec);
    }
    return out;
  }
  // An XRC_SEND QP reaches XRC SRQs of other clients than its XRC_RECV QP's (a shared domain).
  if (q->type == static_cast<uint32_t>(proto::QpType::kXrcSend) && q->has_peer &&
      q->peer_ipv4 == owner.ident.ipv4) {
    const QpRecord* t = registry_.find_qp(q->peer_qpn);
    if (t && t->owner != owner.id) {
      reachable_xrc(req, *q, via, owner, out);
      return out;
    }
  }
  if (!q->has_peer || q->peer_ipv4 != owner.ident.ipv4) return out;
  const QpRecord* a = registry_.find_qp(q->peer_qpn);
  if (a && a->owner == owner.id && connectable_types(q->type, a->type) &&
      registry_.names_peer(q->peer_qpn, req.ident.ipv4, via))
    out.push_back(a);
  if (q->type == static_cast<uint32_t>(proto::QpType::kXrcSend))
    reachable_xrc(req, *q, via, owner, out);
  return out;
}

void Daemon::handle(Client& c, const Decoded& d, const proto::GetFdReq& r) {
  Client* owner = find_live(r.owner_client);
  if (!owner) return void(reply_error(c, d, ENOENT));
  auto it = owner->fds.find(r.fd_id);
  bool allowed = false;
  if (it != owner->fds.end()) {
    const uint32_t id = r.fd_id;
    auto targets = reachable(c, r.via_qpn, *owner);
    switch (it->second.kind) {
      case proto::FdKind::kQpObject:
        allowed = std::any_of(targets.begin(), targets.end(),
                              [&](const QpRecord* a) { return a->object_fd_id == id; });
        break;
      case proto::FdKind::kSrqObject:
        allowed = std::any_of(targets.begin(), targets.end(),
                              [&](const QpRecord* a) { return a->srq_fd_id == id; });
        break;
      case proto::FdKind::kEvent:
        allowed = std::any_of(targets.begin(), targets.end(),
                              [&](const QpRecord* a) { return a->notify_fd_id == id; });
        break;
      case proto::FdKind::kKeyTable:
        allowed = !targets.empty();
        break;
      case proto::FdKind::kArena:
      case proto::FdKind::kMemory:
        break;  // never by id: memory comes with GetMr
    }
  }
  if (!allowed) {
    // Unknown and refused look the same: the ids of another client's descriptors are not for
    // probing.
    LOG_DEBUG("client %u: GetFd of client %u fd %u over QP 0x%x denied", c.id, owner->id, r.fd_id,
              r.via_qpn);
    return void(reply_error(c, d, EACCES));
  }
  int fd = it->second.fd.get();
  UniqueFd read_only;
  if (it->second.kind == proto::FdKind::kKeyTable) {
    read_only.reset(shm::reopen_read_only(fd));
    if (!read_only) return void(reply_error(c, d, errno));
    fd = read_only.get();
  }
  send(c, proto::Op::kGetFd, d.seq, 0, nullptr, 0, std::span<const int>(&fd, 1));
}

// ---- registered memory ---------------------------------------------------------------------

// The MR `key` of `owner` as its arena describes it, every segment checked against the files
// the owner handed over. 0 or a positive errno.
int Daemon::describe_mr(const Client& owner, const KeyRecord& k, uint32_t key, proto::GetMrRep& rep,
                        const ClientFd** files) const {
  shm::MrEntry e;
  if (!owner.arena.read_mr(k.index, key, &e)) return ENOENT;
  if (e.nseg == 0 || e.nseg > shm::kMaxMrSegments || e.map_length == 0 ||
      e.map_length % shm::kPage || e.map_start % shm::kPage || e.va < e.map_start ||
      e.length > e.map_length || e.va - e.map_start > e.map_length - e.length)
    return EPROTO;
  uint64_t total = 0;
  for (uint32_t i = 0; i < e.nseg; ++i) {
    const shm::MrSegment& s = e.seg[i];
    auto it = owner.fds.find(s.fd_id);
    if (it == owner.fds.end() || it->second.kind != proto::FdKind::kMemory || s.length == 0 ||
        s.length % shm::kPage || s.fd_offset % shm::kPage || s.fd_offset > it->second.size ||
        s.length > it->second.size - s.fd_offset)
      return EPROTO;
    files[i] = &it->second;
    rep.seg[i] = proto::GetMrSeg{s.fd_id, 0, s.fd_offset, s.length};
    total += s.length;
  }
  if (total != e.map_length) return EPROTO;
  rep.slot = k.index;
  rep.gen = static_cast<uint32_t>(e.key_gen.load(std::memory_order_relaxed) >> 32);
  // A window's rights are those of its binding, which the owner's table holds (the owner
  // decides who reaches its own memory; vrdmad checks the pages are the owner's files).
  rep.access = k.window ? e.access & kRemoteAccess : k.access;
  rep.pd = k.pd;
  rep.nseg = e.nseg;
  rep.iova = e.iova;
  rep.length = e.length;
  rep.va_offset = e.va - e.map_start;
  rep.map_length = e.map_length;
  return 0;
}

void Daemon::handle(Client& c, const Decoded& d, const proto::GetMrReq& r) {
  Client* owner = find_live(r.owner_client);
  const KeyRecord* k = registry_.find_key(r.key);
  auto deny = [&](const char* why) {
    LOG_DEBUG("client %u: GetMr of client %u key 0x%x (access 0x%x) over QP 0x%x denied: %s", c.id,
              r.owner_client, r.key, r.access, r.via_qpn, why);
    reply_error(c, d, EACCES);
  };
  if (!owner || !k || k->owner != owner->id) return deny("no such key");
  auto targets = reachable(c, r.via_qpn, *owner);
  if (targets.empty()) return deny("no agreed connection");
  uint32_t rights = k->access;
  if (k->window) {
    // A memory window: remote access only, with the rights of its current binding.
    shm::MrEntry e;
    if (!(r.access & kRemoteAccess)) return deny("a window is no receive buffer");
    if (!owner->arena.read_mr(k->index, r.key, &e)) return deny("the window is not bound");
    rights = e.access & kRemoteAccess;
  }
  bool writable;
  if (r.access & kRemoteAccess) {
    // RDMA: the MR grants the rights, and belongs to the reached QP's protection domain; READ
    // and atomics need RC, WRITE RC or UC.
    if ((rights & r.access) != r.access) return deny("the MR does not allow it");
    uint32_t rc = static_cast<uint32_t>(proto::QpType::kRc);
    uint32_t uc = static_cast<uint32_t>(proto::QpType::kUc);
    bool any = std::any_of(targets.begin(), targets.end(), [&](const QpRecord* a) {
      // An XRC SRQ's domain carries RC's operations; its protection domain is the SRQ's.
      bool type_ok = a->type == rc || a->type == static_cast<uint32_t>(proto::QpType::kXrcSrq) ||
                     (a->type == uc && r.access == IBV_ACCESS_REMOTE_WRITE);
      return type_ok && a->pd == k->pd;
    });
    if (!any) return deny("not in the reached QP's protection domain");
    writable = (rights & kRemoteWrites) != 0;
  } else {
    // A receive buffer: while a receive of the reached QP (or its SRQ) points into it.
    // Receives name an implicit MR's registrations, never its key (the owner rewrites them).
    if (k->implicit) return deny("an implicit MR's key names no receive buffer");
    if (!(k->access & IBV_ACCESS_LOCAL_WRITE)) return deny("not writable by its owner");
    bool any = std::any_of(targets.begin(), targets.end(), [&](const QpRecord* a) {
      return owner->arena.receive_points_into(a->arena_offset, r.key);
    });
    if (!any) return deny("no receive of the reached QP points into it");
    writable = true;
  }
  // An implicit MR: the owner's registration that covers the range, or ask for one.
  const KeyRecord* mr = k;
  uint32_t mr_key = r.key;
  if (k->implicit) {
    int err = implicit_target(*owner, *k, r.key, r.addr, r.length, true, mr_key);
    if (err == EAGAIN) return void(reply_error(c, d, EAGAIN));
    if (err || !(mr = registry_.find_key(mr_key))) return deny("implicit MR: bad range");
  }
  proto::GetMrRep rep{};
  const ClientFd* files[shm::kMaxMrSegments] = {};
  if (int err = describe_mr(*owner, *mr, mr_key, rep, files)) {
    LOG_DEBUG("client %u: GetMr of client %u key 0x%x: %s", c.id, owner->id, r.key, strerror(err));
    return void(reply_error(c, d, err == EPROTO ? EACCES : err));
  }
  rep.writable = writable;
  rep.implicit = k->implicit;
  UniqueFd opened[shm::kMaxMrSegments];
  int fds[shm::kMaxMrSegments];
  for (uint32_t i = 0; i < rep.nseg; ++i) {
    int fd = files[i]->fd.get();
    if (writable) {
      // A file nobody may map writable again cannot carry a write grant (its owner moves the
      // pages to a new backing before they take writes).
      if (shm::write_sealed(fd)) return deny("a backing is sealed against writes");
      fds[i] = fd;
    } else {
      // Read-only: a descriptor the kernel refuses to map writable.
      opened[i].reset(shm::reopen_read_only(fd));
      if (!opened[i]) return void(reply_error(c, d, errno));
      fds[i] = opened[i].get();
    }
  }
  LOG_DEBUG("client %u: granted client %u key 0x%x (%s, %u segment(s)) over QP 0x%x", c.id,
            owner->id, r.key, writable ? "read-write" : "read-only", rep.nseg, r.via_qpn);
  send(c, proto::Op::kGetMr, d.seq, 0, &rep, sizeof(rep), std::span<const int>(fds, rep.nseg));
}

int Daemon::router_grant(uint32_t owner_id, uint32_t key, uint64_t addr, uint64_t length,
                         shm::MrGrant& out) {
  Client* owner = find_live(owner_id);
  const KeyRecord* k = registry_.find_key(key);
  if (!owner || !k || k->owner != owner_id) return ENOENT;
  uint32_t mr_key = key;
  const KeyRecord* mr = k;
  if (k->implicit) {
    // The router's thread: the owner is asked from the control thread.
    if (int err = implicit_target(*owner, *k, key, addr, length, false, mr_key)) return err;
    if (!(mr = registry_.find_key(mr_key))) return ENOENT;
  }
  proto::GetMrRep rep{};
  const ClientFd* files[shm::kMaxMrSegments] = {};
  if (int err = describe_mr(*owner, *mr, mr_key, rep, files)) return err;
  // A System V segment can shrink under a mapping (anyone granted it writable can truncate it):
  // the router, which serves every client of the host, does not map one.
  for (uint32_t i = 0; i < rep.nseg; ++i)
    if (files[i]->segment) return EACCES;
  out.implicit = k->implicit;
  out.slot = rep.slot;
  out.gen = rep.gen;
  out.access = rep.access;
  out.pd = rep.pd;
  out.nseg = rep.nseg;
  out.writable = true;
  out.iova = rep.iova;
  out.length = rep.length;
  out.va_offset = rep.va_offset;
  out.map_length = rep.map_length;
  for (uint32_t i = 0; i < rep.nseg; ++i) {
    out.seg[i] = shm::MrGrant::Seg{rep.seg[i].fd_id, rep.seg[i].offset, rep.seg[i].length};
    out.fds[i] = ::fcntl(files[i]->fd.get(), F_DUPFD_CLOEXEC, 0);
    if (out.fds[i] < 0) return errno;
  }
  return 0;
}

uint8_t* Daemon::router_kept_mapping(uint32_t owner_id, uint32_t fd_id, uint64_t& size) {
  Client* owner = find_live(owner_id);
  if (!owner) return nullptr;
  auto it = owner->fds.find(fd_id);
  if (it == owner->fds.end() || !it->second.kept) return nullptr;
  size = it->second.size;
  return static_cast<uint8_t*>(it->second.kept);
}

// ---- QP objects ----------------------------------------------------------------------------

// The descriptors AllocQpn and SetQpObject name must be the client's, of the right kinds.
bool Daemon::objects_ok(const Client& c, uint32_t object, uint32_t srq, uint32_t notify) const {
  auto kind_is = [&](uint32_t id, proto::FdKind k) {
    auto it = c.fds.find(id);
    return it != c.fds.end() && it->second.kind == k;
  };
  return kind_is(object, proto::FdKind::kQpObject) &&
         (srq == 0 || kind_is(srq, proto::FdKind::kSrqObject)) &&
         (notify == 0 || kind_is(notify, proto::FdKind::kEvent));
}

void Daemon::handle(Client& c, const Decoded& d, const proto::SetQpObjectReq& r) {
  const QpRecord* q = registry_.find_qp(r.qpn);
  if (!q || q->owner != c.id) return void(reply_error(c, d, EPERM));
  if (!objects_ok(c, r.object_fd_id, q->srq_fd_id, r.notify_fd_id))
    return void(reply_error(c, d, EINVAL));
  // A reset: the QP names nobody any more, so nobody reaches the new object until its next RTR
  // and the other side's agree again.
  registry_.clear_peer(r.qpn);
  registry_.set_objects(r.qpn, r.object_fd_id, q->srq_fd_id, r.notify_fd_id, q->pd);
  send(c, proto::Op::kSetQpObject, d.seq, 0, nullptr, 0);
}

}  // namespace vrdma::daemon
