// The router's thread and the queues between it and the control thread (router_thread.h).
#include "daemon/router/router_thread.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <string>

#include "common/clock.h"
#include "common/cpu_list.h"
#include "common/log.h"

namespace vrdma::daemon {

namespace {

// The router thread's epoll: its wake-up eventfd, and the Router's own tags (Router::kTagBase).
constexpr uint64_t kWakeTag = 7ull << 32;
static_assert(Router::kTagBase != kWakeTag, "the wake-up has a tag of its own");
// The snapshot status reads is refreshed at most this often while the router works.
constexpr int64_t kPublishNs = 50'000'000;
// A busy thread's real-time budget is metered at least this often (realtime.h).
constexpr int64_t kMeterNs = 50'000;

void drain_eventfd(int fd) {
  uint64_t v;
  [[maybe_unused]] ssize_t n = ::read(fd, &v, sizeof(v));
}

void ring(int fd) {
  uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(fd, &one, sizeof(one));
}

thread_local RouterThread* current_thread = nullptr;

// A router thread woken by a frame or a doorbell should not wait for a core behind programs
// spinning on memory: every router thread runs in the real-time class while its work comes in
// short bursts (realtime.h), with CAP_SYS_NICE; a bulk thread that streams runs dry of its
// budget and is scheduled as any thread while it does. The latency class's thread, which
// carries nothing else, also has a higher CFS weight for when it is in the normal class (nice
// -10, which also needs the capability). Threads sleep whenever they have nothing to do
// (unless --router-poll-us says to poll on a while), so this buys promptness, not more CPU
// than the traffic needs.
constexpr int kLatencyThreadNice = -10;

// epoll_wait's timeout for a wake at `deadline` (ns): whole milliseconds, rounded up, at least 1.
int ms_until(int64_t deadline, int64_t now) {
  return static_cast<int>(std::max<int64_t>(1, (deadline - now + 999'999) / 1'000'000));
}

// The calling thread runs only on `cpus` (RouterConfig::cpus). 0 or an errno.
int pin_this_thread(const std::vector<uint32_t>& cpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (uint32_t c : cpus)
    if (c < CPU_SETSIZE) CPU_SET(c, &set);
  return ::sched_setaffinity(0, sizeof(set), &set) == 0 ? 0 : errno;
}

void favour_this_thread() {
  const pid_t tid = static_cast<pid_t>(::syscall(SYS_gettid));
  if (::setpriority(PRIO_PROCESS, static_cast<id_t>(tid), kLatencyThreadNice) != 0)
    LOG_INFO("router: the latency thread keeps the default priority (setpriority: %s)",
             strerror(errno));
}

}  // namespace

RouterThread::RouterThread(const RouterConfig& cfg, Directory& dir, Router::Hooks hooks,
                           uint64_t boot, RouterShared shared, ControlChannel& control)
    : index_(cfg.thread),
      latency_only_(cfg.threads > 1 && cfg.thread == cfg.thread_of(wire::kLatencyLane)),
      cpus_(cfg.cpus),
      poll_ns_(cfg.poll_ns),
      epoll_(::epoll_create1(EPOLL_CLOEXEC)),
      wake_fd_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)),
      control_(control) {
  hooks.reclaimed = [this] { reclaim_point(); };
  router_ = std::make_unique<Router>(cfg, dir, std::move(hooks), boot, std::move(shared));
}

RouterThread::~RouterThread() {
  stop();
  router_.reset();
  unmaps_.clear();
}

RouterThread* RouterThread::current() {
  return current_thread;
}

int RouterThread::start() {
  if (!epoll_ || !wake_fd_ || !control_.fd) return EMFILE;
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kWakeTag;
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, wake_fd_.get(), &ev) < 0) return errno;
  if (int err = router_->start(epoll_.get())) return err;
  tls_ = router_->tls();
  return 0;
}

int RouterThread::run() {
  if (running_) return EALREADY;
  stopping_.store(false);
  try {
    thread_ = std::thread([this] { loop(); });
    // "vrdmad-router0": what ps -L and /proc/<pid>/task/*/comm show.
    const std::string name = "vrdmad-router" + std::to_string(index_);
    pthread_setname_np(thread_.native_handle(), name.c_str());
  } catch (const std::system_error& e) {
    LOG_ERROR("router: cannot start its thread: %s", e.what());
    return EAGAIN;
  }
  running_ = true;
  return 0;
}

void RouterThread::stop() {
  if (!running_) return;
  stopping_.store(true);
  ring(wake_fd_.get());
  thread_.join();
  running_ = false;
}

void RouterThread::wake() {
  ring(wake_fd_.get());
}

void RouterThread::post(std::function<void(Router&)> t) {
  if (tasks_.push([this, t = std::move(t)] { t(*router_); })) wake();
}

void RouterThread::flush_outbox() {
  if (control_.tasks.push_all(outbox_)) ring(control_.fd.get());
}

void RouterThread::connect_qp(bool local, uint32_t qpn, const LocalQp& qp, uint32_t dst_ipv4,
                              uint32_t dst_qpn, ConnectDone done, int lane) {
  post([this, local, qpn, qp, dst_ipv4, dst_qpn, lane, done = std::move(done)](Router& r) mutable {
    uint32_t owner = qp.owner;
    auto connect = local ? &Router::connect_local : &Router::connect_qp;
    (r.*connect)(
        qpn, qp, dst_ipv4, dst_qpn,
        [this, owner, done = std::move(done)](int status, uint32_t type) {
          // The doorbell is watched from here, by the router thread that carries the QP.
          int fd = status == 0 ? router_->doorbell_for(owner) : -1;
          post_to_control([done, status, type, fd] { done(status, type, fd); });
        },
        lane);
  });
}

void RouterThread::attach_multicast(uint32_t qpn, const LocalQp& qp,
                                    std::function<void(int fd)> done) {
  post([this, qpn, qp, done = std::move(done)](Router& r) mutable {
    int fd = r.attach_multicast(qpn, qp) == 0 ? r.doorbell_for(qp.owner) : -1;
    post_to_control([done, fd] { done(fd); });
  });
}

void RouterThread::qp_freed(uint32_t qpn, std::function<void()> done) {
  post([this, qpn, done = std::move(done)](Router& r) mutable {
    r.qp_freed(qpn);
    if (done) post_to_control(std::move(done));
  });
}

void RouterThread::client_gone(uint32_t client) {
  post([client](Router& r) { r.client_gone(client); });
}

void RouterThread::send_cm_to_host(uint32_t host_id, const wire::Cm& m,
                                   std::function<void(int err)> unreachable) {
  post([this, host_id, m, unreachable = std::move(unreachable)](Router& r) {
    int err = r.send_cm_to_host(host_id, m);
    if (err && unreachable) post_to_control([unreachable, err] { unreachable(err); });
  });
}

void RouterThread::unmap_when_idle(std::shared_ptr<void> mapping) {
  if (!running_) return;  // nothing of this thread points into it
  post([this, m = std::move(mapping)](Router&) { unmaps_.push_back(m); });
}

void RouterThread::reclaim_point() {
  unmaps_.clear();
}

void RouterThread::meter(int64_t from, int64_t to) {
  const bool was = realtime_->realtime();
  if (realtime_->worked(from, to) == was) return;
  if (int err = set_realtime(!was, rt_priority())) {
    // The budget and status keep saying where the thread is. Refused a return to the
    // real-time class, it stays in the normal class for good; refused the way out (which the
    // kernel does not refuse a thread lowering itself), it tries again at the next meter.
    realtime_->refused();
    if (!was) {
      LOG_WARN("router: thread %u cannot return to the real-time class (%s); it "
               "stays in the normal class",
               index_, strerror(err));
      realtime_.reset();
    } else if (!realtime_refused_) {
      LOG_WARN("router: thread %u cannot leave the real-time class: %s", index_, strerror(err));
    }
    realtime_refused_ = true;
    return;
  }
  realtime_demotions_.store(realtime_->demotions(), std::memory_order_relaxed);
  realtime_now_.store(!was, std::memory_order_relaxed);
}

void RouterThread::publish(int64_t now) {
  Snapshot s;
  s.links = router_->links();
  s.link_connects = router_->link_connects();
  s.held = router_->held_by_owner();
  s.routed_qps = router_->routed_qps();
  s.qos = router_->qos_flows();
  {
    std::lock_guard<std::mutex> g(snap_mu_);
    snap_ = std::move(s);
  }
  published_ns_ = now;
  changed_ = false;
}

std::vector<Router::LinkInfo> RouterThread::links() const {
  std::lock_guard<std::mutex> g(snap_mu_);
  return snap_.links;
}

std::map<uint32_t, uint64_t> RouterThread::link_connects() const {
  std::lock_guard<std::mutex> g(snap_mu_);
  return snap_.link_connects;
}

std::map<uint32_t, std::pair<uint64_t, uint64_t>> RouterThread::held_by_owner() const {
  std::lock_guard<std::mutex> g(snap_mu_);
  return snap_.held;
}

size_t RouterThread::routed_qps() const {
  std::lock_guard<std::mutex> g(snap_mu_);
  return snap_.routed_qps;
}

std::vector<Router::QosFlowInfo> RouterThread::qos_flows() const {
  std::lock_guard<std::mutex> g(snap_mu_);
  return snap_.qos;
}

void RouterThread::set_qos(const qos::NamedRule& rule) {
  post([rule](Router& r) { r.set_qos(rule); });
}

void RouterThread::loop() {
  current_thread = this;
  if (latency_only_) favour_this_thread();
  if (!cpus_.empty()) {
    if (int err = pin_this_thread(cpus_))
      LOG_ERROR("router: thread %u runs on any CPU, not only on %s (sched_setaffinity: %s)",
                index_, cpu_list_text(cpus_).c_str(), strerror(err));
  }
  if (int err = set_realtime(true, rt_priority())) {
    LOG_INFO("router: thread %u stays in the normal scheduling class (%s)", index_,
             strerror(err));
  } else {
    realtime_.emplace(now_ns());
    realtime_now_.store(true, std::memory_order_relaxed);
  }
  int64_t awake_since = now_ns();  // when the thread last woke from a wait in epoll
  epoll_event events[64];
  std::vector<Task> ts;
  int64_t last_work = 0;
  while (!stopping_.load(std::memory_order_relaxed)) {
    if (tasks_.take(ts)) {
      for (auto& t : ts) t();
      ts.clear();
      changed_ = true;
    }
    int64_t now = now_ns();
    bool work = router_->poll(now);
    int timeout = 0;
    bool sleeping = false;
    if (work) {
      last_work = now;
      changed_ = true;
    } else if (now - last_work < poll_ns_) {
      // Polling on a little longer: more work is likely to follow.
    } else if (!router_->prepare_sleep()) {
      last_work = now;
    } else {
      sleeping = true;
      timeout = -1;
      if (int64_t dl = router_->next_deadline(now); dl >= 0) timeout = ms_until(dl, now);
    }
    // The control thread hears of what happened before the router sleeps, and status sees it.
    if ((changed_ && (sleeping || now - published_ns_ >= kPublishNs)) || !outbox_.empty())
      publish(now);
    flush_outbox();
    if (realtime_ && (sleeping || now - awake_since >= kMeterNs)) {
      const int64_t t = now_ns();
      meter(awake_since, t);
      awake_since = t;
      // Run dry and asleep: back to the real-time class as soon as the budget allows.
      if (sleeping && realtime_ && !realtime_->realtime()) {
        const int ms = ms_until(realtime_->promote_at(), t);
        timeout = timeout < 0 ? ms : std::min(timeout, ms);
      }
    }
    // After every pass, even a busy one: epoll says which links have bytes (a pass reads
    // no other), which doorbells rang, which links wait to be accepted.
    int n = ::epoll_wait(epoll_.get(), events, 64, timeout);
    if (n < 0) {
      if (errno == EINTR) continue;
      LOG_ERROR("router: epoll_wait: %s", strerror(errno));
      break;
    }
    if (n > 0) changed_ = true;
    now = now_ns();
    if (sleeping) awake_since = now;
    for (int i = 0; i < n; ++i) {
      uint64_t tag = events[i].data.u64;
      if (tag == kWakeTag)
        drain_eventfd(wake_fd_.get());
      else
        router_->on_event(tag, events[i].events, now);
    }
  }
  publish(now_ns());
  flush_outbox();
}

}  // namespace vrdma::daemon
