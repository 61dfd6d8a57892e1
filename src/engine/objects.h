// Engine objects behind the verbs handles: contexts, completion channels,
// protection domains, completion queues, shared receive queues and address
// handles. Each keeps `user`, the handle the compatibility library gave out.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include <infiniband/verbs.h>

#include "engine/device.h"
#include "engine/poll_backoff.h"
#include "engine/posted_recvs.h"
#include "engine/shared_object.h"
#include "shm/rings.h"

namespace vrdma {

class Cq;
class Qp;
class Srq;
class DirectLink;

// A tiny lock for per-queue serialisation; uncontended in the common case.
class SpinLock {
 public:
  void lock() {
    while (flag_.exchange(true, std::memory_order_acquire))
      while (flag_.load(std::memory_order_relaxed)) __builtin_ia32_pause();
  }
  bool try_lock() { return !flag_.exchange(true, std::memory_order_acquire); }
  void unlock() { flag_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> flag_{false};
};

struct AsyncEvent {
  ibv_event_type type;
  void* user;  // the compat handle (qp, cq, srq) or nullptr for device events
};

class Context {
 public:
  explicit Context(std::shared_ptr<Device> dev);
  ~Context();
  int init();  // creates the async fd; returns 0 or errno

  Device& device() { return *dev_; }
  const std::shared_ptr<Device>& device_ptr() { return dev_; }
  int async_fd() const { return async_fd_; }

  void push_event(ibv_event_type type, void* user);
  // Blocks (unless the fd is non-blocking) until an event is there.
  int get_event(AsyncEvent& out);

  void* user = nullptr;

 private:
  std::shared_ptr<Device> dev_;
  int async_fd_ = -1;  // eventfd, semaphore mode
  std::mutex mu_;
  std::deque<AsyncEvent> events_;
};

// A completion channel. Its descriptor (what applications poll) is an epoll instance over
// eventfds, edge-triggered and never read: one per CQ for the owner's and the router's
// completions, one per QP whose receive completions senders push. A sender holds only its own
// QP's eventfd, so it can wake the owner (a spurious wake-up at worst) but never take another
// QP's wake-up away.
class Channel {
 public:
  explicit Channel(Context& ctx) : ctx_(ctx) {}
  ~Channel();
  int init();  // returns 0 or errno

  int fd() const { return fd_; }
  void attach(Cq* cq);
  void detach(Cq* cq);
  // Wake-ups of `efd` mean an event of `cq` (when armed).
  void watch(int efd, Cq* cq);
  void unwatch(int efd);
  // ibv_get_cq_event: waits for an event and returns the CQ it belongs to.
  int get_event(Cq*& out);
  int cq_count();

  void* user = nullptr;

 private:
  Context& ctx_;
  int fd_ = -1;  // epoll
  std::mutex mu_;
  std::vector<Cq*> cqs_;
};

class Pd {
 public:
  explicit Pd(Context& ctx);
  Context& context() { return ctx_; }
  uint32_t id() const { return id_; }
  void* user = nullptr;

 private:
  Context& ctx_;
  uint32_t id_;
};

// One QP's receive completions as its receive CQ polls them: the ring senders push into, the
// receives they can complete (the QP's or its SRQ's), and what the owner knows better than any
// report (its QPN, its connected peer).
struct RecvSource {
  shm::RingView ring;
  uint64_t head = 0;  // private
  PostedRecvs* recvs = nullptr;
  Srq* srq = nullptr;  // whose receives `recvs` are, if an SRQ's
  uint32_t qpn = 0;
  uint32_t type = 0;      // ibv_qp_type
  std::atomic<uint32_t> peer_qpn{0};  // RC, UC: the source of every receive (its RTR's)
  shm::QpCounters* counters = nullptr;  // dropped reports, receive completions by status
};

class Cq {
 public:
  Cq(Context& ctx, Channel* channel) : ctx_(ctx), channel_(channel) {}
  ~Cq();
  int init(int cqe);  // returns 0 or errno

  int poll(int n, ibv_wc* wc);
  int arm(bool solicited_only);
  // Producer side for this process's own completions.
  void push(const ibv_wc& wc, bool solicited);

  // A QP was reset: its completions still waiting here are removed (as hardware cleans them).
  void remove_qp(uint32_t qpn);

  // A QP whose receive CQ this is: its ring is polled (and armed) with the CQ's own.
  void attach(RecvSource* src);
  void detach(RecvSource* src);
  // A QP whose send CQ this is: its routed work completes here (poll_backoff.h).
  void attach(const shm::SendQueue* sq);
  void detach(const shm::SendQueue* sq);
  // A direct connection of a QP that completes here (direct.h): a poll that finds nothing
  // drives it, so that a polling program takes what arrived without waiting for the progress
  // thread.
  void attach_direct(std::shared_ptr<DirectLink> c);
  void detach_direct(const DirectLink* c);
  // The connections' responses that polls held back are written (DirectLink::flush_deferred);
  // `all`: every frame held back, requests too (DirectLink::flush_held).
  void flush_deferred_direct(int64_t now, bool all = false);
  // The receive completions reported for `src` and not polled yet move to the CQ's own ring, in
  // their order and checked as a poll checks them: whatever is pushed after them (a flush) is
  // polled after them.
  void settle(RecvSource& src);

  uint32_t offset() const { return offset_; }
  // The entries the CQ promises (ibv_cq.cqe); after a shrink it may hold more (see resize).
  int capacity() const { return static_cast<int>(promised_); }
  // ibv_resize_cq within the ring allocated at creation, which has room for max(kMinRing, the
  // first size) entries of which only the size asked for is open (peers and the router hold
  // the ring's address, so it never moves): growing opens more of it, shrinking only lowers
  // the promise. EINVAL below the completions waiting, ENOMEM beyond the ring.
  int resize(int cqe);
  static constexpr uint32_t kMinRing = 1024;
  // The largest CQ (ibv_device_attr.max_cqe): its ring, 64 bytes an entry, is 16 MiB of the
  // process's 256 MiB arena.
  static constexpr int kMaxCqe = 1 << 18;
  Channel* channel() const { return channel_; }
  Context& context() { return ctx_; }
  int event_fd() const { return event_fd_; }

  // The channel found a wake-up of this CQ: whether it counts as an event (the CQ was armed).
  bool take_event() { return armed_.exchange(0, std::memory_order_acq_rel) != 0; }
  // Event accounting for ibv_ack_cq_events / ibv_destroy_cq.
  void event_delivered();
  void ack(unsigned n);
  void wait_acked();

  void* user = nullptr;

 private:
  int take_recv(RecvSource& src, int max, ibv_wc* out);  // requires poll_lock_
  void drive_direct();
  // Whether one of its direct connections carries kDeepQueue or more unanswered requests.
  bool direct_streams();
  // Whether work streams to this CQ: a router thread awake working on a deep queue of its QPs'
  // routed requests (`deepest`: the deepest such queue, which paces the poller's naps), or the
  // last message received said more were queued behind it.
  bool streaming(const shm::SendQueue** deepest);

  Context& ctx_;
  Channel* channel_;
  uint32_t offset_ = 0;
  shm::CqView view_;
  uint32_t cqe_ = 0;       // open cells of the ring (a power of two); guarded by poll_lock_
  uint32_t promised_ = 0;  // ibv_cq.cqe
  uint64_t head_ = 0;  // private consumer position of the private ring
  int event_fd_ = -1;  // wakes the channel for the private ring
  uint32_t event_fd_id_ = 0;
  std::atomic<uint32_t> armed_{0};
  SpinLock poll_lock_;
  SpinLock direct_lock_;
  // Guarded by direct_lock_: each connection, and how many QPs of the CQ use it.
  std::vector<std::pair<std::shared_ptr<DirectLink>, uint32_t>> direct_;
  size_t next_direct_ = 0;                          // where the next poll starts driving them
  std::atomic<bool> has_direct_{false};
  // The connections' sockets, level-triggered: a poll reads only those with bytes (one
  // epoll_wait for all, which takes no socket's lock), never spins on recvmsg.
  int direct_epfd_ = -1;
  std::vector<RecvSource*> sources_;  // guarded by poll_lock_
  std::vector<const shm::SendQueue*> sqs_;  // guarded by poll_lock_
  poll_backoff::MoreHint more_coming_;  // the last receive report's kRecvMore; poll_lock_
  size_t next_source_ = 0;
  std::atomic<bool> overflow_reported_{false};
  std::mutex ev_mu_;
  std::condition_variable ev_cv_;
  uint64_t delivered_ = 0, acked_ = 0;
};

class Srq {
 public:
  explicit Srq(Pd& pd) : pd_(pd) {}
  virtual ~Srq();  // an XRC SRQ (engine/xrc.h) is one
  int init(const ibv_srq_attr& attr);
  int post(ibv_recv_wr* wr, ibv_recv_wr** bad);
  int modify(const ibv_srq_attr& attr, int mask);
  void query(ibv_srq_attr& attr) const;
  // After one of its receives completed: raises the limit event when it is due.
  void check_limit();

  uint32_t fd_id() const { return object_.fd_id(); }
  uint32_t table_offset() const { return table_offset_; }
  PostedRecvs& recvs() { return recvs_; }
  uint32_t capacity() const { return max_wr_; }
  Pd& pd() { return pd_; }
  void* user = nullptr;

 private:
  Pd& pd_;
  SharedObject object_;
  uint32_t table_offset_ = 0;  // in the arena
  PostedRecvs recvs_;
  uint32_t max_wr_ = 0;
  uint32_t max_sge_ = 0;
  std::atomic<uint32_t> limit_{0};
  SpinLock lock_;
};

// The handle given out is `ibv` itself: the data path finds the attributes
// from the ibv_ah pointer a UD work request carries.
struct Ah {
  ibv_ah ibv;
  ibv_ah_attr attr;
};

}  // namespace vrdma
