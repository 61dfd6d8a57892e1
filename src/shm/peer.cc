#include "shm/peer.h"

#include <errno.h>
#include <sys/mman.h>
#include <unistd.h>


namespace vrdma::shm {

Peer::~Peer() {
  for (auto& [p, len] : mappings_) ::munmap(p, len);
  if (base_) ::munmap(base_, size_);
  for (auto& [id, fd] : fds_) ::close(fd);
}

int Peer::attach() {
  int fd;
  if (int e = source_.fetch_fd(client_id_, 0, fd)) return e;
  void* p = ::mmap(nullptr, kArenaSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) return errno;
  base_ = static_cast<uint8_t*>(p);
  size_ = kArenaSize;
  hdr_ = reinterpret_cast<ArenaHeader*>(base_);
  uint64_t table_bytes = uint64_t(kMrSlots) * sizeof(MrEntry);
  if (hdr_->magic != kArenaMagic || hdr_->version != kArenaVersion ||
      hdr_->mr_slots != kMrSlots || !offset_ok(size_, hdr_->mr_table_offset, table_bytes))
    return EPROTO;
  table_ = reinterpret_cast<MrEntry*>(base_ + hdr_->mr_table_offset);
  views_.reset(new View[kMrSlots]);
  return 0;
}

uint8_t* Peer::translate(uint32_t key, uint64_t addr, uint64_t len, uint32_t access) {
  uint32_t slot = key & (kMrSlots - 1);
  uint64_t kg = table_[slot].key_gen.load(std::memory_order_acquire);
  if (static_cast<uint32_t>(kg) != key || key == 0) return nullptr;
  View& v = views_[slot];
  for (int attempt = 0; attempt < 2; ++attempt) {
    uint64_t seen = v.key_gen.load(std::memory_order_acquire);
    if (seen == kg) {
      uint8_t* base = v.base;
      uint64_t iova = v.iova, length = v.length, va_off = v.va_off;
      uint32_t acc = v.access;
      std::atomic_thread_fence(std::memory_order_acquire);
      if (v.key_gen.load(std::memory_order_relaxed) == kg) {
        if ((acc & access) != access) return nullptr;
        if (addr < iova || len > length || addr - iova > length - len) return nullptr;
        return base + va_off + (addr - iova);
      }
    }
    if (!map_mr(slot, kg)) return nullptr;
  }
  return nullptr;
}

uint8_t* Peer::map_mr(uint32_t slot, uint64_t kg) {
  std::lock_guard lock(mu_);
  View& v = views_[slot];
  if (v.key_gen.load(std::memory_order_relaxed) == kg) return v.base;
  // Copy the descriptor out of shared memory once, then validate the copy.
  MrEntry e;
  const MrEntry& src = table_[slot];
  e.access = src.access;
  e.nseg = src.nseg;
  e.iova = src.iova;
  e.length = src.length;
  e.va = src.va;
  e.map_start = src.map_start;
  e.map_length = src.map_length;
  for (uint32_t i = 0; i < kMaxMrSegments; ++i) e.seg[i] = src.seg[i];
  std::atomic_thread_fence(std::memory_order_acquire);
  if (src.key_gen.load(std::memory_order_relaxed) != kg) return nullptr;
  if (e.nseg == 0 || e.nseg > kMaxMrSegments || e.map_length == 0 ||
      e.map_length > (1ull << 40) || e.va < e.map_start || e.length > e.map_length ||
      e.va - e.map_start > e.map_length - e.length)
    return nullptr;
  uint64_t total = 0;
  for (uint32_t i = 0; i < e.nseg; ++i) total += e.seg[i].length;
  if (total != e.map_length) return nullptr;
  void* area = ::mmap(nullptr, e.map_length, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (area == MAP_FAILED) return nullptr;
  uint64_t off = 0;
  for (uint32_t i = 0; i < e.nseg; ++i) {
    int fd;
    auto it = fds_.find(e.seg[i].fd_id);
    if (it != fds_.end()) {
      fd = it->second;
    } else {
      if (source_.fetch_fd(client_id_, e.seg[i].fd_id, fd)) {
        ::munmap(area, e.map_length);
        return nullptr;
      }
      fds_[e.seg[i].fd_id] = fd;
    }
    void* p = ::mmap(static_cast<uint8_t*>(area) + off, e.seg[i].length, PROT_READ | PROT_WRITE,
                     MAP_SHARED | MAP_FIXED, fd, static_cast<off_t>(e.seg[i].fd_offset));
    if (p == MAP_FAILED) {
      ::munmap(area, e.map_length);
      return nullptr;
    }
    off += e.seg[i].length;
  }
  mappings_.emplace_back(area, e.map_length);
  // Publish: invalidate, fill, then set the new key/generation.
  v.key_gen.store(0, std::memory_order_release);
  std::atomic_thread_fence(std::memory_order_release);
  v.base = static_cast<uint8_t*>(area);
  v.iova = e.iova;
  v.length = e.length;
  v.va_off = e.va - e.map_start;
  v.access = e.access;
  v.key_gen.store(kg, std::memory_order_release);
  return v.base;
}

int Peer::event_fd(uint32_t fd_id) {
  std::lock_guard lock(mu_);
  auto it = fds_.find(fd_id);
  if (it != fds_.end()) return it->second;
  int fd;
  if (source_.fetch_fd(client_id_, fd_id, fd)) return -1;
  fds_[fd_id] = fd;
  return fd;
}

int attach_peer_qp(const std::shared_ptr<Peer>& peer, uint32_t offset, PeerQp& out) {
  uint64_t size = peer->size();
  uint8_t* base = peer->base();
  if (!offset_ok(size, offset, sizeof(QpShared))) return EPROTO;
  auto* qp = reinterpret_cast<QpShared*>(base + offset);
  PeerQp p;
  p.peer = peer;
  p.qp = qp;
  p.qpn = qp->qpn;
  p.type = qp->qp_type;
  uint32_t rq_off = qp->rq_offset, cq_off = qp->recv_cq_offset;
  if (rq_off) {
    if (!offset_ok(size, rq_off, sizeof(RecvQueue))) return EPROTO;
    auto* rq = reinterpret_cast<RecvQueue*>(base + rq_off);
    uint32_t cap = rq->capacity, max_sge = rq->max_sge, esz = rq->entry_size;
    if (cap == 0 || (cap & (cap - 1)) || max_sge > kMaxRecvSge ||
        esz != recv_entry_size(max_sge) ||
        !offset_ok(size, rq_off, rq_bytes(cap, max_sge)))
      return EPROTO;
    p.rq = RqView{rq, cap - 1, max_sge, esz};
  }
  if (int e = attach_cq(peer, cq_off, p.recv_cq, p.recv_cq_efd)) return e;
  out = std::move(p);
  return 0;
}

int attach_cq(const std::shared_ptr<Peer>& peer, uint32_t offset, CqView& out, int& efd) {
  uint64_t size = peer->size();
  if (!offset_ok(size, offset, sizeof(CqShared))) return EPROTO;
  auto* cq = reinterpret_cast<CqShared*>(peer->base() + offset);
  uint32_t cap = cq->capacity;
  if (cap == 0 || (cap & (cap - 1)) || !offset_ok(size, offset, cq_bytes(cap)))
    return EPROTO;
  out = CqView{cq, cap - 1};
  efd = -1;
  if (uint32_t ch = cq->channel_fd_id) {
    efd = peer->event_fd(ch);
    if (efd < 0) return EPROTO;
  }
  return 0;
}

}  // namespace vrdma::shm
