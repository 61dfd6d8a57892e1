// Memory windows: a window is an MR slot of its own over pages of a registered MR (see
// memory.h). Binding publishes the slot's descriptor (its key, rights, range, the backings that
// hold the range) under a new generation; unbinding, invalidating and freeing withdraw it under
// a new generation. Nothing moves: the window's pages stay in its MR's backings, unless a
// writable window needs a backing that is sealed against writes (an MR with remote reads only),
// which then moves to an unsealed one as for a receive.
#include <errno.h>

#include <memory>

#include "engine/control.h"
#include "engine/memory.h"

namespace vrdma {

namespace {
constexpr uint32_t kRemote =
    IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC;
constexpr uint32_t kRemoteWrites = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC;
constexpr uint32_t kBindable = kRemote | IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ZERO_BASED;
}  // namespace

int MemoryRegistry::alloc_window(uint32_t pd, uint32_t type, uint32_t& key, uint32_t& slot) {
  if (type != IBV_MW_TYPE_1 && type != IBV_MW_TYPE_2) return EOPNOTSUPP;
  std::lock_guard lock(mu_);
  init_slots();
  if (free_slots_.empty()) return ENOMEM;
  uint32_t s = free_slots_.back();
  proto::AllocKeyReq req{s, proto::kKeyWindow, 0, pd, 0};
  auto reply = std::make_unique<Packet>();
  int e = control_.call(proto::Op::kAllocKey, req, reply.get());
  auto* rep = reply->as<proto::AllocKeyRep>();
  if (e) return e;
  if (!rep || rep->key == 0 || (rep->key & 0xFF)) return EPROTO;
  free_slots_.pop_back();
  windows_[s] = Window{rep->key, rep->key, type, pd, 0};
  window_slot_[rep->key] = s;
  key = rep->key;
  slot = s;
  return 0;
}

void MemoryRegistry::unbind_window(uint32_t slot) {
  Window& w = windows_.at(slot);
  w.mr_key = 0;
  // The key dies first: a peer's next access sees a new generation and asks again, in vain.
  keys_->gen[slot].store(++generation_[slot], std::memory_order_release);
  table_[slot].key_gen.store(0, std::memory_order_release);
  local_[slot] = LocalMr{};
  range_[slot] = Range{};
}

void MemoryRegistry::unbind_windows_of(uint32_t mr_key) {
  for (auto& [slot, w] : windows_)
    if (w.mr_key && w.mr_key == mr_key) unbind_window(slot);
}

int MemoryRegistry::free_window(uint32_t slot) {
  std::lock_guard lock(mu_);
  auto it = windows_.find(slot);
  if (it == windows_.end()) return EINVAL;
  unbind_window(slot);
  proto::FreeKeyReq req{it->second.base};
  control_.call(proto::Op::kFreeKey, req);
  window_slot_.erase(it->second.base);
  windows_.erase(it);
  free_slots_.push_back(slot);
  return 0;
}

int MemoryRegistry::bind_window(uint32_t slot, uint32_t type, uint32_t qp_pd, uint32_t new_key,
                                uint32_t mr_key, uint64_t addr, uint64_t length, uint32_t access) {
  std::lock_guard lock(mu_);
  auto wit = windows_.find(slot);
  if (wit == windows_.end()) return EINVAL;
  Window& w = wit->second;
  // The key keeps the window's 24 bits; only the low byte is the binder's.
  if (w.type != type || (new_key & ~0xFFu) != w.base || w.pd != qp_pd) return EINVAL;
  if (access & ~kBindable) return EINVAL;
  if (length == 0) {
    // Unbound under the new key (type 1's way of invalidating).
    unbind_window(slot);
    w.key = new_key;
    return 0;
  }
  int mslot = index_.find(mr_key);
  if (mslot < 0 || local_[mslot].key != mr_key) return EINVAL;
  const LocalMr mr = local_[mslot];
  if (!(mr.access & IBV_ACCESS_MW_BIND) || mr.pd != w.pd) return EACCES;
  // Remote writes through a window need an MR its owner may write.
  if ((access & kRemoteWrites) && !(mr.access & IBV_ACCESS_LOCAL_WRITE)) return EACCES;
  if (addr < mr.iova || length > mr.length || addr - mr.iova > mr.length - length) return EINVAL;
  const uint64_t va = mr.addr + (addr - mr.iova);
  // The window's pages, widened to the backings that hold them (all of them its MR's).
  uint64_t start = va & ~(shm::kPage - 1);
  uint64_t end = (va + length + shm::kPage - 1) & ~(shm::kPage - 1);
  auto first = backings_.upper_bound(start);
  if (first == backings_.begin()) return EFAULT;
  --first;
  if (first->second.end <= start) return EFAULT;
  start = first->first;
  uint64_t pos = start;
  for (auto it = first; pos < end; ++it) {
    if (it == backings_.end() || it->first != pos) return EFAULT;
    if (access & kRemoteWrites) {
      it->second.write_class = true;
      if (it->second.sealed)
        if (int e = replace(it, false)) return e;
    }
    pos = it->second.end;
  }
  end = pos;
  unbind_window(slot);
  w.key = new_key;
  w.mr_key = mr_key;
  const uint64_t iova = (access & IBV_ACCESS_ZERO_BASED) ? 0 : addr;
  local_[slot] = LocalMr{new_key, access & kRemote, iova, va, length, w.pd};
  range_[slot] = Range{start, end};
  publish(slot);
  return 0;
}

int MemoryRegistry::invalidate_window(uint32_t key, uint32_t pd) {
  std::lock_guard lock(mu_);
  auto s = window_slot_.find(key & ~0xFFu);
  if (s == window_slot_.end()) return EINVAL;
  Window& w = windows_.at(s->second);
  if (w.type != IBV_MW_TYPE_2 || w.key != key || (pd && w.pd != pd)) return EINVAL;
  unbind_window(s->second);
  return 0;
}

}  // namespace vrdma
