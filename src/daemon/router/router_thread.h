// A router thread: a Router (router.h) runs there, with an epoll of its own, apart from
// vrdmad's control loop. Nothing but that thread touches the Router once it runs. vrdmad runs
// one or several (router_pool.h), each with the links of its lanes.
//
// The control thread never waits for the router:
//   - what it asks of the router (connect a QP, a QP freed, a client gone, an rdma_cm message)
//     is queued as a task the router thread runs on its next pass (an eventfd wakes it);
//   - what the router tells the daemon (a connect's result, a QP failed, an rdma_cm message, a
//     host gone) is queued the other way, and run by the control thread when its epoll sees
//     pool's control_fd() readable (RouterPool::run_control_tasks());
//   - what status and metrics read of the router (links, held requests, routed QPs) is a
//     snapshot the router thread publishes while it works and before it sleeps.
// The router's questions about the daemon's state (Router::Hooks: find_qp, names_peer, ...) are
// answered synchronously by the daemon under its state lock, which the control thread holds
// while it handles events and never while it waits for the router: no lock-order cycle.
//
// The loop: every pass takes the queued tasks, then Router::poll(); while a pass did work the
// next one follows at once (after a look at epoll without waiting: a pass reads only the links
// epoll said have bytes); once a pass finds nothing, the loop keeps polling for
// RouterConfig::poll_ns, then arms the doorbells and sleeps in epoll until a doorbell, a link,
// a task or the router's next deadline: an idle router uses no CPU.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "common/unique_fd.h"
#include "daemon/router/doorbells.h"
#include "daemon/router/realtime.h"
#include "daemon/router/router.h"
#include "daemon/router/task_queue.h"

namespace vrdma::daemon {

// What the router threads queue for the control thread: one queue, and the eventfd the
// control thread's epoll watches (RouterPool::control_fd).
struct ControlChannel {
  TaskQueue tasks;
  UniqueFd fd;
};

class RouterThread {
 public:
  using Task = TaskQueue::Task;
  // A connect's result, on the control thread: 0 or an errno, the peer QP's type, and the
  // doorbell eventfd of the QP owner's routed QPs (status 0 only; the router keeps it).
  using ConnectDone = std::function<void(int status, uint32_t qp_type, int doorbell_fd)>;

  // `cfg.thread` is this one's number among `cfg.threads`; `shared` and `control` are shared
  // by all of them (router_pool.h).
  RouterThread(const RouterConfig& cfg, Directory& dir, Router::Hooks hooks, uint64_t boot,
               RouterShared shared, ControlChannel& control);
  ~RouterThread();  // stops the thread
  RouterThread(const RouterThread&) = delete;
  RouterThread& operator=(const RouterThread&) = delete;

  // Loads TLS and listens (Router::start), on the calling thread. 0 or a positive errno.
  int start();
  // Starts the thread / stops it (waits for it). Tasks queued after stop() never run.
  int run();
  void stop();

  // The router thread the caller runs on (null on any other thread).
  static RouterThread* current();
  // Router thread side (from its hooks): `t` runs on the control thread.
  void post_to_control(Task t) { outbox_.push_back(std::move(t)); }
  // Runs `t` on the router thread, with the Router (any thread).
  void post(std::function<void(Router&)> t);

  // What the control thread asks (router.h says what each does); answers come back through
  // the control thread's queue.
  // `local`: a QP of this host through the router itself (the mediated path, router_self.cc).
  // `lane`: the lane it takes (Router::pick_lane's; -1: this thread's Router picks).
  void connect_qp(bool local, uint32_t qpn, const LocalQp& qp, uint32_t dst_ipv4, uint32_t dst_qpn,
                  ConnectDone done, int lane = -1);
  // A UD QP's multicast sends go through the router too (router_multicast.cc); `done` gets the
  // doorbell eventfd of the owner's routed QPs, or -1.
  void attach_multicast(uint32_t qpn, const LocalQp& qp, std::function<void(int fd)> done);
  // `done` runs on the control thread once the router has sent what the QP posted (a UD QP's
  // last datagrams, router_retire.cc): the owner may free the memory they come from after that.
  void qp_freed(uint32_t qpn, std::function<void()> done = nullptr);
  void client_gone(uint32_t client);
  // An rdma_cm message to a host; `unreachable` runs on the control thread when no link to it
  // can be had.
  void send_cm_to_host(uint32_t host_id, const wire::Cm& m,
                       std::function<void(int err)> unreachable);
  // A mapping the daemon no longer needs but the router may still be reading or writing (a
  // client's memory, sealed, that the router was given): let go by this thread once no frame
  // in flight can point into it; unmapped when every thread given it let it go.
  void unmap_when_idle(std::shared_ptr<void> mapping);

  // The last snapshot (status, metrics).
  std::vector<Router::LinkInfo> links() const;
  std::map<uint32_t, uint64_t> link_connects() const;
  std::map<uint32_t, std::pair<uint64_t, uint64_t>> held_by_owner() const;
  size_t routed_qps() const;
  std::vector<Router::QosFlowInfo> qos_flows() const;
  // A QoS rule for the router's scheduler (Router::set_qos), applied on its next pass.
  void set_qos(const qos::NamedRule& rule);
  bool tls() const { return tls_; }
  // Whether the thread runs in the real-time class now (realtime.h), and how often its budget
  // sent it back to the normal class. False and 0 for a thread that could not have the class
  // (no CAP_SYS_NICE).
  bool realtime() const { return realtime_now_.load(std::memory_order_relaxed); }
  uint64_t realtime_demotions() const {
    return realtime_demotions_.load(std::memory_order_relaxed);
  }
  bool latency_only() const { return latency_only_; }

  // The Router's hook for reclaim points: the router thread lets go of what unmap_when_idle()
  // gave it.
  void reclaim_point();

 private:
  struct Snapshot {
    std::vector<Router::LinkInfo> links;
    std::map<uint32_t, uint64_t> link_connects;
    std::map<uint32_t, std::pair<uint64_t, uint64_t>> held;
    size_t routed_qps = 0;
    std::vector<Router::QosFlowInfo> qos;
  };
  void loop();
  void wake();  // the router thread
  void publish(int64_t now);
  // The thread was awake from `from` to `to`: its budget says which class it runs in.
  void meter(int64_t from, int64_t to);
  int rt_priority() const {
    return latency_only_ ? kLatencyRealtimePriority : kBulkRealtimePriority;
  }
  void flush_outbox();

  std::unique_ptr<Router> router_;
  uint32_t index_;
  bool latency_only_;  // the latency lane's thread, which carries nothing else
  std::vector<uint32_t> cpus_;  // RouterConfig::cpus
  int64_t poll_ns_;  // RouterConfig::poll_ns
  bool tls_ = false;
  UniqueFd epoll_;
  UniqueFd wake_fd_;          // the router thread's: tasks queued, stop
  ControlChannel& control_;   // tasks for the control thread (shared)
  TaskQueue tasks_;           // for the router thread
  std::vector<Task> outbox_;  // router thread: tasks for the control thread, sent once a pass
  std::vector<std::shared_ptr<void>> unmaps_;  // router thread
  std::thread thread_;
  std::atomic<bool> stopping_{false};
  bool running_ = false;
  mutable std::mutex snap_mu_;
  Snapshot snap_;
  int64_t published_ns_ = 0;
  bool changed_ = true;
  std::optional<RealtimeBudget> realtime_;  // unset: the real-time class was refused
  std::atomic<bool> realtime_now_{false};
  std::atomic<uint64_t> realtime_demotions_{0};
  bool realtime_refused_ = false;  // a change of class was refused (warned once)
};

}  // namespace vrdma::daemon
