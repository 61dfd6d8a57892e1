// Another client's arena mapped into this process, with a cache of its
// registered memory regions, so that the initiator of an operation can reach
// the target's queues and memory with plain loads and stores.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "shm/rings.h"
#include "shm/layout.h"

namespace vrdma::shm {

// Where a peer's file descriptors come from: vrdmad (GetFd) for the library, the daemon's own
// table for its router.
class FdSource {
 public:
  virtual ~FdSource() = default;
  // A new descriptor (the caller owns it) for the owner's fd `fd_id`, or a positive errno.
  virtual int fetch_fd(uint32_t owner, uint32_t fd_id, int& fd) = 0;
};

class Peer {
 public:
  Peer(FdSource& source, uint32_t client_id) : source_(source), client_id_(client_id) {}
  ~Peer();

  // Maps the peer's arena. Returns 0 or an errno.
  int attach();

  uint32_t client_id() const { return client_id_; }
  bool dead() const { return hdr_->dead.load(std::memory_order_relaxed) != 0; }
  uint8_t* base() const { return base_; }
  uint64_t size() const { return size_; }

  // Data path: a pointer to [addr, addr+len) of the peer's MR `key` if it
  // grants `access`; nullptr otherwise (the caller reports an access error).
  uint8_t* translate(uint32_t key, uint64_t addr, uint64_t len, uint32_t access);

  // Slow path: an eventfd the peer registered (for completion channels).
  int event_fd(uint32_t fd_id);

 private:
  struct View {
    std::atomic<uint64_t> key_gen{0};
    uint8_t* base = nullptr;  // where the MR's map_start is mapped here
    uint64_t iova = 0, length = 0, va_off = 0;
    uint32_t access = 0;
  };
  uint8_t* map_mr(uint32_t slot, uint64_t key_gen);  // slow path

  FdSource& source_;
  uint32_t client_id_;
  uint8_t* base_ = nullptr;
  uint64_t size_ = 0;
  ArenaHeader* hdr_ = nullptr;
  MrEntry* table_ = nullptr;
  std::unique_ptr<View[]> views_;
  std::mutex mu_;
  std::unordered_map<uint32_t, int> fds_;             // fd_id -> fd
  std::vector<std::pair<void*, size_t>> mappings_;  // kept until the peer is dropped
};

// A destination QP as the initiator sees it: validated views of its rings.
struct PeerQp {
  std::shared_ptr<Peer> peer;
  QpShared* qp = nullptr;
  uint32_t qpn = 0;
  uint32_t type = 0;
  RqView rq;
  CqView recv_cq;
  int recv_cq_efd = -1;
  bool routed = false;  // on another host: the router carries the work
  bool valid() const { return qp != nullptr; }
};

// A CQ in the peer's arena (validated geometry) and its channel's eventfd (-1: none).
int attach_cq(const std::shared_ptr<Peer>& peer, uint32_t offset, CqView& out, int& efd);

// Builds a PeerQp from the peer's arena, validating every offset and geometry.
int attach_peer_qp(const std::shared_ptr<Peer>& peer, uint32_t offset, PeerQp& out);

}  // namespace vrdma::shm
