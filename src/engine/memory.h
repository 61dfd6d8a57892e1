// Registered memory: the pages of every registered range are moved into memfd backings mapped
// at the same address (contents kept), so that vrdmad can grant them to peers and its router can
// map them.
//
// What a grant exposes is whole backings, so backings follow MR boundaries: a registration
// splits the backings that straddle its ends, so that every MR is made of whole backings and a
// grant of one MR reaches its own pages and nothing beyond them (a page is the granularity: the
// bytes of the MR's first and last pages outside the MR go with them). Overlapping
// registrations share the backings of their common pages.
//
// A backing is sealed against new writable mappings (vrdmad seals it after keeping its own
// writable mapping) when the MRs over it allow remote reads and no remote writes and no receive
// was ever posted into it: a peer granted it read-only cannot reopen it for writing. When a
// receive is first posted into such an MR, or an MR allowing remote writes comes over it, the
// pages move to an unsealed backing.
//
// Deregistration revokes: the MR's key and generation die at once, and pages no other MR uses
// move back to private anonymous memory (pages other MRs still use move to a new backing), so a
// peer's old mapping no longer aliases the owner's memory. Moves copy the pages; a write made to
// them by another thread or a peer while they move is lost.
//
// Pages of a System V shared memory segment never move: the program shares them with other
// processes, which must go on seeing them. vrdmad opens the segment's file (AdoptMemory) and it
// is the backing; a grant of it reaches the whole segment, and deregistration cannot take back
// a mapping a peer made of it (docs/design.md, "Registered memory").
#pragma once

#include <sys/types.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "common/proc_maps.h"
#include "shm/key_index.h"
#include "shm/layout.h"
#include "shm/peer.h"

namespace vrdma {

class Control;

// Moving pages (copy, then mremap over them) must happen while nothing writes them. The pages of
// a registered range may hold the registering thread's own stack (a buffer on the stack is a
// legal MR): its frames below the buffer change with every call, including the mremap call
// itself. So moves run on a thread of their own while the caller waits in a system call, its
// stack still.
class PageMover {
 public:
  ~PageMover();
  // Runs fn(arg), which moves the pages of [start, end), and returns its result: on the calling
  // thread (its signals blocked meanwhile) when the range cannot hold that thread's stack, else
  // on the mover's thread. fn must copy what it needs out of *arg before it copies pages, and
  // write nothing into *arg until they are in place.
  int run(int (*fn)(void*), void* arg, uint64_t start, uint64_t end);
  // On the mover's thread, during fn: the thread waiting for it (0 when fn runs on the caller).
  static pid_t waiting_caller();

 private:
  void loop();
  std::mutex mu_;
  std::condition_variable cv_;
  std::thread thread_;
  int (*fn_)(void*) = nullptr;
  void* arg_ = nullptr;
  int result_ = 0;
  pid_t caller_ = 0;
  bool done_ = false;
  bool stop_ = false;
};

// A registered region as the owning process uses it (private copy of the shared MrEntry, so
// local checks never read memory anyone else can write).
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
  ~MemoryRegistry();

  // Creates the key table and hands it to vrdmad. 0 or an errno.
  int init();

  // Makes [addr, addr+length) shared and publishes an MR. Returns 0 or errno. With `replaces`
  // (ibv_rereg_mr), the new registration takes over that key and the old one is gone; on
  // failure the old one stays as it was.
  int reg(uint32_t pd, void* addr, size_t length, uint64_t iova, uint32_t access, LocalMr& out,
          uint32_t replaces = 0);
  int dereg(uint32_t key);

  // Data path: finds the local MR for a key, or nullptr. Lock-free.
  const LocalMr* find(uint32_t key) const {
    int slot = index_.find(key);
    if (slot < 0) return nullptr;
    const LocalMr& m = local_[slot];
    return m.key == key ? &m : nullptr;
  }

  // Before a receive whose scatter list names `sge` is posted: the memory it points into must
  // be writable for the sender that will fill it (moves it off a write-sealed backing, once).
  // Data path (one lookup per entry) unless a move is needed.
  void prepare_receive(const ibv_sge* sge, int n) {
    for (int i = 0; i < n; ++i) {
      int slot = index_.find(sge[i].lkey);
      if (slot >= 0 && !recv_ready_[slot].load(std::memory_order_acquire))
        make_receivable(sge[i].lkey);
    }
  }

  size_t count() const;

  // Implicit on-demand paging (implicit_odp.cc): one MR over the whole address space, whose key
  // is a real key of vrdmad with the MR's rights and protection domain but no pages. A range
  // a request names under it is registered on demand as a child MR (page-aligned, with the
  // implicit MR's rights and PD, cached) and the request goes on under the child's key: the
  // child is what peers, vrdmad and the router see.
  int reg_implicit(uint32_t pd, uint32_t access, LocalMr& out);
  // Data path: whether any implicit MR exists (one relaxed load).
  bool has_implicit() const { return implicit_count_.load(std::memory_order_relaxed) != 0; }
  // Whether `key` is an implicit MR's. Lock-free.
  bool is_implicit(uint32_t key) const {
    int slot = index_.find(key);
    return slot >= 0 && implicit_[slot].load(std::memory_order_acquire);
  }
  // The key of a child of the implicit MR `key` that covers [addr, addr+len), registered now
  // if none does; 0 (errno in `err`) when the range cannot be registered (not mapped, no slot).
  uint32_t fault_in(uint32_t key, uint64_t addr, uint64_t len, int& err);
  // Rewrites the entries that name an implicit MR to the key of a child covering them; an
  // entry whose range cannot be made accessible gets key 0 (no MR: an access error when it is
  // used). Whether any entry named an implicit MR.
  bool resolve_implicit(ibv_sge* sge, int n);
  // vrdmad says a peer wants [addr, addr+length) of the implicit MR `key`: fault_in() on the
  // registry's fault thread (the caller may be inside a control call). Bounded queue: a request
  // that does not fit is dropped (the peer asks again).
  void request_fault(uint32_t key, uint64_t addr, uint64_t length);

  // The process's own direct connections (engine/self_source.h) reach its memory as a peer
  // would, through its backings: the MR (or bound window) `key` described as vrdmad describes
  // a grant, for `access` (remote rights, or LOCAL_WRITE for a receive buffer), with new
  // descriptors of its backings (the caller closes them). An implicit ODP MR's key gives a
  // registration covering [addr, addr+length), registered now if none does. 0 or an errno.
  int grant(uint32_t key, uint32_t access, uint64_t addr, uint64_t length, shm::MrGrant& out);
  // The process's own mapping of backing `fd_id` (the pages where they are used), as a base
  // that file offset 0 would have, and the file size it covers; nullptr when none.
  uint8_t* own_mapping(uint32_t fd_id, uint64_t& size) const;

  // Memory windows (window.cc). A window takes an MR slot of its own, whose key family vrdmad
  // reserves (the key with its low byte 0 and the 255 variants a bind may pick); a bound
  // window is published as an MR over the backings of its MR that hold its range, with its own
  // rights and generation, so peers and the router reach it as they reach an MR. Binding and
  // invalidating bump the generation: a peer's next access asks vrdmad again and is refused.
  // 0 or an errno.
  int alloc_window(uint32_t pd, uint32_t type, uint32_t& key, uint32_t& slot);
  int free_window(uint32_t slot);
  // Binds the window in `slot` (of type `type`, posted on a QP of `qp_pd`) as `new_key` to
  // [addr, addr+length) of the MR `mr_key` with `access` (IBV_ACCESS_REMOTE_*, ZERO_BASED).
  // Length 0 leaves it unbound under the new key. EINVAL: bad key, range or rights.
  int bind_window(uint32_t slot, uint32_t type, uint32_t qp_pd, uint32_t new_key, uint32_t mr_key,
                  uint64_t addr, uint64_t length, uint32_t access);
  // Invalidates the type-2 window whose current key is `key` (LOCAL_INV, SEND_WITH_INV).
  // EINVAL when no such window of `pd` (0: any) is bound or free under that key.
  int invalidate_window(uint32_t key, uint32_t pd);

 private:
  struct Window {
    uint32_t base = 0;  // the key vrdmad allocated (low byte 0)
    uint32_t key = 0;   // the current key (base | a low byte)
    uint32_t type = 0;  // IBV_MW_TYPE_1 or IBV_MW_TYPE_2
    uint32_t pd = 0;
    uint32_t mr_key = 0;  // the MR it is bound to, 0 when not bound
  };
  void unbind_window(uint32_t slot);        // requires mu_
  void unbind_windows_of(uint32_t mr_key);  // requires mu_

  struct Backing {
    uint64_t end;
    int fd;
    uint32_t fd_id;
    uint32_t refs;
    bool sealed;          // refuses new writable mappings
    bool write_class;     // remote writes or receives reach it: never to be sealed
    uint64_t offset = 0;  // in the file, of the backing's first page
    // A System V segment's own file (vrdmad opened it: AdoptMemory): the pages never move, and
    // backings cut from one adoption share its descriptor and id (adopted_users_ counts them).
    bool adopted = false;
  };
  struct Range {
    uint64_t start = 0, end = 0;  // page-aligned, of a live MR
  };
  using BackingMap = std::map<uint64_t, Backing>;

  static void widen_to_huge_pages(const std::vector<Mapping>& maps, uint64_t& start,
                                  uint64_t& end);
  int split_at(uint64_t x);                                                // requires mu_
  bool next_hole(uint64_t& pos, uint64_t limit, uint64_t& gap_end) const;  // requires mu_
  int adopt_holes(const std::vector<Mapping>& maps, uint64_t start, uint64_t end, bool writes,
                  std::vector<uint64_t>& made);       // requires mu_
  int replace(BackingMap::iterator it, bool sealed);  // requires mu_
  void begin_move();                                  // requires mu_
  void end_move();                                    // requires mu_
  void privatize(BackingMap::iterator it);            // requires mu_
  void drop_fd(const Backing& b);                     // requires mu_
  int segments(uint64_t start, uint64_t end, std::vector<shm::MrSegment>& out) const;
  int extra_segments_if_split(uint64_t x) const;  // requires mu_
  void publish(uint32_t slot);  // requires mu_: descriptor from the backings, new gen
  void republish_over(uint64_t start, uint64_t end);  // requires mu_
  void make_receivable(uint32_t key);
  void retire(uint32_t slot);  // requires mu_: the slot's MR is gone (its key is not freed)

  int commit(struct Prepared& p);    // requires mu_
  int dereg_locked(uint32_t key);    // requires mu_
  int dereg_children(uint32_t key);  // requires odp_mu_, not mu_

  // Implicit MRs: their children by start address, per implicit key.
  struct Child {
    uint64_t end;
    uint32_t key;
  };
  std::mutex odp_mu_;  // taken before mu_
  std::map<uint32_t, std::map<uint64_t, Child>> children_;
  std::atomic<bool> implicit_[shm::kMrSlots] = {};
  std::atomic<uint32_t> implicit_count_{0};
  class OdpFaults* faults_ = nullptr;  // the fault thread, made at the first request
  std::mutex faults_mu_;
  void stop_faults();

  Control& control_;
  shm::MrEntry* table_;
  PageMover mover_;
  shm::KeyTable* keys_ = nullptr;
  int keys_fd_ = -1;
  mutable std::mutex mu_;
  BackingMap backings_;                         // page-aligned start -> backing
  std::map<uint32_t, uint32_t> adopted_users_;  // adopted fd id -> backings that use it
  shm::KeyIndex index_;
  LocalMr local_[shm::kMrSlots];
  Range range_[shm::kMrSlots];
  std::atomic<bool> recv_ready_[shm::kMrSlots] = {};
  uint32_t generation_[shm::kMrSlots] = {};
  std::vector<uint32_t> free_slots_;
  std::map<uint32_t, Window> windows_;        // by slot
  std::map<uint32_t, uint32_t> window_slot_;  // base key -> slot
  bool slots_init_ = false;
  void init_slots();  // requires mu_
  size_t count_ = 0;
};

// A memory window as the application holds it: the ibv_mw handed out, and its slot. A bind
// work request names the window by its ibv_mw pointer.
struct Mw {
  ibv_mw ibv;
  uint32_t slot;
};
// In a BIND_MW request's send_flags: the bind of a type-1 window (ibv_bind_mw), which
// ibv_post_send's own BIND_MW (type 2 only) cannot be.
inline constexpr unsigned kSendBindType1 = 1u << 30;

// File descriptor ids the client hands to vrdmad (0 is the arena, 1 the key table).
uint32_t allocate_fd_id();

}  // namespace vrdma
