// vrdmad's router threads (--router-threads N): N RouterThreads, each running a Router with an
// epoll of its own, and what the control thread sees of them as one router.
//
// The unit of work a thread owns is a lane's links (wire.h: the main lane, the latency lane,
// the bulk lanes of --router-links): RouterConfig::thread_of gives the latency lane the last
// thread to itself and bulk link k thread k % (N - 1). A QP's frames all go on one lane, so each
// QP's requester and each connection's responder live on one thread, as before, with no lock
// between threads on the data path:
//   - a new QP's lane is picked by thread 0 (the round robin over the bulk links and the QP's
//     class are read there), which passes the connect to the lane's thread; a UD QP already
//     routed stays on its thread;
//   - thread 0 alone listens; an inbound link is read up to its Hello only, and once that
//     authenticated it, goes whole to its lane's thread (Router::take_link);
//   - the receive queues and completion queues several threads may fill are multi-producer
//     rings in shared memory already (shm/rings.h: several processes fill them on one host);
//   - a client has one doorbell eventfd, which every thread carrying one of its QPs watches
//     (doorbells.h);
//   - rdma_cm's messages travel on the main lane: thread 0.
// Each thread's QoS scheduler shares the links of its lanes (weights, priority) between the
// flows it carries; the rate limits of a container or tenant are one budget for all threads
// (their schedulers hold the same token buckets, qos/limits.h). The link limits (per host, in
// all) hold per thread.
//
// With N = 1 this is one RouterThread; the default is 2 (the latency class apart).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "daemon/router/doorbells.h"
#include "daemon/router/router_thread.h"

namespace vrdma::daemon {

class RouterPool {
 public:
  using Task = TaskQueue::Task;
  using ConnectDone = RouterThread::ConnectDone;

  // `cfg.threads` threads; `hooks` is called once per thread (each gets hooks of its own).
  RouterPool(const RouterConfig& cfg, Directory& dir, const std::function<Router::Hooks()>& hooks,
             uint64_t boot);
  ~RouterPool();  // stops the threads
  RouterPool(const RouterPool&) = delete;
  RouterPool& operator=(const RouterPool&) = delete;

  // Loads TLS and listens (thread 0), on the calling thread. 0 or a positive errno.
  int start();
  int run();
  void stop();
  size_t threads() const { return threads_.size(); }

  // Control thread side. Readable when a router thread queued tasks for the control thread.
  int control_fd() const { return control_.fd.get(); }
  void run_control_tasks();
  // From a router thread (its hooks): `t` runs on the control thread.
  static void post_to_control(Task t);

  // What the control thread asks (router_thread.h).
  void connect_qp(bool local, uint32_t qpn, const LocalQp& qp, uint32_t dst_ipv4, uint32_t dst_qpn,
                  ConnectDone done);
  void attach_multicast(uint32_t qpn, const LocalQp& qp, std::function<void(int fd)> done);
  // The direct path's set-up (Router::connect_direct), on the main lane's thread; `done` runs
  // on the control thread.
  void connect_direct(uint32_t qpn, const LocalQp& qp, uint32_t dst_ipv4, uint32_t dst_qpn,
                      const std::array<uint8_t, 16>& ticket, Router::DirectDone done,
                      uint32_t flags = 0);
  // `done` runs once every thread has let the QP go.
  void qp_freed(uint32_t qpn, std::function<void()> done = nullptr);
  void client_gone(uint32_t client);
  void send_cm_to_host(uint32_t host_id, const wire::Cm& m,
                       std::function<void(int err)> unreachable);
  // Unmapped once every router thread is past any frame that could point into it.
  void unmap_when_idle(void* addr, size_t size);

  // The threads' last snapshots, together. LinkInfo::thread says whose a link is.
  std::vector<Router::LinkInfo> links() const;
  std::map<uint32_t, uint64_t> link_connects() const;
  std::map<uint32_t, std::pair<uint64_t, uint64_t>> held_by_owner() const;
  size_t routed_qps() const;
  // The latency lane's thread (one only with two threads or more): "realtime" while it runs
  // in the real-time class, "normal" when its budget sent it back or it could not have that
  // class (realtime.h), "" without such a thread; and how often its budget demoted it.
  std::pair<std::string, uint64_t> latency_thread() const;
  // The other threads (the bulk lanes'): how many, how many of them run in the real-time class
  // now, and how often their budgets demoted them in all (realtime.h).
  struct BulkThreads {
    uint32_t threads = 0, realtime = 0;
    uint64_t demotions = 0;
  };
  BulkThreads bulk_threads() const;
  // A container's flow of one class, summed over the threads that carried it.
  std::vector<Router::QosFlowInfo> qos_flows() const;
  void set_qos(const qos::NamedRule& rule);
  bool tls() const { return threads_[0]->tls(); }

 private:
  RouterThread& thread(uint32_t i) { return *threads_[i]; }

  RouterConfig cfg_;
  ControlChannel control_;
  std::vector<std::unique_ptr<RouterThread>> threads_;
  std::map<uint32_t, uint32_t> ud_thread_;  // routed UD QP -> its thread (control thread's)
};

}  // namespace vrdma::daemon
