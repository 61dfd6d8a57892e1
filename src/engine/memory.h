// Registered memory: the pages of every registered range are moved into memfd
// backings mapped at the same address (contents kept), so that peers and the
// router can map them. Overlapping registrations share backings.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

#include "shm/layout.h"

namespace vrdma {

class Control;

// A registered region as the owning process uses it (private copy of the
// shared MrEntry, so local checks never read memory a peer can write).
struct LocalMr {
  uint32_t key = 0;
  uint32_t access = 0;
  uint64_t iova = 0;
  uint64_t addr = 0;
  uint64_t length = 0;
  uint32_t pd = 0;
};

class MemoryRegistry {
 public:
  MemoryRegistry(Control& control, shm::MrEntry* table) : control_(control), table_(table) {}

  // Makes [addr, addr+length) shared and publishes an MR. Returns 0 or errno.
  int reg(uint32_t pd, void* addr, size_t length, uint64_t iova, uint32_t access, LocalMr& out);
  int dereg(uint32_t key);

  // Data path: finds the local MR for a key, or nullptr. Lock-free.
  const LocalMr* find(uint32_t key) const {
    const LocalMr& m = local_[key & (shm::kMrSlots - 1)];
    return m.key == key && key != 0 ? &m : nullptr;
  }

  size_t count() const;

 private:
  struct Backing {
    uint64_t end;
    int fd;
    uint32_t fd_id;
    uint32_t refs;
  };
  int cover(uint64_t start, uint64_t end, std::vector<shm::MrSegment>& segs);  // requires mu_
  void release(uint64_t start, uint64_t end);           // requires mu_
  void drop_unreferenced(uint64_t start, uint64_t end);  // requires mu_
  uint32_t next_fd_id();

  Control& control_;
  shm::MrEntry* table_;
  mutable std::mutex mu_;
  std::map<uint64_t, Backing> backings_;  // page-aligned start -> backing
  LocalMr local_[shm::kMrSlots];
  uint32_t generation_[shm::kMrSlots] = {};
  std::vector<uint32_t> free_slots_;
  bool slots_init_ = false;
  size_t count_ = 0;
};

// File descriptor ids the client hands to vrdmad (0 is the arena).
uint32_t allocate_fd_id();

}  // namespace vrdma
