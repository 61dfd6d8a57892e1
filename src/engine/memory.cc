#include "engine/memory.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <memory>

#include "common/mremap_fixed.h"
#include "common/proc_maps.h"
#include "engine/control.h"
#include "engine/mapping_check.h"
#include "engine/thread_stop.h"
#include "engine/write_hold.h"
#include "shm/asym_fence.h"
#include "shm/shared_file.h"

namespace vrdma {

namespace {

constexpr uint64_t kPage = shm::kPage;
std::atomic<uint32_t> g_next_fd_id{shm::kKeyTableFdId + 1};

constexpr uint32_t kRemoteWrites = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC;
// The rights for which a device pins pages writable.
constexpr uint32_t kPinWritable = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                  IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_MW_BIND;

// Whether `maps` (in address order) cover [start, end) without a gap, readable, and writable
// if `writable`.
bool maps_cover(const std::vector<Mapping>& maps, uint64_t start, uint64_t end, bool writable) {
  uint64_t pos = start;
  for (const Mapping& m : maps) {
    if (m.start > pos) return false;
    if (m.perms[0] != 'r' || (writable && !m.writable())) return false;
    pos = std::max(pos, m.end);
    if (pos >= end) return true;
  }
  return pos >= end;
}

bool read_only_class(uint32_t access) {
  return (access & IBV_ACCESS_REMOTE_READ) && !(access & kRemoteWrites);
}

}  // namespace

// A new backing for [start, end), filled and handed to vrdmad but not yet in place: nothing the
// application sees has changed, and abandon() undoes it.
struct Prepared {
  uint64_t start = 0, end = 0;
  int fd = -1;
  uint32_t fd_id = 0;
  void* tmp = nullptr;  // a writable mapping of the new file, made before any write seal
  bool sealed = false;
};

namespace {

// Copies [start, end) into fd. The raw system call on purpose: whole pages are copied, including
// bytes around the registered range that belong to other objects, and a page that is not mapped
// fails with EFAULT instead of a fault.
int copy_into(int fd, uint64_t start, uint64_t end) {
  size_t len = end - start, done = 0;
  while (done < len) {
    ssize_t n = ::syscall(SYS_pwrite64, fd, reinterpret_cast<void*>(start + done), len - done,
                          static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return n < 0 ? errno : EFAULT;
    done += static_cast<size_t>(n);
  }
  return 0;
}

// Copies whole pages of the caller's memory. Under AddressSanitizer the pages hold heap objects
// and redzones of others, which the memcpy interceptor would report: there the copy is a plain
// loop the sanitizer does not check (the volatile read keeps it a loop).
#if defined(__SANITIZE_ADDRESS__)
__attribute__((no_sanitize("address"), noinline)) void copy_pages(void* dst, const void* src,
                                                                  size_t len) {
  auto* d = static_cast<uint64_t*>(dst);
  const auto* s = static_cast<const volatile uint64_t*>(src);
  for (size_t i = 0; i < len / sizeof(uint64_t); ++i) d[i] = s[i];
}
#else
void copy_pages(void* dst, const void* src, size_t len) {
  memcpy(dst, src, len);
}
#endif

}  // namespace

uint32_t allocate_fd_id() {
  return g_next_fd_id.fetch_add(1);
}

MemoryRegistry::~MemoryRegistry() {
  stop_faults();
  if (keys_) ::munmap(keys_, (sizeof(shm::KeyTable) + kPage - 1) & ~(kPage - 1));
  if (keys_fd_ >= 0) ::close(keys_fd_);
  for (auto& [s, b] : backings_) {
    // Backings cut from one adoption share a descriptor: closed by the last.
    if (b.adopted && --adopted_users_[b.fd_id] > 0) continue;
    ::close(b.fd);
  }
}

size_t MemoryRegistry::count() const {
  std::lock_guard lock(mu_);
  return count_;
}

int MemoryRegistry::init() {
  uint64_t size = (sizeof(shm::KeyTable) + kPage - 1) & ~(kPage - 1);
  if (int e = shm::create_sealed("vrdma-keys", size, true, keys_fd_)) return e;
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, keys_fd_, 0);
  if (p == MAP_FAILED) return errno;
  keys_ = static_cast<shm::KeyTable*>(p);
  keys_->magic = shm::kKeyTableMagic;
  keys_->version = shm::kArenaVersion;
  keys_->slots = shm::kMrSlots;
  keys_->heavy_fence = shm::can_issue_heavy_fence() ? 1 : 0;
  // Nobody but this mapping ever writes it: peers get it read-only and cannot reopen it writable.
  if (::fcntl(keys_fd_, F_ADD_SEALS, F_SEAL_FUTURE_WRITE | F_SEAL_SEAL) < 0) return errno;
  proto::PutFdReq req{shm::kKeyTableFdId, static_cast<uint32_t>(proto::FdKind::kKeyTable), size, 0,
                      0};
  return control_.call(proto::Op::kPutFd, req, nullptr, &keys_fd_, 1);
}

// ---- backings ------------------------------------------------------------------------------

namespace {

// Whether [start, end) can be copied (copy_and_swap copies it, on the mover, under the write
// hold): EFAULT when a page is not mapped or not readable. The first write to each new page costs
// a fault (and on a virtual machine that shadows page tables, an exit), so a large range is not
// copied twice to find out: the process's mappings say. A small one is copied by the kernel into
// the new file, which answers as quickly (and also for pages mapped past the end of their file).
// `mapped`: the caller has read the mappings already.
int check_source(int fd, uint64_t start, uint64_t end, bool mapped) {
  constexpr uint64_t kCopyToCheck = 64 * 1024;
  if (end - start <= kCopyToCheck) return copy_into(fd, start, end);
  return mapped || range_readable(start, end) ? 0 : EFAULT;
}

// `mapped`: the caller read the mappings and every page of the range is mapped readable.
int prepare(Control& control, uint64_t start, uint64_t end, bool sealed, Prepared& out,
            bool mapped = false) {
  size_t len = end - start;
  Prepared p;
  p.start = start;
  p.end = end;
  p.sealed = sealed;
  // A file that will be sealed against writes keeps F_SEAL_SEAL open for vrdmad to add it.
  if (int e = shm::create_sealed("vrdma-mr", len, sealed, p.fd)) return e;
  if (int e = check_source(p.fd, start, end, mapped)) {
    ::close(p.fd);
    return e;
  }
  // Populated: page tables made in one system call, not one fault per page in the copy.
  p.tmp = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, p.fd, 0);
  if (p.tmp == MAP_FAILED) {
    int e = errno;
    ::close(p.fd);
    return e;
  }
  p.fd_id = allocate_fd_id();
  proto::PutFdReq req{p.fd_id, static_cast<uint32_t>(proto::FdKind::kMemory), len,
                      sealed ? proto::kSealWrites : 0u, 0};
  if (int e = control.call(proto::Op::kPutFd, req, nullptr, &p.fd, 1)) {
    ::munmap(p.tmp, len);
    ::close(p.fd);
    return e;
  }
  out = p;
  return 0;
}

void abandon(Control& control, Prepared& p) {
  proto::DropFdReq req{p.fd_id};
  control.call(proto::Op::kDropFd, req);
  ::munmap(p.tmp, p.end - p.start);
  ::close(p.fd);
}

// On the mover: the pages of [start, end) are copied to `dst` (a mapping of len bytes) and it
// replaces them, in one mremap. Other threads' writes to the range wait from before the copy
// until the new pages are in place (WriteHold). errno of a failed mremap (dst is then still
// mapped where it was), else 0.
int copy_and_swap(void* dst, uint64_t start, uint64_t end) {
  const size_t len = end - start;
  WriteHold hold;
  hold.hold(start, end, PageMover::waiting_caller());
  copy_pages(dst, reinterpret_cast<void*>(start), len);
  void* r = mremap_fixed(dst, len, len, reinterpret_cast<void*>(start));
  if (r == MAP_FAILED) return errno;  // the old pages stay, and the hold lifts their protection
  hold.release_moved();
  return 0;
}

// On the mover: the pages are copied again (what was written since the first copy) and the new
// file replaces whatever was mapped there.
int commit_job(void* arg) {
  const Prepared p = *static_cast<const Prepared*>(arg);
  return copy_and_swap(p.tmp, p.start, p.end);
}

// On the mover: [start, end) into private anonymous memory, contents kept.
struct PrivatizeJob {
  uint64_t start, end;
};
int privatize_job(void* arg) {
  const PrivatizeJob j = *static_cast<const PrivatizeJob*>(arg);
  size_t len = j.end - j.start;
  void* anon = ::mmap(nullptr, len, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (anon == MAP_FAILED) return errno;
  int e = copy_and_swap(anon, j.start, j.end);
  if (e) ::munmap(anon, len);
  return e;
}

}  // namespace

PageMover::~PageMover() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

namespace {

// Whether [start, end) may hold the calling thread's stack or thread-local storage: it does not
// when the thread runs on the stack its thread attributes describe (not a signal stack, not a
// coroutine's) and the range lies outside that stack and away from its TLS. The bounds are
// looked up once per thread.
bool may_hold_own_stack(uint64_t start, uint64_t end) {
  thread_local uint64_t lo = 0, hi = 0;
  thread_local bool known = false;
  if (!known) {
    pthread_attr_t a;
    if (pthread_getattr_np(pthread_self(), &a) != 0) return true;
    void* base = nullptr;
    size_t size = 0;
    const int e = pthread_attr_getstack(&a, &base, &size);
    pthread_attr_destroy(&a);
    if (e != 0) return true;
    lo = reinterpret_cast<uint64_t>(base);
    hi = lo + size;
    known = true;
  }
  const auto sp = reinterpret_cast<uint64_t>(__builtin_frame_address(0));
  if (sp < lo || sp >= hi) return true;
  if (start < hi && end > lo) return true;
  // Nor the thread's own static TLS (errno among it), which for the main thread lies outside its
  // stack: a write there while the range is held would wait for this very thread.
  constexpr uint64_t kTlsMargin = 64 * 1024;
  const auto tls = reinterpret_cast<uint64_t>(&known);
  return start < tls + kTlsMargin && end + kTlsMargin > tls;
}

}  // namespace

int PageMover::run(int (*fn)(void*), void* arg, uint64_t start, uint64_t end) {
  if (!may_hold_own_stack(start, end)) {
    // A signal handler of this thread touching the range would wait for a hold this thread
    // lifts: none runs until the pages are in place.
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    const int r = fn(arg);
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    return r;
  }
  // The caller waits for the mover without taking signals: a handler of the application's
  // could write into the range, and a stop of the other threads spares this one.
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &old);
  std::unique_lock lock(mu_);
  // The mover takes no signals meant for the application: it starts with the mask above.
  if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
  fn_ = fn;
  arg_ = arg;
  done_ = false;
  caller_ = static_cast<pid_t>(::syscall(SYS_gettid));
  cv_.notify_all();
  cv_.wait(lock, [&] { return done_; });
  const int result = result_;
  lock.unlock();
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  return result;
}

namespace {
thread_local pid_t t_waiting_caller = 0;
}  // namespace

pid_t PageMover::waiting_caller() {
  return t_waiting_caller;
}

void PageMover::loop() {
  ThreadStop::Exempt exempt;  // it is the thread that stops the others
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || fn_ != nullptr; });
    if (stop_) return;
    int (*fn)(void*) = fn_;
    void* arg = arg_;
    fn_ = nullptr;
    t_waiting_caller = caller_;
    result_ = fn(arg);
    t_waiting_caller = 0;
    done_ = true;
    cv_.notify_all();
  }
}

int MemoryRegistry::commit(Prepared& p) {
  return mover_.run(commit_job, &p, p.start, p.end);
}

void MemoryRegistry::drop_fd(const Backing& b) {
  if (b.adopted) {
    auto u = adopted_users_.find(b.fd_id);
    if (u != adopted_users_.end() && --u->second > 0) return;  // another backing uses it
    if (u != adopted_users_.end()) adopted_users_.erase(u);
  }
  proto::DropFdReq req{b.fd_id};
  control_.post(proto::Op::kDropFd, req);
  ::close(b.fd);
}

// Moves the pages of one backing back to private anonymous memory and forgets it: whoever
// still maps the file maps pages the process no longer uses. Pages the application unmapped
// or replaced since are left as they are: they are no longer the file's.
void MemoryRegistry::privatize(BackingMap::iterator it) {
  PrivatizeJob job{it->first, it->second.end};
  // A System V segment's pages stay the segment's.
  if (!it->second.adopted && range_maps_file(job.start, job.end, it->second.fd))
    mover_.run(privatize_job, &job, job.start, job.end);
  drop_fd(it->second);
  backings_.erase(it);
}

// KeyTable::moves is odd from before pages of registered memory are copied to another file
// until the MRs over them are published again. Nothing between asks vrdmad anything: its router
// may wait for the end of a move (it places data again that went to the old file meanwhile).
void MemoryRegistry::begin_move() {
  keys_->moves.fetch_add(1, std::memory_order_seq_cst);
  // Readers that skip their own fence (settle.h) see the increment before the copy reads the
  // pages, or the copy sees what they placed.
  if (keys_->heavy_fence) shm::heavy_fence();
}
void MemoryRegistry::end_move() {
  keys_->moves.fetch_add(1, std::memory_order_seq_cst);
}

// The same pages in a new file (write-sealed or not): the old file stops aliasing them.
int MemoryRegistry::replace(BackingMap::iterator it, bool sealed) {
  if (it->second.adopted) return 0;  // never moves, never sealed (a segment cannot be)
  Prepared p;
  if (int e = prepare(control_, it->first, it->second.end, sealed, p)) return e;
  begin_move();
  if (int e = commit(p)) {
    end_move();
    abandon(control_, p);
    return e;
  }
  Backing old = it->second;
  it->second = Backing{old.end, p.fd, p.fd_id, old.refs, sealed, old.write_class};
  republish_over(it->first, old.end);
  end_move();
  drop_fd(old);
  return 0;
}

// A backing that straddles x becomes two, cut at x.
int MemoryRegistry::split_at(uint64_t x) {
  auto it = backings_.upper_bound(x);
  if (it == backings_.begin()) return 0;
  --it;
  if (!(it->first < x && x < it->second.end)) return 0;
  uint64_t start = it->first, end = it->second.end;
  if (it->second.adopted) {
    // The same file on both sides of x: nothing moves.
    Backing right = it->second;
    right.offset += x - start;
    it->second.end = x;
    backings_.emplace(x, right);
    ++adopted_users_[right.fd_id];
    republish_over(start, end);
    return 0;
  }
  Prepared left, right;
  if (int e = prepare(control_, start, x, it->second.sealed, left)) return e;
  if (int e = prepare(control_, x, end, it->second.sealed, right)) {
    abandon(control_, left);
    return e;
  }
  begin_move();
  if (int e = commit(left)) {
    end_move();
    abandon(control_, left);
    abandon(control_, right);
    return e;
  }
  Backing old = it->second;
  it->second = Backing{x, left.fd, left.fd_id, old.refs, old.sealed, old.write_class};
  if (int e = commit(right)) {
    // The left part moved, the right one still lives in the old file: keep it there.
    backings_.emplace(x, Backing{end, old.fd, old.fd_id, old.refs, old.sealed, old.write_class,
                                 old.offset + (x - start)});
    republish_over(start, end);
    end_move();
    abandon(control_, right);
    return e;
  }
  backings_.emplace(x, Backing{end, right.fd, right.fd_id, old.refs, old.sealed, old.write_class});
  republish_over(start, end);
  end_move();
  drop_fd(old);
  return 0;
}

int MemoryRegistry::segments(uint64_t start, uint64_t end, std::vector<shm::MrSegment>& out) const {
  out.clear();
  uint64_t pos = start;
  auto it = backings_.upper_bound(pos);
  if (it != backings_.begin()) --it;
  while (pos < end) {
    if (it == backings_.end() || it->first > pos || it->second.end <= pos) {
      if (it != backings_.end() && it->second.end <= pos) {
        ++it;
        continue;
      }
      return EFAULT;  // a hole: not covered
    }
    uint64_t seg_end = std::min(end, it->second.end);
    out.push_back({it->second.fd_id, 0, it->second.offset + (pos - it->first), seg_end - pos});
    pos = seg_end;
    ++it;
  }
  return 0;
}

// How many segments a split at x adds to the MR whose range is [s, e) (0 or 1).
int MemoryRegistry::extra_segments_if_split(uint64_t x) const {
  auto it = backings_.upper_bound(x);
  if (it == backings_.begin()) return 0;
  --it;
  return it->first < x && x < it->second.end ? 1 : 0;
}

int MemoryRegistry::grant(uint32_t key, uint32_t access, uint64_t addr, uint64_t length,
                          shm::MrGrant& out) {
  constexpr uint32_t kRemote =
      IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC;
  out = shm::MrGrant{};
  if (is_implicit(key)) {
    // As vrdmad grants a range of an implicit MR: a registration of the process's with the
    // implicit MR's rights and PD that covers it.
    if (!(access & kRemote)) return EACCES;
    int err = 0;
    const uint32_t child = fault_in(key, addr, length ? length : 1, err);
    if (!child) return err ? err : EACCES;
    key = child;
    out.implicit = true;
  }
  std::lock_guard lock(mu_);
  // An MR by its key; a window by its family's (its key changes with every bind).
  int slot = index_.find(key);
  if (slot < 0)
    if (auto w = window_slot_.find(key & ~0xFFu); w != window_slot_.end())
      slot = static_cast<int>(w->second);
  if (slot < 0 || local_[slot].key != key) return ENOENT;
  const LocalMr& m = local_[slot];
  const shm::MrEntry& e = table_[slot];
  const uint64_t kg = e.key_gen.load(std::memory_order_acquire);
  if (static_cast<uint32_t>(kg) != key || e.nseg == 0 || e.nseg > shm::kMaxMrSegments)
    return ENOENT;
  // A window's rights are those of its binding; an MR's, its own.
  const bool window = windows_.count(static_cast<uint32_t>(slot)) != 0;
  const uint32_t rights = window ? e.access & kRemote : m.access;
  if (access & kRemote) {
    if ((rights & access) != access) return EACCES;
    out.writable = (rights & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) != 0;
  } else {
    // The process's own use (what it sends, where READ data and receives land).
    if (window || ((access & IBV_ACCESS_LOCAL_WRITE) && !(m.access & IBV_ACCESS_LOCAL_WRITE)))
      return EACCES;
    out.writable = (m.access & IBV_ACCESS_LOCAL_WRITE) != 0;
  }
  out.slot = static_cast<uint32_t>(slot);
  out.gen = static_cast<uint32_t>(kg >> 32);
  out.access = rights;
  out.pd = m.pd;
  out.nseg = e.nseg;
  out.iova = e.iova;
  out.length = e.length;
  out.va_offset = e.va - e.map_start;
  out.map_length = e.map_length;
  for (uint32_t i = 0; i < e.nseg; ++i) {
    const shm::MrSegment& g = e.seg[i];
    out.seg[i] = shm::MrGrant::Seg{g.fd_id, g.fd_offset, g.length};
    out.fds[i] = control_.dup_handed(g.fd_id);
    if (out.fds[i] < 0) {
      for (uint32_t j = 0; j < i; ++j) {
        ::close(out.fds[j]);
        out.fds[j] = -1;
      }
      return ENOENT;
    }
  }
  return 0;
}

uint8_t* MemoryRegistry::own_mapping(uint32_t fd_id, uint64_t& size) const {
  std::lock_guard lock(mu_);
  uint8_t* base = nullptr;
  size = 0;
  // Backings cut from one adoption share the id: the file as far as any of them maps it.
  for (const auto& [start, b] : backings_) {
    if (b.fd_id != fd_id) continue;
    size = std::max(size, b.offset + (b.end - start));
    base = reinterpret_cast<uint8_t*>(start - b.offset);
  }
  return base;
}

// The descriptor vrdmad reads for the MR in `slot`, from its backings, under a new generation:
// peers holding the old one see at once that it changed.
void MemoryRegistry::publish(uint32_t slot) {
  const LocalMr& m = local_[slot];
  const Range& r = range_[slot];
  std::vector<shm::MrSegment> segs;
  shm::MrEntry& e = table_[slot];
  uint32_t gen = ++generation_[slot];
  keys_->gen[slot].store(gen, std::memory_order_release);
  if (segments(r.start, r.end, segs) != 0 || segs.size() > shm::kMaxMrSegments) {
    e.key_gen.store(0, std::memory_order_release);  // cannot be described: grants fail
    return;
  }
  e.access = m.access;
  e.nseg = static_cast<uint32_t>(segs.size());
  e.iova = m.iova;
  e.length = m.length;
  e.va = m.addr;
  e.map_start = r.start;
  e.map_length = r.end - r.start;
  for (size_t i = 0; i < segs.size(); ++i) e.seg[i] = segs[i];
  e.key_gen.store(uint64_t(m.key) | uint64_t(gen) << 32, std::memory_order_release);
}

void MemoryRegistry::republish_over(uint64_t start, uint64_t end) {
  for (uint32_t s = 1; s < shm::kMrSlots; ++s) {
    if (!local_[s].key || range_[s].end <= start || range_[s].start >= end) continue;
    publish(s);
    recv_ready_[s].store(false, std::memory_order_release);  // look again at its backings
  }
}

// ---- registration --------------------------------------------------------------------------

namespace {

// The default huge page size (/proc/meminfo's Hugepagesize), 0 when unknown.
uint64_t huge_page_size() {
  static const uint64_t size = [] {
    uint64_t kb = 0;
    if (FILE* f = std::fopen("/proc/meminfo", "re")) {
      char line[128];
      while (std::fgets(line, sizeof(line), f))
        if (std::sscanf(line, "Hugepagesize: %" SCNu64 " kB", &kb) == 1) break;
      std::fclose(f);
    }
    return kb * 1024;
  }();
  return size;
}

}  // namespace

// Huge pages move whole (the kernel unmaps and remaps them only whole): a range that starts or
// ends inside one is widened to all of it. The backing is made of ordinary pages.
void MemoryRegistry::widen_to_huge_pages(const std::vector<Mapping>& maps, uint64_t& start,
                                         uint64_t& end) {
  const uint64_t h = huge_page_size();
  if (!h) return;
  for (const Mapping& m : maps) {
    if (!m.huge_pages()) continue;
    if (m.start <= start && start < m.end) start = std::max(m.start, start & ~(h - 1));
    if (m.start < end && end <= m.end) end = std::min(m.end, (end + h - 1) & ~(h - 1));
  }
}

int MemoryRegistry::reg(uint32_t pd, void* addr, size_t length, uint64_t iova, uint32_t access,
                        LocalMr& out, uint32_t replaces) {
  if (length == 0 || !addr) return EINVAL;
  uint64_t a = reinterpret_cast<uint64_t>(addr);
  uint64_t start = a & ~(kPage - 1);
  uint64_t end = (a + length + kPage - 1) & ~(kPage - 1);
  if (end <= start) return EINVAL;
  std::lock_guard lock(mu_);
  int old_slot = -1;
  if (replaces) {
    old_slot = index_.find(replaces);
    if (old_slot < 0 || local_[old_slot].key != replaces) return EINVAL;
    // An implicit MR keeps its whole address space (no rereg of its translation).
    if (implicit_[old_slot].load(std::memory_order_relaxed)) return EINVAL;
  }
  init_slots();
  if (free_slots_.empty()) return ENOMEM;
  // The mappings under the range, read once: every page must be mapped readable, and writable
  // when the access lets anyone write it (a device could not pin it otherwise: EFAULT).
  const std::vector<Mapping> maps = mappings_over("/proc/self/maps", start, end);
  if (!maps_cover(maps, start, end, access & kPinWritable)) return EFAULT;
  widen_to_huge_pages(maps, start, end);

  // Every MR must stay within kMaxMrSegments once the backings are cut at start and end.
  int cut_start = extra_segments_if_split(start), cut_end = extra_segments_if_split(end);
  {
    uint32_t own = 0;
    uint64_t pos = start;
    auto it = backings_.upper_bound(pos);
    if (it != backings_.begin()) --it;
    while (pos < end) {
      if (it != backings_.end() && it->second.end <= pos) {
        ++it;
        continue;
      }
      ++own;
      if (it != backings_.end() && it->first <= pos) {
        pos = std::min(end, it->second.end);
        ++it;
      } else {
        pos = (it != backings_.end() && it->first < end) ? it->first : end;
      }
    }
    // A segment inside adds its own backing and may cut a hole in two.
    for (const Mapping& m : maps)
      if (m.sysv_segment()) own += 2;
    if (own > shm::kMaxMrSegments) return ENOMEM;
    std::vector<shm::MrSegment> segs;
    for (uint32_t s = 1; s < shm::kMrSlots; ++s) {
      if (!local_[s].key) continue;
      const Range& r = range_[s];
      int add = (cut_start && r.start < start && start < r.end ? 1 : 0) +
                (cut_end && r.start < end && end < r.end ? 1 : 0);
      if (!add) continue;
      if (segments(r.start, r.end, segs) != 0 || segs.size() + add > shm::kMaxMrSegments)
        return ENOMEM;
    }
  }
  if (int e = split_at(start)) return e;
  if (int e = split_at(end)) return e;

  // Existing backings inside: the class this MR needs.
  const bool writes = access & kRemoteWrites;
  const bool ro = read_only_class(access);
  for (auto it = backings_.lower_bound(start); it != backings_.end() && it->first < end; ++it) {
    Backing& b = it->second;
    if (writes) {
      b.write_class = true;
      if (b.sealed)
        if (int e = replace(it, false)) return e;
    } else if (ro && !b.sealed && !b.write_class) {
      if (int e = replace(it, true)) return e;
    }
  }
  // Holes over System V segments get the segment's own file; the others backings of their own.
  std::vector<uint64_t> made;
  if (int e = adopt_holes(maps, start, end, writes, made)) {
    for (uint64_t s : made) privatize(backings_.find(s));
    return e;
  }
  // (maps_cover read the mappings of these pages: prepare need not read them again.)
  for (uint64_t pos = start, gap_end; next_hole(pos, end, gap_end); pos = gap_end) {
    Prepared p;
    int e = prepare(control_, pos, gap_end, ro, p, true);
    if (!e && (e = commit(p)) != 0) abandon(control_, p);
    if (e) {
      for (uint64_t s : made) privatize(backings_.find(s));
      return e;
    }
    backings_.emplace(pos, Backing{gap_end, p.fd, p.fd_id, 0, ro, writes});
    made.push_back(pos);
  }

  uint32_t slot = free_slots_.back();
  proto::AllocKeyReq kreq{slot, access, length, pd, replaces};
  auto reply = std::make_unique<Packet>();
  int e = control_.call(proto::Op::kAllocKey, kreq, reply.get());
  auto* krep = reply->as<proto::AllocKeyRep>();
  if (e || !krep || krep->key == 0) {
    for (uint64_t s : made) privatize(backings_.find(s));
    return e ? e : EPROTO;
  }
  free_slots_.pop_back();
  for (auto it = backings_.lower_bound(start); it != backings_.end() && it->first < end; ++it)
    ++it->second.refs;
  // The registration replaced: its slot dies (peers see a new generation and ask again, and
  // the daemon now answers for the new slot), its pages are revoked as by dereg.
  if (old_slot >= 0) retire(static_cast<uint32_t>(old_slot));
  out = LocalMr{krep->key, access, iova, a, length, pd};
  local_[slot] = out;
  range_[slot] = Range{start, end};
  recv_ready_[slot].store(false, std::memory_order_release);
  publish(slot);
  index_.insert(out.key, slot);
  ++count_;
  return 0;
}

int MemoryRegistry::dereg(uint32_t key) {
  if (has_implicit() && is_implicit(key)) {
    std::lock_guard odp(odp_mu_);
    if (int e = dereg_children(key)) return e;
  }
  std::lock_guard lock(mu_);
  return dereg_locked(key);
}

int MemoryRegistry::dereg_locked(uint32_t key) {
  int found = index_.find(key);
  if (found < 0 || local_[found].key != key) return EINVAL;
  retire(static_cast<uint32_t>(found));
  proto::FreeKeyReq req{key};
  control_.post(proto::Op::kFreeKey, req);
  return 0;
}

void MemoryRegistry::init_slots() {
  if (slots_init_) return;
  for (uint32_t i = shm::kMrSlots; i-- > 1;) free_slots_.push_back(i);
  slots_init_ = true;
}

void MemoryRegistry::retire(uint32_t slot) {
  // Windows bound to the MR lose their binding with it.
  if (!windows_.empty()) unbind_windows_of(local_[slot].key);
  if (implicit_[slot].exchange(false, std::memory_order_acq_rel))
    implicit_count_.fetch_sub(1, std::memory_order_relaxed);
  // The key dies first: a peer's next access sees a new generation and asks again, in vain.
  keys_->gen[slot].store(++generation_[slot], std::memory_order_release);
  table_[slot].key_gen.store(0, std::memory_order_release);
  index_.erase(local_[slot].key);
  Range r = range_[slot];
  local_[slot] = LocalMr{};
  range_[slot] = Range{};
  recv_ready_[slot].store(false, std::memory_order_release);
  for (auto it = backings_.lower_bound(r.start); it != backings_.end() && it->first < r.end; ++it)
    if (it->second.refs > 0) --it->second.refs;
  // Revoke: pages nobody else registered go back to private memory; pages other MRs still use
  // move to a new file.
  for (auto it = backings_.lower_bound(r.start); it != backings_.end() && it->first < r.end;) {
    auto next = std::next(it);
    if (it->second.refs == 0)
      privatize(it);
    else
      replace(it, it->second.sealed);
    it = next;
  }
  free_slots_.push_back(slot);
  --count_;
}

// The first part of [pos, limit) that no backing covers: pos moves to its start and gap_end to
// its end. False when none is left.
bool MemoryRegistry::next_hole(uint64_t& pos, uint64_t limit, uint64_t& gap_end) const {
  while (pos < limit) {
    auto it = backings_.upper_bound(pos);
    if (it != backings_.begin() && std::prev(it)->second.end > pos) {
      pos = std::prev(it)->second.end;  // covered up to there (the next may start right at it)
      continue;
    }
    gap_end = (it != backings_.end() && it->first < limit) ? it->first : limit;
    return true;
  }
  return false;
}

// The parts of [start, end) that no backing covers and that map a System V segment get the
// segment's file as their backing (its pages stay where they are). A segment vrdmad does not
// take (EOPNOTSUPP) is left to be moved as other memory is. 0 or an errno.
int MemoryRegistry::adopt_holes(const std::vector<Mapping>& maps, uint64_t start, uint64_t end,
                                bool writes, std::vector<uint64_t>& made) {
  for (const Mapping& m : maps) {
    if (!m.sysv_segment()) continue;
    const uint64_t lo = std::max(start, m.start), hi = std::min(end, m.end);
    for (uint64_t pos = lo, gap_end; next_hole(pos, hi, gap_end); pos = gap_end) {
      proto::AdoptMemoryReq req{allocate_fd_id(), 0, m.start, m.end};
      auto reply = std::make_unique<Packet>();
      int e = control_.call(proto::Op::kAdoptMemory, req, reply.get());
      const auto* rep = reply->as<proto::AdoptMemoryRep>();
      if (e == EOPNOTSUPP) break;
      if (!e && (!rep || reply->nfds != 1)) {
        reply->close_fds();
        proto::DropFdReq drop{req.fd_id};
        control_.call(proto::Op::kDropFd, drop);
        e = EPROTO;
      }
      if (e) return e;
      const int fd = reply->fds[0];
      control_.note_handed(req.fd_id, fd);
      backings_.emplace(pos, Backing{gap_end, fd, req.fd_id, 0, false, writes,
                                     rep->offset + (pos - m.start), true});
      adopted_users_[req.fd_id] = 1;
      made.push_back(pos);
    }
  }
  return 0;
}

// The first receive posted into the MR of `key`: its pages must take writes from the sender.
void MemoryRegistry::make_receivable(uint32_t key) {
  std::lock_guard lock(mu_);
  int slot = index_.find(key);
  if (slot < 0 || local_[slot].key != key) return;
  Range r = range_[slot];
  for (auto it = backings_.lower_bound(r.start); it != backings_.end() && it->first < r.end; ++it) {
    it->second.write_class = true;
    if (it->second.sealed && replace(it, false) != 0) return;  // retried at the next post
  }
  recv_ready_[slot].store(true, std::memory_order_release);
}

}  // namespace vrdma
