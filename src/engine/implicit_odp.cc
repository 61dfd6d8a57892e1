// Implicit on-demand paging: an MR over the whole address space (ibv_reg_mr(pd, NULL,
// SIZE_MAX, IBV_ACCESS_ON_DEMAND | ...)).
//
// A registration moves the pages of its range into files vrdmad can grant, which cannot be done
// for a whole address space, most of which is not mapped. So the implicit MR holds a key (vrdmad
// knows it, with its rights and protection domain) and no pages; the ranges requests name
// under it are registered when first used, as child MRs with the implicit MR's rights and PD,
// page-aligned and cached. A range that is not mapped cannot be registered (the copy into the
// backing fails with EFAULT): the entry then names no MR, and the request completes with an
// access error, as a page fault that cannot be resolved does on hardware. Deregistering the
// implicit MR deregisters its children: requests still using them complete with errors.
#include "engine/implicit_odp.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <condition_variable>
#include <deque>
#include <memory>
#include <thread>

#include "engine/control.h"
#include "engine/thread_stop.h"

namespace vrdma {

namespace {

constexpr uint64_t kPage = shm::kPage;
constexpr uint32_t kWrites =
    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC;
constexpr size_t kMaxQueuedFaults = 64;

// Whether every page of [start, end) is mapped readable, writable when `write`, and not
// executable, as /proc/self/maps says: a registration maps its backing readable and writable in
// place, which must not widen what the application's mapping allowed (a peer with remote write
// rights must not turn the owner's code or read-only data writable).
bool range_usable(uint64_t start, uint64_t end, bool write) {
  FILE* f = ::fopen("/proc/self/maps", "re");
  if (!f) return false;
  char* line = nullptr;
  size_t cap = 0;
  uint64_t pos = start;
  while (pos<end&& ::getline(&line, &cap, f)> 0) {
    unsigned long long lo, hi;
    char perms[5] = {};
    if (::sscanf(line, "%llx-%llx %4s", &lo, &hi, perms) != 3) break;
    if (hi <= pos) continue;
    if (lo > pos) break;  // a hole
    if (perms[0] != 'r' || (write && perms[1] != 'w') || perms[2] == 'x') break;
    pos = hi;
  }
  ::free(line);
  ::fclose(f);
  return pos >= end;
}

}  // namespace

// The thread that registers what peers ask for (request_fault): vrdmad's notification may be
// read by any thread that waits in a control call, with locks held.
class OdpFaults {
 public:
  explicit OdpFaults(MemoryRegistry& mem) : mem_(mem) {
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);  // no signals meant for the application
    thread_ = std::thread([this] { loop(); });
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
  }
  ~OdpFaults() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void push(uint32_t key, uint64_t addr, uint64_t length) {
    std::lock_guard lock(mu_);
    if (queue_.size() >= kMaxQueuedFaults) return;
    for (const Fault& f : queue_)
      if (f.key == key && f.addr == addr && f.length == length) return;  // asked already
    queue_.push_back(Fault{key, addr, length});
    cv_.notify_all();
  }

 private:
  struct Fault {
    uint32_t key;
    uint64_t addr, length;
  };
  void loop() {
    ThreadStop::Exempt exempt;  // registers, never writes into memory being registered
    std::unique_lock lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      Fault f = queue_.front();
      lock.unlock();
      int err;
      mem_.fault_in(f.key, f.addr, f.length, err);  // the peer asks again and sees the result
      lock.lock();
      queue_.pop_front();
    }
  }
  MemoryRegistry& mem_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Fault> queue_;
  bool stop_ = false;
  std::thread thread_;
};

void MemoryRegistry::request_fault(uint32_t key, uint64_t addr, uint64_t length) {
  if (!has_implicit() || !is_implicit(key)) return;
  std::lock_guard lock(faults_mu_);
  if (!faults_) faults_ = new OdpFaults(*this);
  faults_->push(key, addr, length);
}

void MemoryRegistry::stop_faults() {
  std::lock_guard lock(faults_mu_);
  delete faults_;
  faults_ = nullptr;
}

int MemoryRegistry::reg_implicit(uint32_t pd, uint32_t access, LocalMr& out) {
  std::lock_guard lock(mu_);
  init_slots();
  if (free_slots_.empty()) return ENOMEM;
  uint32_t slot = free_slots_.back();
  // No bytes of its own: its children are counted as they are registered.
  proto::AllocKeyReq kreq{slot, access | proto::kKeyImplicit, 0, pd, 0};
  auto reply = std::make_unique<Packet>();
  int e = control_.call(proto::Op::kAllocKey, kreq, reply.get());
  auto* krep = reply->as<proto::AllocKeyRep>();
  if (e || !krep || krep->key == 0) return e ? e : EPROTO;
  free_slots_.pop_back();
  out = LocalMr{krep->key, access, 0, 0, UINT64_MAX, pd};
  local_[slot] = out;
  range_[slot] = Range{};
  // Its entries are rewritten before any receive is posted: nothing to prepare.
  recv_ready_[slot].store(true, std::memory_order_release);
  // No descriptor: a grant of the implicit key itself is refused (peers reach the children).
  keys_->gen[slot].store(++generation_[slot], std::memory_order_release);
  table_[slot].key_gen.store(0, std::memory_order_release);
  implicit_[slot].store(true, std::memory_order_release);
  implicit_count_.fetch_add(1, std::memory_order_relaxed);
  index_.insert(out.key, slot);
  ++count_;
  return 0;
}

uint32_t MemoryRegistry::fault_in(uint32_t key, uint64_t addr, uint64_t len, int& err) {
  err = 0;
  if (len == 0) len = 1;
  if (addr + len < addr || addr + len > UINT64_MAX - kPage) {
    err = EFAULT;
    return 0;
  }
  const uint64_t start = addr & ~(kPage - 1);
  const uint64_t end = (addr + len + kPage - 1) & ~(kPage - 1);
  std::lock_guard odp(odp_mu_);
  // The implicit MR cannot go while odp_mu_ is held (its deregistration takes it first).
  int slot = index_.find(key);
  if (slot < 0 || !implicit_[slot].load(std::memory_order_acquire) || local_[slot].key != key) {
    err = EINVAL;
    return 0;
  }
  const uint32_t pd = local_[slot].pd, access = local_[slot].access;
  auto& kids = children_[key];
  auto it = kids.upper_bound(start);
  if (it != kids.begin()) {
    --it;
    if (it->second.end >= end) return it->second.key;
  }
  // Only what the application's own mapping allows (see range_usable).
  if (!range_usable(start, end, access & kWrites)) {
    err = EFAULT;
    return 0;
  }
  LocalMr child;
  err = reg(pd, reinterpret_cast<void*>(start), end - start, start, access, child);
  if (err) return 0;
  auto [pos, fresh] = kids.try_emplace(start, Child{end, child.key});
  if (!fresh) {
    // A shorter child starts here: the new one covers it; the old one stays registered (a
    // request may use it) and goes with the implicit MR, kept under a start no range uses.
    uint64_t spare = UINT64_MAX - kPage + 1;
    while (kids.count(spare)) --spare;
    kids.emplace(spare, pos->second);
    pos->second = Child{end, child.key};
  }
  return child.key;
}

bool MemoryRegistry::resolve_implicit(ibv_sge* sge, int n) {
  bool any = false;
  for (int i = 0; i < n; ++i) {
    if (!is_implicit(sge[i].lkey)) continue;
    any = true;
    if (sge[i].length == 0) continue;  // touches nothing
    int err;
    sge[i].lkey = fault_in(sge[i].lkey, sge[i].addr, sge[i].length, err);
  }
  return any;
}

int MemoryRegistry::dereg_children(uint32_t key) {
  auto it = children_.find(key);
  if (it == children_.end()) return 0;
  std::lock_guard lock(mu_);
  for (auto& [start, c] : it->second) dereg_locked(c.key);
  children_.erase(it);
  return 0;
}

// ---- the data path's copies ------------------------------------------------------------------

const ibv_send_wr& resolve_implicit(MemoryRegistry& mem, const ibv_send_wr& wr, OdpSendCopy& copy) {
  if (!mem.has_implicit() || (wr.send_flags & IBV_SEND_INLINE) || wr.num_sge <= 0 ||
      wr.num_sge > static_cast<int>(shm::kMaxSendSge) || !wr.sg_list)
    return wr;
  memcpy(copy.sge, wr.sg_list, sizeof(ibv_sge) * wr.num_sge);
  if (!mem.resolve_implicit(copy.sge, wr.num_sge)) return wr;
  copy.wr = wr;
  copy.wr.sg_list = copy.sge;
  return copy.wr;
}

const ibv_recv_wr& resolve_implicit(MemoryRegistry& mem, const ibv_recv_wr& wr, OdpRecvCopy& copy) {
  if (!mem.has_implicit() || wr.num_sge <= 0 || wr.num_sge > static_cast<int>(shm::kMaxRecvSge) ||
      !wr.sg_list)
    return wr;
  memcpy(copy.sge, wr.sg_list, sizeof(ibv_sge) * wr.num_sge);
  if (!mem.resolve_implicit(copy.sge, wr.num_sge)) return wr;
  copy.wr = wr;
  copy.wr.sg_list = copy.sge;
  return copy.wr;
}

}  // namespace vrdma
