// The engine's process-wide state: the connection to vrdmad, the arena, the
// registered memory, mapped peers, and the progress thread that handles
// deferred work (RNR and retry waits) and the daemon's notifications.
#pragma once

#include <sys/epoll.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <map>
#include <set>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/clock.h"
#include "common/protocol.h"
#include "common/unique_fd.h"
#include "engine/arena.h"
#include "engine/control.h"
#include "engine/memory.h"
#include "shm/pacing.h"
#include "shm/peer.h"

namespace vrdma {

class Qp;
class SharedRecvQp;
class Context;
class DirectLink;
class SelfSource;

class Device {
 public:
  // The live device of this process, connecting on first use (and again after
  // the daemon was lost). Returns nullptr and sets errno when vrdmad cannot be
  // reached.
  static std::shared_ptr<Device> get();

  ~Device();

  const proto::HelloRep& info() const { return info_; }
  Control& control() { return control_; }
  Arena& arena() { return arena_; }
  MemoryRegistry& memory() { return *memory_; }
  bool lost() const { return lost_.load(std::memory_order_relaxed); }

  // Slow path: maps (once) and returns a peer client.
  std::shared_ptr<shm::Peer> peer(uint32_t client_id, int& err);
  // This process as its direct connections reach it (self_source.h): a Peer of its own, for
  // one connection (translations it hands out stay valid until it reclaims them).
  std::shared_ptr<shm::Peer> self_peer();

  // The direct path (direct.h): this process's connection to the process `key` of another host
  // (null: none that lives), and a new one, found by that key from now on and watched by the
  // progress thread until it is over.
  std::shared_ptr<DirectLink> direct_link(uint64_t key);
  void add_direct_link(std::shared_ptr<DirectLink> c);
  // A QP of this process by number, kept from being destroyed until unpinned (nullptr: none).
  Qp* pin_qp(uint32_t qpn);
  void unpin_qp(Qp* qp);
  // A QP's failure found on a thread that may hold locks of the QP's data path: told to the QP
  // by the progress thread (as vrdmad's QpFatal).
  void queue_fatal(uint32_t qpn, proto::FatalReason why);

  // QP bookkeeping for notifications.
  void add_qp(Qp* qp);
  void remove_qp(Qp* qp);

  // A QP has work that waits (RNR or retry); the progress thread retries it.
  void mark_blocked(Qp* qp);
  // Retries blocked QPs now from an application thread (poll_cq found nothing).
  void progress_blocked();
  bool has_blocked() const { return blocked_count_.load(std::memory_order_relaxed) != 0; }

  uint32_t new_fd_id() { return allocate_fd_id(); }

  // Same-host rate limits (shm/pacing.h): whether a request of `bytes` to a QP of this host
  // may go now (0; the container's and tenant's meters charged), or else the time (now_ns())
  // when it may. unpace() gives back a charge for a request that did not go.
  int64_t pace(uint64_t bytes) {
    if (!pacing_[0] || !(shm::limited(*pacing_[0]) || shm::limited(*pacing_[1]))) return 0;
    const int64_t now = now_ns();
    if (int64_t wait = shm::pace(*pacing_[0], bytes, now)) return now + wait;
    if (int64_t wait = shm::pace(*pacing_[1], bytes, now)) {
      shm::unpace(*pacing_[0], bytes);
      return now + wait;
    }
    return 0;
  }
  void unpace(uint64_t bytes) {
    if (!pacing_[0]) return;
    shm::unpace(*pacing_[0], bytes);
    shm::unpace(*pacing_[1], bytes);
  }

  // The eventfd that wakes this host's router (given with the first routed connection).
  int router_doorbell() const { return router_doorbell_.load(std::memory_order_relaxed); }
  // Whether empty polls yield the CPU (this process has routed QPs; VRDMA_ROUTED_YIELD=0 off).
  bool yields_to_router() const { return yield_.load(std::memory_order_relaxed); }
  void set_router_doorbell(int fd);

  // rdma_cm events from vrdmad (proto::is_cm_event) go to one process-wide handler, kept
  // across reconnections. It runs on whichever thread reads the control socket, with the
  // control lock held: it must queue the event and return, never make a control call.
  using CmHandler = std::function<void(const Packet&)>;
  static void set_cm_handler(CmHandler h);

  // Handles of XRC_RECV QPs held through vrdmad (xrc_shared_qp.h): a QpFatal for a QPN this
  // process has no Qp of goes to the first of them.
  void add_shared_qp(SharedRecvQp* q);
  void remove_shared_qp(SharedRecvQp* q);

  // Contexts receive device-wide async events.
  void add_context(Context* c);
  void remove_context(Context* c);

  // Rouses the progress thread from its wait (it recomputes its timers).
  void wake();

 private:
  Device() = default;
  int init();
  void progress_loop();
  // The progress thread's direct connections: new ones and the other ends vrdmad handed over
  // are taken in, those with events or due timers driven, the finished let go. Returns the
  // earliest timer (-1: none).
  int64_t progress_direct(const epoll_event* events, int n);
  void adopt_direct();
  void handle_event(const Packet& pkt);
  void handle_lost();
  void handle_fatal_qps();
  int64_t retry_blocked(bool from_thread);  // returns ns until the next deadline, -1 none
  void map_pacing();

  proto::HelloRep info_{};
  Control control_;
  ControlFdSource fd_source_{control_};
  Arena arena_;
  std::unique_ptr<MemoryRegistry> memory_;
  std::unique_ptr<SelfSource> self_source_;
  shm::PacingPage* pacing_[2] = {};  // the container's and the tenant's; none: no limits
  std::mutex peers_mu_;
  std::unordered_map<uint32_t, std::shared_ptr<shm::Peer>> peers_;
  std::mutex qps_mu_;
  std::unordered_map<uint32_t, Qp*> qps_;  // by qpn
  std::mutex blocked_mu_;
  std::set<Qp*> blocked_;
  std::atomic<uint32_t> blocked_count_{0};
  std::vector<SharedRecvQp*> shared_qps_;  // under qps_mu_
  std::mutex fatal_mu_;
  std::vector<std::pair<uint32_t, uint32_t>> fatal_qpns_;  // qpn, proto::FatalReason
  std::mutex contexts_mu_;
  std::set<Context*> contexts_;
  std::atomic<bool> lost_{false};
  const pid_t pid_ = ::getpid();  // the process that opened it
  std::atomic<bool> stop_{false};
  std::atomic<bool> sleeping_forever_{false};
  int wake_fd_ = -1;
  int epoll_fd_ = -1;  // the progress thread's: wake-ups, vrdmad, direct connections
  // Direct connections: handed to the progress thread (new_direct_, and the other ends of
  // direct connections vrdmad handed over, inbound_), and those it watches (its own).
  std::mutex direct_mu_;
  std::vector<std::shared_ptr<DirectLink>> new_direct_;
  std::map<uint64_t, std::weak_ptr<DirectLink>> direct_links_;  // by the other process's key
  struct Inbound {
    UniqueFd fd;
    proto::DirectAcceptedEvent ev;
  };
  std::vector<Inbound> inbound_;
  struct Watched {
    std::shared_ptr<DirectLink> conn;
    uint32_t events = 0;  // what epoll watches its socket for
    // Until when it does not stand down (ns): requests waited for a poller that had stopped
    // (a program that polls its CQ, then waits on memory for the other side's WRITE).
    int64_t awake_until = 0;
    // Wakes in a row, while awake, that found what arrived already taken by a poller: the
    // program polls again, and the thread stands down rather than take a core from it.
    uint32_t idle_wakes = 0;
  };
  std::unordered_map<int, Watched> watched_;  // by descriptor; the progress thread's
  std::atomic<int> router_doorbell_{-1};
  std::atomic<bool> yield_{false};
  std::thread thread_;
};

}  // namespace vrdma
