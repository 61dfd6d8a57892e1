// What one process maps of another client (a "peer"): the QP and SRQ objects it may reach, the
// key table, and the registered memory vrdmad granted it, so that the initiator of an operation
// reaches the target's queues and memory with plain loads and stores. vrdmad's router uses the
// same class, with a source that trusts it with the client's arena and every backing.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "shm/key_index.h"
#include "shm/layout.h"
#include "shm/rings.h"

namespace vrdma::shm {

// What vrdmad says of an MR it grants: where it lies in the owner's address space, its
// backings, and whether they come writable.
struct MrGrant {
  uint32_t slot = 0;  // the owner's MR slot, whose generation the key table holds
  uint32_t gen = 0;   // the generation this description is valid for
  uint32_t access = 0;
  uint32_t pd = 0;
  uint32_t nseg = 0;
  bool writable = false;
  bool implicit = false;  // through an implicit ODP MR's key: other ranges, other grants
  uint64_t iova = 0;
  uint64_t length = 0;
  uint64_t va_offset = 0;  // va - map_start
  uint64_t map_length = 0;
  struct Seg {
    uint32_t fd_id;
    uint64_t offset;
    uint64_t length;
  } seg[kMaxMrSegments] = {};
  int fds[kMaxMrSegments] = {-1, -1, -1, -1, -1, -1, -1, -1};  // the caller closes them
};

// Where a peer's descriptors come from: vrdmad (GetFd, GetMr) for the library, the daemon's own
// tables for its router.
class FdSource {
 public:
  virtual ~FdSource() = default;
  // A new descriptor (the caller owns it) for the owner's fd `fd_id`, asked for on behalf of
  // the caller's QP `via_qpn` (the connection that justifies it), or a positive errno.
  virtual int fetch_fd(uint32_t owner, uint32_t fd_id, uint32_t via_qpn, int& fd) = 0;
  // The owner's MR `key` and descriptors of its backings, for `access` (LOCAL_WRITE: a receive
  // of the reached QP points into it; else the remote rights wanted), or a positive errno.
  virtual int grant_mr(uint32_t owner, uint32_t via_qpn, uint32_t key, uint32_t access,
                       MrGrant& out) = 0;
  // The same, naming the range wanted: for an implicit ODP MR's key the grant is of a
  // registration covering it (MrGrant::implicit), and EAGAIN says the owner was asked to make
  // one. Sources that know no implicit MRs need not override it.
  virtual int grant_mr_range(uint32_t owner, uint32_t via_qpn, uint32_t key, uint32_t access,
                             uint64_t /*addr*/, uint64_t /*length*/, MrGrant& out) {
    return grant_mr(owner, via_qpn, key, access, out);
  }
  // Trusted sources only: a writable mapping the source keeps of a backing that refuses new
  // writable mappings (write-sealed). nullptr otherwise.
  virtual uint8_t* kept_mapping(uint32_t owner, uint32_t fd_id, uint64_t& size);
};

class Peer {
 public:
  Peer(FdSource& source, uint32_t client_id);
  ~Peer();
  Peer(const Peer&) = delete;
  Peer& operator=(const Peer&) = delete;

  uint32_t client_id() const { return client_id_; }

  // The owner's arena, for a trusted user (vrdmad's router): mapped at the size of the file.
  int attach_arena();
  // The owner's arena where the caller maps it already (the owner itself: its own direct
  // connections), not unmapped by the Peer.
  void use_arena(uint8_t* base, uint64_t size) {
    base_ = base;
    size_ = size;
    arena_borrowed_ = true;
  }
  uint8_t* base() const { return base_; }
  uint64_t size() const { return size_; }
  // Whether vrdmad marked the owner dead (only known with the arena attached).
  bool dead() const;

  // Data path: a pointer to [addr, addr+len) of the peer's MR `key` if it grants `access`
  // (and, for remote access with pd != 0, belongs to protection domain `pd`); nullptr otherwise
  // (the caller reports an access error). The first use of a key asks the source for a grant
  // on behalf of the caller's QP `via_qpn`.
  uint8_t* translate(uint32_t via_qpn, uint32_t pd, uint32_t key, uint64_t addr, uint64_t len,
                     uint32_t access);

  // Slow path: an object (QP or SRQ) mapped whole, checked (sealed, header), cached by id.
  int map_object(uint32_t fd_id, uint32_t via_qpn, ObjectKind kind, uint8_t*& base,
                 uint64_t& size);
  // Slow path: an eventfd the owner published (a QP object's notify fd). -1 on failure.
  int event_fd(uint32_t fd_id, uint32_t via_qpn);
  // Each successful map_object and event_fd holds its object or descriptor until released
  // once: the last release unmaps or closes it (a peer that lives on while its QPs come and go
  // costs only what is still reached).
  void release(uint32_t fd_id);
  // Unmaps the areas of registrations that are gone. Only for a user that knows no pointer
  // translate() returned before is still in use (vrdmad's router, between frames).
  void reclaim();
  // Whether reclaim() has anything to unmap (one relaxed load).
  bool has_retired() const { return has_retired_.load(std::memory_order_relaxed); }
  // For a user that calls reclaim() only when nothing it translated is in use (vrdmad's
  // router): an area a view no longer uses stays mapped as it was until reclaim(), so that
  // data still being placed into it or sent from it (a frame in flight) reaches the owner's
  // pages or comes from them, instead of anonymous memory. Without it, such areas are emptied
  // at once.
  void defer_retire() { defer_retire_ = true; }
  // How long translate() waits for the owner of an implicit ODP MR to register a range (1 s by
  // default). vrdmad's router, whose one thread serves every QP of the host, waits less.
  void set_odp_wait_us(int64_t us) { odp_wait_us_ = us; }
  // The owner's KeyTable::moves (0 before the first translate() attached the key table).
  uint32_t moves() const {
    const KeyTable* k = keys_.load(std::memory_order_acquire);
    return k ? k->moves.load(std::memory_order_seq_cst) : 0;
  }
  // Whether the owner's heavy fences reach this process (asym_fence.h): a placement then needs
  // only a compiler barrier before moves() is read again (settle.h, moved_since).
  bool light_fence() const { return light_fence_.load(std::memory_order_relaxed); }

 private:
  std::atomic<bool> light_fence_{false};
  struct View {
    std::atomic<uint64_t> tag{0};  // key | gen << 32; 0 when empty
    uint8_t* base = nullptr;       // where the MR's map_start is mapped here
    uint64_t iova = 0, length = 0, va_off = 0;
    void* area = nullptr;  // the whole mapping this view owns, map_len bytes
    uint64_t map_len = 0;
    uint32_t access = 0, pd = 0;
    bool writable = false;
    bool implicit = false;  // one registration of an implicit MR's: other ranges ask again
  };
  const uint8_t* lookup(uint32_t pd, uint32_t key, uint64_t addr, uint64_t len, uint32_t access,
                        bool& retry) const;
  // 0 or a positive errno (EAGAIN: an implicit MR's owner was asked to register the range).
  int map_mr(uint32_t via_qpn, uint32_t key, uint32_t access, uint64_t addr,
             uint64_t len);  // requires mu_
  void retire(void* area, uint64_t len, bool same_registration);  // requires mu_
  int attach_keys(uint32_t via_qpn);                              // requires mu_

  FdSource& source_;
  uint32_t client_id_;
  uint8_t* base_ = nullptr;  // arena (trusted users)
  uint64_t size_ = 0;
  bool arena_borrowed_ = false;  // use_arena(): the caller's mapping
  std::atomic<const KeyTable*> keys_{nullptr};
  uint64_t keys_size_ = 0;
  KeyIndex index_;
  std::unique_ptr<View[]> views_;
  std::mutex mu_;
  struct EventFd {
    int fd;
    uint32_t refs;
  };
  std::unordered_map<uint32_t, EventFd> event_fds_;  // fd_id ->
  struct Object {
    uint8_t* base;
    uint64_t size;
    ObjectKind kind;
    uint32_t refs;
  };
  std::unordered_map<uint32_t, Object> objects_;    // fd_id ->
  // Areas views no longer use. `kept_`: replaced by a wider grant of the same registration,
  // which a caller may still be using; unmapped with the peer. `retired_`: of registrations that
  // are gone (their generation changed), already emptied (anonymous memory now: the owner's
  // pages are no longer held, and a late access touches nothing of anyone's); unmapped by
  // reclaim().
  std::vector<std::pair<void*, size_t>> kept_, retired_;
  bool defer_retire_ = false;
  std::atomic<bool> has_retired_{false};
  int64_t odp_wait_us_ = 1000000;
};

// A destination QP as the initiator sees it: validated views of its rings.
// What a PeerQp holds of its peer (its QP object, its SRQ's, its eventfd), released when the
// last copy of the PeerQp goes.
struct PeerHold {
  explicit PeerHold(std::shared_ptr<Peer> p) : peer(std::move(p)) {}
  ~PeerHold();
  PeerHold(const PeerHold&) = delete;
  PeerHold& operator=(const PeerHold&) = delete;
  std::shared_ptr<Peer> peer;
  uint32_t ids[3] = {};  // 0: none
};

struct PeerQp {
  std::shared_ptr<Peer> peer;
  std::shared_ptr<PeerHold> hold;
  QpObject* obj = nullptr;
  QpAttrs* attrs = nullptr;
  uint32_t qpn = 0;
  uint32_t type = 0;
  uint32_t pd = 0;
  uint32_t via_qpn = 0;  // the initiator's QP (0: a trusted user)
  RqView rq;
  RingView ring;
  int notify_efd = -1;
  bool routed = false;  // on another host: the router carries the work
  bool valid() const { return attrs != nullptr; }
};

// Builds a PeerQp from the QP object `fd_id` of the peer (and its SRQ's object), validating
// every offset and geometry. 0 or a positive errno.
int attach_peer_qp(const std::shared_ptr<Peer>& peer, uint32_t fd_id, uint32_t via_qpn,
                   PeerQp& out);

// A CQ's private ring in the peer's arena (trusted users) and its channel's eventfd (-1: none).
int attach_cq(const std::shared_ptr<Peer>& peer, uint32_t offset, CqView& out, int& efd);

}  // namespace vrdma::shm
