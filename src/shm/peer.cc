#include "shm/peer.h"

#include <errno.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>

#include "common/mremap_fixed.h"
#include "shm/asym_fence.h"
#include "shm/shared_file.h"
#include "shm/sigbus_guard.h"

namespace vrdma::shm {

namespace {

constexpr uint32_t kWriteAccess =
    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC;
constexpr uint32_t kRemoteAccess =
    IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC;
constexpr uint64_t kMaxMrBytes = 1ull << 40;
constexpr uint32_t kMaxRingCapacity = 1u << 20;

void close_all(MrGrant& g) {
  for (int& fd : g.fds) {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
}

// The grant's own consistency: everything the mapping below relies on.
bool grant_ok(const MrGrant& g) {
  if (g.slot == 0 || g.slot >= kMrSlots || g.nseg == 0 || g.nseg > kMaxMrSegments) return false;
  if (g.map_length == 0 || g.map_length > kMaxMrBytes || g.map_length % kPage) return false;
  if (g.length > g.map_length || g.va_offset > g.map_length - g.length) return false;
  uint64_t total = 0;
  for (uint32_t i = 0; i < g.nseg; ++i) {
    const auto& s = g.seg[i];
    if (s.length == 0 || s.length % kPage || s.offset % kPage || s.length > kMaxMrBytes ||
        s.offset > kMaxMrBytes || g.fds[i] < 0)
      return false;
    total += s.length;
  }
  return total == g.map_length;
}

}  // namespace

uint8_t* FdSource::kept_mapping(uint32_t, uint32_t, uint64_t&) { return nullptr; }

Peer::Peer(FdSource& source, uint32_t client_id)
    : source_(source), client_id_(client_id), views_(new View[kMrSlots]) {
  receives_heavy_fences();  // before anything is placed through this process's mappings
}

Peer::~Peer() {
  for (auto& [p, len] : kept_) ::munmap(p, len);
  for (auto& [p, len] : retired_) ::munmap(p, len);
  for (uint32_t i = 0; i < kMrSlots; ++i)
    if (views_[i].area) ::munmap(views_[i].area, views_[i].map_len);
  if (base_ && !arena_borrowed_) ::munmap(base_, size_);
  if (const KeyTable* k = keys_.load()) ::munmap(const_cast<KeyTable*>(k), keys_size_);
  for (auto& [id, o] : objects_) ::munmap(o.base, o.size);
  for (auto& [id, e] : event_fds_) ::close(e.fd);
}

void Peer::reclaim() {
  std::lock_guard lock(mu_);
  for (auto& [p, len] : retired_) ::munmap(p, len);
  retired_.clear();
  has_retired_.store(false, std::memory_order_relaxed);
}

void Peer::release(uint32_t fd_id) {
  std::lock_guard lock(mu_);
  if (auto it = objects_.find(fd_id); it != objects_.end()) {
    if (--it->second.refs == 0) {
      ::munmap(it->second.base, it->second.size);
      objects_.erase(it);
    }
  } else if (auto e = event_fds_.find(fd_id); e != event_fds_.end()) {
    if (--e->second.refs == 0) {
      ::close(e->second.fd);
      event_fds_.erase(e);
    }
  }
}

PeerHold::~PeerHold() {
  for (uint32_t id : ids)
    if (id) peer->release(id);
}

int Peer::attach_arena() {
  std::lock_guard lock(mu_);
  if (base_) return 0;
  install_sigbus_guard();
  int fd;
  if (int e = source_.fetch_fd(client_id_, kArenaFdId, 0, fd)) return e;
  void* p = nullptr;
  uint64_t size = 0;
  int e = map_sealed(fd, PROT_READ | PROT_WRITE, kMaxArenaSize, p, size);
  ::close(fd);
  if (e) return e;
  const auto* h = static_cast<const ArenaHeader*>(p);
  uint32_t magic = 0, version = 0;
  bool ok = size >= sizeof(ArenaHeader) && guarded_call([&] {
              magic = __atomic_load_n(&h->magic, __ATOMIC_ACQUIRE);
              version = __atomic_load_n(&h->version, __ATOMIC_RELAXED);
            });
  if (!ok || magic != kArenaMagic || version != kArenaVersion) {
    ::munmap(p, size);
    return EPROTO;
  }
  base_ = static_cast<uint8_t*>(p);
  size_ = size;
  return 0;
}

bool Peer::dead() const {
  return base_ && reinterpret_cast<const ArenaHeader*>(base_)->dead.load(
                      std::memory_order_relaxed) != 0;
}

int Peer::attach_keys(uint32_t via_qpn) {
  if (keys_.load(std::memory_order_relaxed)) return 0;
  install_sigbus_guard();
  int fd;
  if (int e = source_.fetch_fd(client_id_, kKeyTableFdId, via_qpn, fd)) return e;
  void* p = nullptr;
  uint64_t size = 0;
  int e = map_sealed(fd, PROT_READ, sizeof(KeyTable) + kPage, p, size);
  ::close(fd);
  if (e) return e;
  const auto* k = static_cast<const KeyTable*>(p);
  uint32_t magic = 0, slots = 0;
  bool ok = size >= sizeof(KeyTable) && guarded_call([&] {
              magic = __atomic_load_n(&k->magic, __ATOMIC_RELAXED);
              slots = __atomic_load_n(&k->slots, __ATOMIC_RELAXED);
            });
  if (!ok || magic != kKeyTableMagic || slots != kMrSlots) {
    ::munmap(p, size);
    return EPROTO;
  }
  keys_size_ = size;
  uint32_t heavy = 0;
  guarded_call([&] { heavy = __atomic_load_n(&k->heavy_fence, __ATOMIC_RELAXED); });
  light_fence_.store(heavy == 1 && receives_heavy_fences(), std::memory_order_relaxed);
  keys_.store(k, std::memory_order_release);
  return 0;
}

// The fast path: a view that is current (its generation is the key table's) and allows the
// access. `retry` says whether a fresh grant could change the answer.
const uint8_t* Peer::lookup(uint32_t pd, uint32_t key, uint64_t addr, uint64_t len,
                            uint32_t access, bool& retry) const {
  retry = true;
  const KeyTable* keys = keys_.load(std::memory_order_acquire);
  int slot = index_.find(key);
  if (slot < 0 || !keys) return nullptr;
  const View& v = views_[slot];
  uint64_t tag = v.tag.load(std::memory_order_acquire);
  if (static_cast<uint32_t>(tag) != key) return nullptr;
  uint8_t* base = v.base;
  uint64_t iova = v.iova, length = v.length, va_off = v.va_off;
  uint32_t acc = v.access, mr_pd = v.pd;
  bool writable = v.writable, implicit = v.implicit;
  std::atomic_thread_fence(std::memory_order_acquire);
  if (v.tag.load(std::memory_order_relaxed) != tag) return nullptr;
  // Deregistered, re-registered or moved since: the mapping no longer aliases the MR.
  if (keys->gen[slot].load(std::memory_order_acquire) != static_cast<uint32_t>(tag >> 32))
    return nullptr;
  if ((access & kWriteAccess) && !writable) return nullptr;  // a writable grant may follow
  retry = false;
  if ((acc & access) != access) return nullptr;
  // An MR serves the QPs of its protection domain only: RDMA and receives alike.
  if (pd && mr_pd != pd) return nullptr;
  if (addr < iova || len > length || addr - iova > length - len) {
    retry = implicit;  // an implicit MR's other ranges come with other grants
    return nullptr;
  }
  return base + va_off + (addr - iova);
}

uint8_t* Peer::translate(uint32_t via_qpn, uint32_t pd, uint32_t key, uint64_t addr,
                         uint64_t len, uint32_t access) {
  bool retry;
  if (const uint8_t* p = lookup(pd, key, addr, len, access, retry))
    return const_cast<uint8_t*>(p);
  if (!retry || key == 0) return nullptr;
  // Slow path: ask for a grant; twice, in case the owner moved the MR in between. A range of an
  // implicit ODP MR that its owner is registering now (a page fault): ask again after a while,
  // within odp_wait_us_; past it the access fails as one to memory the owner does not have.
  int64_t waited_us = 0, pause_us = 50;
  for (int attempt = 0; attempt < 2; ++attempt) {
    int err;
    {
      std::lock_guard lock(mu_);
      if (attach_keys(via_qpn) != 0) return nullptr;
      err = map_mr(via_qpn, key, access, addr, len);
    }
    if (err == EAGAIN && waited_us < odp_wait_us_) {
      ::usleep(static_cast<useconds_t>(pause_us));
      waited_us += pause_us;
      pause_us = std::min<int64_t>(pause_us * 2, 20000);
      --attempt;
      continue;
    }
    if (err) return nullptr;
    if (const uint8_t* p = lookup(pd, key, addr, len, access, retry))
      return const_cast<uint8_t*>(p);
    if (!retry) return nullptr;
  }
  return nullptr;
}

// The area a view used before it was refilled. The same registration (a wider grant of it) may
// still be in use through the old area: kept. A registration that is gone is refused by every
// lookup since its generation changed; a caller that passed its lookup just before may still
// touch the area, so it stays mapped, but as anonymous memory: the owner's pages are let go.
void Peer::retire(void* area, uint64_t len, bool same_registration) {
  if (!same_registration && defer_retire_) {
    retired_.emplace_back(area, len);  // still the owner's pages until reclaim()
    has_retired_.store(true, std::memory_order_relaxed);
    return;
  }
  if (!same_registration &&
      ::mmap(area, len, PROT_READ | PROT_WRITE, MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
             -1, 0) != MAP_FAILED) {
    retired_.emplace_back(area, len);
    return;
  }
  kept_.emplace_back(area, len);
}

int Peer::map_mr(uint32_t via_qpn, uint32_t key, uint32_t access, uint64_t addr,
                 uint64_t len) {
  MrGrant g;
  if (int e = source_.grant_mr_range(client_id_, via_qpn, key, access, addr, len, g)) {
    close_all(g);
    return e;
  }
  if (!grant_ok(g)) {
    close_all(g);
    return EPROTO;
  }
  void* area = ::mmap(nullptr, g.map_length, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (area == MAP_FAILED) {
    close_all(g);
    return ENOMEM;
  }
  const int prot = g.writable ? PROT_READ | PROT_WRITE : PROT_READ;
  uint64_t off = 0;
  bool ok = true;
  for (uint32_t i = 0; i < g.nseg && ok; ++i) {
    const auto& s = g.seg[i];
    uint64_t file_size = 0;
    uint8_t* at = static_cast<uint8_t*>(area) + off;
    // Within the file as it is now, and the file can never shrink (sealed, or a System V
    // segment's).
    ok = check_memory_file(g.fds[i], kMaxMrBytes, file_size) == 0 && s.offset <= file_size &&
         s.length <= file_size - s.offset;
    if (!ok) break;
    void* p = ::mmap(at, s.length, prot, MAP_SHARED | MAP_FIXED, g.fds[i],
                     static_cast<off_t>(s.offset));
    if (p == MAP_FAILED && g.writable) {
      // A trusted user writing into a backing sealed against new writable mappings.
      uint64_t kept_size = 0;
      uint8_t* kept = source_.kept_mapping(client_id_, s.fd_id, kept_size);
      if (kept && s.offset <= kept_size && s.length <= kept_size - s.offset)
        p = mremap_fixed(kept + s.offset, 0, s.length, at);
    }
    ok = p != MAP_FAILED;
    off += s.length;
  }
  close_all(g);
  if (!ok) {
    ::munmap(area, g.map_length);
    return EPROTO;
  }
  // Publish: invalidate, fill, then set the new key and generation.
  View& v = views_[g.slot];
  const uint64_t old_tag = v.tag.load(std::memory_order_relaxed);
  const uint64_t new_tag = uint64_t(key) | uint64_t(g.gen) << 32;
  const uint32_t old_key = static_cast<uint32_t>(old_tag);
  void* old_area = v.area;
  const uint64_t old_len = v.map_len;
  v.tag.store(0, std::memory_order_release);
  std::atomic_thread_fence(std::memory_order_release);
  v.area = area;
  v.map_len = g.map_length;
  v.base = static_cast<uint8_t*>(area);
  v.iova = g.iova;
  v.length = g.length;
  v.va_off = g.va_offset;
  v.access = g.access;
  v.pd = g.pd;
  v.writable = g.writable;
  v.implicit = g.implicit;
  v.tag.store(new_tag, std::memory_order_release);
  if (old_area) retire(old_area, old_len, old_tag == new_tag);
  if (old_key && old_key != key) index_.erase(old_key);
  index_.insert(key, g.slot);
  return 0;
}

int Peer::map_object(uint32_t fd_id, uint32_t via_qpn, ObjectKind kind, uint8_t*& base,
                     uint64_t& size) {
  std::lock_guard lock(mu_);
  if (auto it = objects_.find(fd_id); it != objects_.end()) {
    if (it->second.kind != kind) return EPROTO;
    ++it->second.refs;
    base = it->second.base;
    size = it->second.size;
    return 0;
  }
  install_sigbus_guard();
  int fd;
  if (int e = source_.fetch_fd(client_id_, fd_id, via_qpn, fd)) return e;
  void* p = nullptr;
  uint64_t sz = 0;
  int e = map_sealed(fd, PROT_READ | PROT_WRITE, kMaxObjectSize, p, sz);
  ::close(fd);
  if (e) return e;
  const auto* h = static_cast<const ObjectHeader*>(p);
  ObjectHeader copy{};
  bool ok = sz >= sizeof(QpObject) && guarded_call([&] {
              copy.magic = h->magic;
              copy.version = h->version;
              copy.kind = h->kind;
              copy.owner_client = h->owner_client;
              copy.size = h->size;
            });
  if (!ok || copy.magic != kObjectMagic || copy.version != kArenaVersion ||
      copy.kind != static_cast<uint32_t>(kind) || copy.size != sz ||
      copy.owner_client != client_id_) {
    ::munmap(p, sz);
    return EPROTO;
  }
  objects_.emplace(fd_id, Object{static_cast<uint8_t*>(p), sz, kind, 1});
  base = static_cast<uint8_t*>(p);
  size = sz;
  return 0;
}

int Peer::event_fd(uint32_t fd_id, uint32_t via_qpn) {
  std::lock_guard lock(mu_);
  auto it = event_fds_.find(fd_id);
  if (it != event_fds_.end()) {
    ++it->second.refs;
    return it->second.fd;
  }
  int fd;
  if (source_.fetch_fd(client_id_, fd_id, via_qpn, fd)) return -1;
  event_fds_[fd_id] = EventFd{fd, 1};
  return fd;
}

namespace {

// A receive queue at `off` of a mapped object, validated.
int attach_rq(uint8_t* base, uint64_t size, uint32_t off, RqView& out) {
  if (!offset_ok(size, off, sizeof(RecvQueue)) || off % kCacheLine) return EPROTO;
  auto* rq = reinterpret_cast<RecvQueue*>(base + off);
  uint32_t cap = 0, max_sge = 0, esz = 0;
  if (!guarded_call([&] {
        cap = rq->capacity;
        max_sge = rq->max_sge;
        esz = rq->entry_size;
      }))
    return EPROTO;
  if (!is_pow2(cap) || cap > kMaxRingCapacity || max_sge > kMaxRecvSge ||
      esz != recv_entry_size(max_sge) || !offset_ok(size, off, rq_bytes(cap, max_sge)))
    return EPROTO;
  out = RqView{rq, cap - 1, max_sge, esz};
  return 0;
}

}  // namespace

int attach_peer_qp(const std::shared_ptr<Peer>& peer, uint32_t fd_id, uint32_t via_qpn,
                   PeerQp& out) {
  uint8_t* base = nullptr;
  uint64_t size = 0;
  if (int e = peer->map_object(fd_id, via_qpn, ObjectKind::kQp, base, size)) return e;
  auto* obj = reinterpret_cast<QpObject*>(base);
  ObjectHeader h{};
  PeerQp p;  // releases what it holds if this fails
  p.peer = peer;
  p.hold = std::make_shared<PeerHold>(peer);
  p.hold->ids[0] = fd_id;
  if (!guarded_call([&] {
        h.rq_offset = obj->hdr.rq_offset;
        h.srq_fd_id = obj->hdr.srq_fd_id;
        h.ring_offset = obj->hdr.ring_offset;
        h.notify_fd_id = obj->hdr.notify_fd_id;
        p.qpn = obj->attrs.qpn;
        p.type = obj->attrs.qp_type;
        p.pd = obj->attrs.pd;
      }))
    return EPROTO;
  p.obj = obj;
  p.attrs = &obj->attrs;
  p.via_qpn = via_qpn;
  // The ring senders push receive completions into.
  if (!offset_ok(size, h.ring_offset, sizeof(RecvRing)) || h.ring_offset % kCacheLine)
    return EPROTO;
  auto* ring = reinterpret_cast<RecvRing*>(base + h.ring_offset);
  uint32_t cap = 0;
  if (!guarded_call([&] { cap = ring->capacity; })) return EPROTO;
  if (!is_pow2(cap) || cap > kMaxRingCapacity || !offset_ok(size, h.ring_offset, ring_bytes(cap)))
    return EPROTO;
  p.ring = RingView{ring, cap - 1};
  // Its receive queue, or its SRQ's.
  if (h.rq_offset) {
    if (int e = attach_rq(base, size, h.rq_offset, p.rq)) return e;
  } else if (h.srq_fd_id) {
    uint8_t* sbase = nullptr;
    uint64_t ssize = 0;
    if (int e = peer->map_object(h.srq_fd_id, via_qpn, ObjectKind::kSrq, sbase, ssize)) return e;
    p.hold->ids[1] = h.srq_fd_id;
    uint32_t off = 0;
    if (!guarded_call([&] { off = reinterpret_cast<ObjectHeader*>(sbase)->rq_offset; }))
      return EPROTO;
    if (int e = attach_rq(sbase, ssize, off, p.rq)) return e;
  } else {
    return EPROTO;
  }
  if (h.notify_fd_id) {
    p.notify_efd = peer->event_fd(h.notify_fd_id, via_qpn);
    if (p.notify_efd < 0) return EPROTO;
    p.hold->ids[2] = h.notify_fd_id;
  }
  out = std::move(p);
  return 0;
}

int attach_cq(const std::shared_ptr<Peer>& peer, uint32_t offset, CqView& out, int& efd) {
  uint64_t size = peer->size();
  if (!peer->base() || !offset_ok(size, offset, sizeof(CqShared)) || offset % kCacheLine)
    return EPROTO;
  auto* cq = reinterpret_cast<CqShared*>(peer->base() + offset);
  uint32_t cap = 0, ch = 0;
  if (!guarded_call([&] {
        cap = cq->capacity;
        ch = cq->channel_fd_id;
      }))
    return EPROTO;
  if (!is_pow2(cap) || cap > (1u << 23) || !offset_ok(size, offset, cq_bytes(cap))) return EPROTO;
  out = CqView{cq, cap - 1};
  efd = -1;
  if (ch) {
    efd = peer->event_fd(ch, 0);
    if (efd < 0) return EPROTO;
  }
  return 0;
}

}  // namespace vrdma::shm
