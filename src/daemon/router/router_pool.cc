// vrdmad's router threads as one router (router_pool.h).
#include "daemon/router/router_pool.h"

#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <tuple>

#include "common/clock.h"
#include "common/log.h"

namespace vrdma::daemon {

RouterPool::RouterPool(const RouterConfig& cfg, Directory& dir,
                       const std::function<Router::Hooks()>& hooks, uint64_t boot)
    : cfg_(cfg) {
  const RouterShared shared{std::make_shared<DoorbellTable>(), std::make_shared<qos::LimitTable>()};
  control_.fd.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  const uint32_t n = cfg_.threads = std::clamp<uint32_t>(cfg.threads, 1, RouterConfig::kMaxThreads);
  for (uint32_t i = 0; i < n; ++i) {
    RouterConfig rc = cfg_;
    rc.thread = i;
    if (i) rc.listen.clear();  // thread 0 accepts every link
    Router::Hooks h = hooks();
    if (n > 1)
      h.hand_over = [this](std::unique_ptr<Link> link) {
        auto held = std::make_shared<std::unique_ptr<Link>>(std::move(link));
        thread(cfg_.thread_of((*held)->lane)).post([held](Router& r) {
          r.take_link(std::move(*held), now_ns());
        });
      };
    threads_.push_back(
        std::make_unique<RouterThread>(rc, dir, std::move(h), boot, shared, control_));
  }
}

RouterPool::~RouterPool() {
  stop();
  threads_.clear();
}

int RouterPool::start() {
  if (!control_.fd) return EMFILE;
  for (auto& t : threads_)
    if (int err = t->start()) return err;
  return 0;
}

int RouterPool::run() {
  for (auto& t : threads_)
    if (int err = t->run()) return err;
  return 0;
}

void RouterPool::stop() {
  for (auto& t : threads_) t->stop();
}

void RouterPool::run_control_tasks() {
  uint64_t v;
  [[maybe_unused]] ssize_t n = ::read(control_.fd.get(), &v, sizeof(v));
  std::vector<Task> ts;
  if (!control_.tasks.take(ts)) return;
  for (auto& t : ts) t();
}

void RouterPool::post_to_control(Task t) {
  RouterThread* self = RouterThread::current();
  if (!self) {
    LOG_ERROR("router: a task for the control thread from outside the router threads");
    return;
  }
  self->post_to_control(std::move(t));
}

void RouterPool::connect_qp(bool local, uint32_t qpn, const LocalQp& qp, uint32_t dst_ipv4,
                            uint32_t dst_qpn, ConnectDone done) {
  const bool ud = qp.type == IBV_QPT_UD;
  if (threads_.size() == 1) return thread(0).connect_qp(local, qpn, qp, dst_ipv4, dst_qpn, done);
  // A UD QP already routed adds a destination on its own thread, in its own lane.
  if (auto it = ud_thread_.find(qpn); ud && it != ud_thread_.end())
    return thread(it->second).connect_qp(local, qpn, qp, dst_ipv4, dst_qpn, done);
  auto record = [this, ud, qpn, done = std::move(done)](uint32_t t) {
    return [this, ud, qpn, t, done](int status, uint32_t type, int fd) {
      if (status == 0 && ud) ud_thread_[qpn] = t;
      done(status, type, fd);
    };
  };
  // Thread 0 picks the lane (the bulk links' turn is kept there), and the lane's thread
  // connects it.
  thread(0).post([this, local, qpn, qp, dst_ipv4, dst_qpn, record = std::move(record)](Router& r) {
    const uint32_t lane = r.pick_lane(qpn, qp, local);
    const uint32_t t = cfg_.thread_of(lane);
    thread(t).connect_qp(local, qpn, qp, dst_ipv4, dst_qpn, record(t), static_cast<int>(lane));
  });
}

void RouterPool::connect_direct(uint32_t qpn, const LocalQp& qp, uint32_t dst_ipv4,
                                uint32_t dst_qpn, const std::array<uint8_t, 16>& ticket,
                                Router::DirectDone done, uint32_t flags) {
  thread(0).post([=, done = std::move(done)](Router& r) {
    r.connect_direct(
        qpn, qp, dst_ipv4, dst_qpn, ticket.data(),
        [done](int status, uint32_t type, uint16_t port, uint64_t key) {
          post_to_control([done, status, type, port, key] { done(status, type, port, key); });
        },
        flags);
  });
}

void RouterPool::attach_multicast(uint32_t qpn, const LocalQp& qp,
                                  std::function<void(int fd)> done) {
  // Its thread if the QP is routed already, else the main lane's (thread 0), from then on.
  uint32_t t = 0;
  if (auto it = ud_thread_.find(qpn); it != ud_thread_.end()) t = it->second;
  thread(t).attach_multicast(qpn, qp, [this, qpn, t, done = std::move(done)](int fd) {
    if (fd >= 0 && threads_.size() > 1) ud_thread_[qpn] = t;
    done(fd);
  });
}

void RouterPool::qp_freed(uint32_t qpn, std::function<void()> done) {
  ud_thread_.erase(qpn);
  if (threads_.size() == 1) return thread(0).qp_freed(qpn, std::move(done));
  auto left = std::make_shared<size_t>(threads_.size());
  for (auto& t : threads_)
    t->qp_freed(qpn, [left, done] {
      if (--*left == 0 && done) done();
    });
}

void RouterPool::client_gone(uint32_t client) {
  for (auto& t : threads_) t->client_gone(client);
}

void RouterPool::send_cm_to_host(uint32_t host_id, const wire::Cm& m,
                                 std::function<void(int err)> unreachable) {
  thread(cfg_.thread_of(wire::kMainLane)).send_cm_to_host(host_id, m, std::move(unreachable));
}

void RouterPool::unmap_when_idle(void* addr, size_t size) {
  std::shared_ptr<void> mapping(addr, [size](void* p) { ::munmap(p, size); });
  for (auto& t : threads_) t->unmap_when_idle(mapping);
}

std::vector<Router::LinkInfo> RouterPool::links() const {
  std::vector<Router::LinkInfo> all;
  for (uint32_t i = 0; i < threads_.size(); ++i)
    for (auto& l : threads_[i]->links()) {
      all.push_back(l);
      all.back().thread = i;
    }
  return all;
}

std::map<uint32_t, uint64_t> RouterPool::link_connects() const {
  std::map<uint32_t, uint64_t> all;
  for (auto& t : threads_)
    for (auto& [host, n] : t->link_connects()) all[host] += n;
  return all;
}

std::map<uint32_t, std::pair<uint64_t, uint64_t>> RouterPool::held_by_owner() const {
  std::map<uint32_t, std::pair<uint64_t, uint64_t>> all;
  for (auto& t : threads_)
    for (auto& [owner, h] : t->held_by_owner()) {
      all[owner].first += h.first;
      all[owner].second += h.second;
    }
  return all;
}

size_t RouterPool::routed_qps() const {
  size_t n = 0;
  for (auto& t : threads_) n += t->routed_qps();
  return n;
}

std::pair<std::string, uint64_t> RouterPool::latency_thread() const {
  for (auto& t : threads_)
    if (t->latency_only()) return {t->realtime() ? "realtime" : "normal", t->realtime_demotions()};
  return {"", 0};
}

RouterPool::BulkThreads RouterPool::bulk_threads() const {
  BulkThreads b;
  for (auto& t : threads_) {
    if (t->latency_only()) continue;
    ++b.threads;
    b.realtime += t->realtime() ? 1 : 0;
    b.demotions += t->realtime_demotions();
  }
  return b;
}

std::vector<Router::QosFlowInfo> RouterPool::qos_flows() const {
  if (threads_.size() == 1) return threads_[0]->qos_flows();
  std::vector<Router::QosFlowInfo> all;
  std::map<std::tuple<uint32_t, std::string, int>, size_t> at;
  for (auto& t : threads_)
    for (auto& f : t->qos_flows()) {
      auto [it, fresh] = at.try_emplace(std::make_tuple(f.ipv4, f.tenant, f.cls), all.size());
      if (fresh) {
        all.push_back(f);
        continue;
      }
      qos::FlowCounters& c = all[it->second].counters;
      c.bytes += f.counters.bytes;
      c.msgs += f.counters.msgs;
      c.delay_ns_sum += f.counters.delay_ns_sum;
      c.delay_ns_max = std::max(c.delay_ns_max, f.counters.delay_ns_max);
      c.holds += f.counters.holds;
    }
  return all;
}

void RouterPool::set_qos(const qos::NamedRule& rule) {
  for (auto& t : threads_) t->set_qos(rule);
}

}  // namespace vrdma::daemon
