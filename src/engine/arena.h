// The client's arena: one sparse memfd holding every shared queue of the
// process (layout in shm_layout.h), with a small first-fit allocator.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>

#include "shm/layout.h"

namespace vrdma {

class Arena {
 public:
  Arena() = default;
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  // Creates and maps the memfd. Returns 0 or an errno.
  int create(uint32_t client_id);

  int fd() const { return fd_; }
  uint8_t* base() const { return base_; }
  shm::ArenaHeader* header() const { return reinterpret_cast<shm::ArenaHeader*>(base_); }
  shm::MrEntry* mr_table() const {
    return reinterpret_cast<shm::MrEntry*>(base_ + header()->mr_table_offset);
  }

  // Zeroed, cache-line aligned space; 0 when full. Thread-safe.
  uint32_t alloc(size_t bytes);
  void free(uint32_t offset);

  template <typename T>
  T* at(uint32_t offset) const {
    return reinterpret_cast<T*>(base_ + offset);
  }

 private:
  int fd_ = -1;
  uint8_t* base_ = nullptr;
  std::mutex mu_;
  std::map<uint32_t, uint32_t> free_;  // offset -> size
  std::map<uint32_t, uint32_t> used_;  // offset -> size
};

}  // namespace vrdma
