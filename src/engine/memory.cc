#include "engine/memory.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <memory>

#include "engine/control.h"

namespace vrdma {

namespace {
constexpr uint64_t kPage = 4096;
std::atomic<uint32_t> g_next_fd_id{1};
}  // namespace

uint32_t allocate_fd_id() { return g_next_fd_id.fetch_add(1); }

size_t MemoryRegistry::count() const {
  std::lock_guard lock(mu_);
  return count_;
}

// Moves [start, end) (page aligned, not yet covered) into a new memfd mapped
// at the same address. The kernel copies the old contents (pwrite reads the
// range, failing with EFAULT where nothing is mapped).
static int make_backing(uint64_t start, uint64_t end, int& fd_out) {
  size_t len = end - start;
  int fd = ::memfd_create("vrdma-mr", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return errno;
  // Peers map this file: nobody may shrink it under them (that would fault).
  if (::ftruncate(fd, static_cast<off_t>(len)) < 0 ||
      ::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
    int e = errno;
    ::close(fd);
    return e;
  }
  size_t done = 0;
  while (done < len) {
    // The raw system call on purpose: whole pages are copied, including bytes
    // around the registered range that belong to other objects.
    ssize_t n = ::syscall(SYS_pwrite64, fd, reinterpret_cast<void*>(start + done), len - done,
                          static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int e = n < 0 ? errno : EFAULT;
      ::close(fd);
      return e;
    }
    done += static_cast<size_t>(n);
  }
  void* p = ::mmap(reinterpret_cast<void*>(start), len, PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_FIXED, fd, 0);
  if (p == MAP_FAILED) {
    int e = errno;
    ::close(fd);
    return e;
  }
  fd_out = fd;
  return 0;
}

int MemoryRegistry::cover(uint64_t start, uint64_t end, std::vector<shm::MrSegment>& segs) {
  uint64_t pos = start;
  auto it = backings_.upper_bound(pos);
  if (it != backings_.begin()) --it;
  while (pos < end) {
    if (it != backings_.end() && it->second.end <= pos) {
      ++it;
      continue;
    }
    if (it != backings_.end() && it->first <= pos) {
      uint64_t seg_end = std::min(end, it->second.end);
      segs.push_back({it->second.fd_id, 0, pos - it->first, seg_end - pos});
      pos = seg_end;
      ++it;
      continue;
    }
    uint64_t gap_end = (it != backings_.end() && it->first < end) ? it->first : end;
    int fd = -1;
    int e = make_backing(pos, gap_end, fd);
    uint32_t fd_id = allocate_fd_id();
    if (!e) {
      proto::PutFdReq req{fd_id, static_cast<uint32_t>(proto::FdKind::kMemory), gap_end - pos};
      e = control_.call(proto::Op::kPutFd, req, nullptr, &fd, 1);
      if (e) ::close(fd);
    }
    if (e) {
      drop_unreferenced(start, pos);
      return e;
    }
    segs.push_back({fd_id, 0, 0, gap_end - pos});
    it = std::next(backings_.emplace(pos, Backing{gap_end, fd, fd_id, 0}).first);
    pos = gap_end;
  }
  if (segs.size() > shm::kMaxMrSegments) {
    drop_unreferenced(start, end);
    return ENOMEM;
  }
  for (auto& [s, b] : backings_)
    if (b.end > start && s < end) ++b.refs;
  return 0;
}

void MemoryRegistry::release(uint64_t start, uint64_t end) {
  for (auto& [s, b] : backings_)
    if (b.end > start && s < end && b.refs > 0) --b.refs;
  drop_unreferenced(start, end);
}

// The mappings stay (the application still uses the memory); unreferenced
// backings are forgotten so that a later registration of reused addresses
// starts anew.
void MemoryRegistry::drop_unreferenced(uint64_t start, uint64_t end) {
  for (auto it = backings_.begin(); it != backings_.end();) {
    if (it->second.end <= start || it->first >= end || it->second.refs > 0) {
      ++it;
      continue;
    }
    proto::DropFdReq req{it->second.fd_id};
    control_.call(proto::Op::kDropFd, req);
    ::close(it->second.fd);
    it = backings_.erase(it);
  }
}

int MemoryRegistry::reg(uint32_t pd, void* addr, size_t length, uint64_t iova, uint32_t access,
                        LocalMr& out) {
  if (length == 0 || !addr) return EINVAL;
  uint64_t a = reinterpret_cast<uint64_t>(addr);
  uint64_t start = a & ~(kPage - 1);
  uint64_t end = (a + length + kPage - 1) & ~(kPage - 1);
  if (end < start) return EINVAL;
  std::lock_guard lock(mu_);
  if (!slots_init_) {
    for (uint32_t i = shm::kMrSlots; i-- > 1;) free_slots_.push_back(i);
    slots_init_ = true;
  }
  if (free_slots_.empty()) return ENOMEM;
  std::vector<shm::MrSegment> segs;
  if (int e = cover(start, end, segs)) return e;
  uint32_t slot = free_slots_.back();
  proto::AllocKeyReq kreq{slot, access, length};
  auto reply = std::make_unique<Packet>();
  int e = control_.call(proto::Op::kAllocKey, kreq, reply.get());
  auto* krep = reply->as<proto::AllocKeyRep>();
  if (e || !krep || (krep->key & (shm::kMrSlots - 1)) != slot) {
    release(start, end);
    return e ? e : EPROTO;
  }
  free_slots_.pop_back();
  uint32_t key = krep->key;
  shm::MrEntry& entry = table_[slot];
  entry.access = access;
  entry.nseg = static_cast<uint32_t>(segs.size());
  entry.iova = iova;
  entry.length = length;
  entry.va = a;
  entry.map_start = start;
  entry.map_length = end - start;
  for (size_t i = 0; i < segs.size(); ++i) entry.seg[i] = segs[i];
  uint32_t gen = ++generation_[slot];
  entry.key_gen.store(uint64_t(key) | uint64_t(gen) << 32, std::memory_order_release);
  out = LocalMr{key, access, iova, a, length, pd};
  local_[slot] = out;
  ++count_;
  return 0;
}

int MemoryRegistry::dereg(uint32_t key) {
  std::lock_guard lock(mu_);
  uint32_t slot = key & (shm::kMrSlots - 1);
  LocalMr& m = local_[slot];
  if (m.key != key || key == 0) return EINVAL;
  table_[slot].key_gen.store(0, std::memory_order_release);
  uint64_t start = m.addr & ~(kPage - 1);
  uint64_t end = (m.addr + m.length + kPage - 1) & ~(kPage - 1);
  m = LocalMr{};
  proto::FreeKeyReq req{key};
  control_.call(proto::Op::kFreeKey, req);
  release(start, end);
  free_slots_.push_back(slot);
  --count_;
  return 0;
}

}  // namespace vrdma
