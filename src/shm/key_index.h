// Memory keys are 32 random bits: nothing in a key says where its MR is. KeyIndex maps a key
// to the slot that holds the MR's state, for the data path (lock-free lookups) of the owner
// (its own MRs) and of a peer (the MRs it was granted).
//
// Open addressing over 2 * kMrSlots words, each word one (key, slot) pair, so a reader sees a
// pair whole or not at all. Writers hold the caller's lock. A lookup that misses (the key is
// absent, or a writer was rearranging the table) sends the caller to its slow path, which
// looks again under the lock: a reader can miss, never get a wrong slot.
#pragma once

#include <atomic>
#include <cstdint>

#include "shm/layout.h"

namespace vrdma::shm {

class KeyIndex {
 public:
  static constexpr uint32_t kCapacity = 2 * kMrSlots;
  static constexpr uint64_t kTombstone = 0xFFFFFFFFull << 32;  // key 0 never exists

  // The slot of `key`, or -1. Lock-free.
  int find(uint32_t key) const {
    if (key == 0) return -1;
    uint32_t h = hash(key);
    for (uint32_t i = 0; i < kCapacity; ++i) {
      uint64_t e = words_[(h + i) & (kCapacity - 1)].load(std::memory_order_acquire);
      if (e == 0) return -1;
      if (static_cast<uint32_t>(e) == key && e != kTombstone)
        return static_cast<int>((e >> 32) - 1);
    }
    return -1;
  }

  // Writers (under the caller's lock). `slot` < kMrSlots.
  void insert(uint32_t key, uint32_t slot) {
    if (key == 0) return;
    erase(key);
    if (used_ + 1 >= kCapacity) rebuild();
    uint64_t word = uint64_t(key) | uint64_t(slot + 1) << 32;
    uint32_t h = hash(key);
    for (uint32_t i = 0; i < kCapacity; ++i) {
      auto& w = words_[(h + i) & (kCapacity - 1)];
      uint64_t e = w.load(std::memory_order_relaxed);
      if (e == 0 || e == kTombstone) {
        if (e == 0) ++used_;
        w.store(word, std::memory_order_release);
        return;
      }
    }
  }

  void erase(uint32_t key) {
    if (key == 0) return;
    uint32_t h = hash(key);
    for (uint32_t i = 0; i < kCapacity; ++i) {
      auto& w = words_[(h + i) & (kCapacity - 1)];
      uint64_t e = w.load(std::memory_order_relaxed);
      if (e == 0) return;
      if (static_cast<uint32_t>(e) == key && e != kTombstone) {
        w.store(kTombstone, std::memory_order_release);
        return;
      }
    }
  }

 private:
  static uint32_t hash(uint32_t key) {
    uint32_t x = key * 0x9E3779B1u;
    return x ^ (x >> 15);
  }

  // Every word is used or a tombstone: put the live pairs back without the tombstones.
  void rebuild();

  std::atomic<uint64_t> words_[kCapacity] = {};
  uint32_t used_ = 0;  // words that are not 0 (live or tombstones)
};

}  // namespace vrdma::shm
