#include "shm/key_index.h"

#include <vector>

namespace vrdma::shm {

void KeyIndex::rebuild() {
  std::vector<uint64_t> live;
  for (auto& w : words_) {
    uint64_t e = w.load(std::memory_order_relaxed);
    if (e != 0 && e != kTombstone) live.push_back(e);
    w.store(0, std::memory_order_release);
  }
  used_ = 0;
  for (uint64_t e : live) {
    uint32_t h = hash(static_cast<uint32_t>(e));
    for (uint32_t i = 0; i < kCapacity; ++i) {
      auto& w = words_[(h + i) & (kCapacity - 1)];
      if (w.load(std::memory_order_relaxed) == 0) {
        ++used_;
        w.store(e, std::memory_order_release);
        break;
      }
    }
  }
}

}  // namespace vrdma::shm
