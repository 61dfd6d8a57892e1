#include "engine/arena.h"

#include <errno.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

namespace vrdma {

Arena::~Arena() {
  if (base_) ::munmap(base_, shm::kArenaSize);
  if (fd_ >= 0) ::close(fd_);
}

int Arena::create(uint32_t client_id) {
  fd_ = ::memfd_create("vrdma-arena", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd_ < 0) return errno;
  if (::ftruncate(fd_, shm::kArenaSize) < 0) return errno;
  // Peers map this file: nobody may shrink it under them (that would fault).
  if (::fcntl(fd_, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) return errno;
  void* p = ::mmap(nullptr, shm::kArenaSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
  if (p == MAP_FAILED) return errno;
  base_ = static_cast<uint8_t*>(p);
  auto* h = header();
  h->magic = shm::kArenaMagic;
  h->version = shm::kArenaVersion;
  h->size = shm::kArenaSize;
  h->owner_client = client_id;
  h->owner_pid = static_cast<uint32_t>(::getpid());
  const uint32_t table_off = 4096;
  const uint32_t table_bytes = shm::kMrSlots * sizeof(shm::MrEntry);
  h->mr_table_offset = table_off;
  h->mr_slots = shm::kMrSlots;
  uint32_t first = (table_off + table_bytes + 4095u) & ~4095u;
  free_[first] = static_cast<uint32_t>(shm::kArenaSize - first);
  return 0;
}

uint32_t Arena::alloc(size_t bytes) {
  uint32_t need = static_cast<uint32_t>((bytes + shm::kCacheLine - 1) & ~size_t(shm::kCacheLine - 1));
  if (bytes == 0 || bytes > shm::kArenaSize) return 0;
  std::lock_guard lock(mu_);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < need) continue;
    uint32_t off = it->first, size = it->second;
    free_.erase(it);
    if (size > need) free_[off + need] = size - need;
    used_[off] = need;
    memset(base_ + off, 0, need);
    return off;
  }
  return 0;
}

void Arena::free(uint32_t offset) {
  std::lock_guard lock(mu_);
  auto it = used_.find(offset);
  if (it == used_.end()) return;
  uint32_t size = it->second;
  used_.erase(it);
  auto [pos, ok] = free_.emplace(offset, size);
  // Merge with the following and preceding free blocks.
  auto next = std::next(pos);
  if (next != free_.end() && pos->first + pos->second == next->first) {
    pos->second += next->second;
    free_.erase(next);
  }
  if (pos != free_.begin()) {
    auto prev = std::prev(pos);
    if (prev->first + prev->second == pos->first) {
      prev->second += pos->second;
      free_.erase(pos);
    }
  }
}

}  // namespace vrdma
