#include "engine/device.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>

#include "common/log.h"
#include "engine/direct.h"
#include "engine/objects.h"
#include "engine/qp.h"
#include "engine/self_source.h"
#include "engine/thread_stop.h"
#include "engine/write_hold.h"
#include "engine/xrc_shared_qp.h"
#include "shm/shared_file.h"

namespace vrdma {

namespace {
// The progress thread's epoll tags below the descriptors of direct connections (>= 0).
constexpr uint64_t kWakeEvent = ~0ull;
constexpr uint64_t kControlEvent = ~0ull - 1;
std::mutex g_mu;
std::shared_ptr<Device> g_device;
std::mutex g_cm_mu;
Device::CmHandler g_cm_handler;
}  // namespace

void Device::set_cm_handler(CmHandler h) {
  std::lock_guard lock(g_cm_mu);
  g_cm_handler = std::move(h);
}

std::shared_ptr<Device> Device::get() {
  std::lock_guard lock(g_mu);
  if (g_device && g_device->pid_ != ::getpid()) {
    // A child of fork(): the parent's device (its connection to vrdmad, its arena, its progress
    // thread, which the child does not have) stays the parent's. It is left alone, never
    // destroyed here, and the child gets a device of its own.
    new std::shared_ptr<Device>(std::move(g_device));
  }
  if (g_device && !g_device->lost()) return g_device;
  std::shared_ptr<Device> dev(new Device());
  if (int e = dev->init()) {
    errno = e;
    return nullptr;
  }
  // A lost device stays alive as long as contexts opened on it (they hold it).
  g_device = dev;
  return dev;
}

Device::~Device() {
  stop_ = true;
  wake();
  if (thread_.joinable()) thread_.join();
  for (auto* p : pacing_)
    if (p) ::munmap(p, shm::kPacingPageSize);
  if (wake_fd_ >= 0) ::close(wake_fd_);
  if (epoll_fd_ >= 0) ::close(epoll_fd_);
  if (router_doorbell_ >= 0) ::close(router_doorbell_);
}

void Device::set_router_doorbell(int fd) {
  const char* y = getenv("VRDMA_ROUTED_YIELD");
  yield_.store(!(y && y[0] == '0'), std::memory_order_relaxed);
  int expected = -1;
  if (!router_doorbell_.compare_exchange_strong(expected, fd)) ::close(fd);
}

int Device::init() {
  std::string path = socket_path_from_env();
  bool refused = false;
  if (int e = control_.connect(path, info_, &refused)) {
    if (const char* q = getenv("VRDMA_QUIET"); !q || !*q) {
      if (refused)
        fprintf(stderr,
                "vrdma: vrdmad at %s gives this process no device: %s (vrdmad's log "
                "says why)\n",
                path.c_str(), strerror(e));
      else
        fprintf(stderr, "vrdma: cannot reach vrdmad at %s: %s\n", path.c_str(), strerror(e));
    }
    return e;
  }
  if (int e = arena_.create(info_.client_id)) return e;
  // How registrations keep the other threads' writes, for vrdma status.
  arena_.header()->page_move_guard.store(static_cast<uint32_t>(WriteHold::source()),
                                         std::memory_order_relaxed);
  int afd = arena_.fd();
  proto::PutFdReq req{shm::kArenaFdId, static_cast<uint32_t>(proto::FdKind::kArena),
                      shm::kArenaSize, 0, 0};
  if (int e = control_.call(proto::Op::kPutFd, req, nullptr, &afd, 1)) return e;
  memory_ = std::make_unique<MemoryRegistry>(control_, arena_.mr_table());
  if (int e = memory_->init()) return e;
  self_source_ = std::make_unique<SelfSource>(control_, *memory_);
  map_pacing();
  control_.on_event([this](const Packet& p) { handle_event(p); });
  control_.on_lost([this] { lost_ = true; });
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd_ < 0) return errno;
  epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  if (epoll_fd_ < 0) return errno;
  epoll_event wev{};
  wev.events = EPOLLIN;
  wev.data.u64 = kWakeEvent;
  epoll_event cev{};
  cev.events = EPOLLIN;
  cev.data.u64 = kControlEvent;
  if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &wev) < 0 ||
      ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, control_.fd(), &cev) < 0)
    return errno;
  // The library's own lines (the transport's) go to the program's stderr: errors only, unless
  // $VRDMA_LOG_LEVEL says otherwise (warn, info, debug).
  set_log_program("vrdma");
  const char* level = getenv("VRDMA_LOG_LEVEL");
  set_log_level(parse_log_level(level ? level : "").value_or(LogLevel::kError));
  // The progress thread must not take signals meant for the application.
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &old);
  thread_ = std::thread([this] { progress_loop(); });
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  return 0;
}

// The pacing pages of the container and its tenant. Without them (a vrdmad that has none to
// give) this process's same-host traffic is not limited.
void Device::map_pacing() {
  auto reply = std::make_unique<Packet>();
  if (control_.call(proto::Op::kPacing, nullptr, 0, reply.get()) || reply->nfds != 2) {
    reply->close_fds();
    return;
  }
  void* base[2] = {};
  for (int i = 0; i < 2; ++i) {
    uint64_t size = 0;
    if (shm::map_sealed(reply->fds[i], PROT_READ | PROT_WRITE, shm::kPacingPageSize, base[i],
                        size) == 0 &&
        size < sizeof(shm::PacingPage)) {
      ::munmap(base[i], size);
      base[i] = nullptr;
    }
  }
  reply->close_fds();
  if (base[0] && base[1] &&
      static_cast<shm::PacingPage*>(base[0])->magic == shm::PacingPage::kMagic &&
      static_cast<shm::PacingPage*>(base[1])->magic == shm::PacingPage::kMagic) {
    pacing_[0] = static_cast<shm::PacingPage*>(base[0]);
    pacing_[1] = static_cast<shm::PacingPage*>(base[1]);
    return;
  }
  for (void* b : base)
    if (b) ::munmap(b, shm::kPacingPageSize);
}

std::shared_ptr<shm::Peer> Device::self_peer() {
  auto p = std::make_shared<shm::Peer>(*self_source_, info_.client_id);
  p->use_arena(arena_.base(), shm::kArenaSize);
  // What a frame in flight points into stays mapped until the connection reclaims it.
  p->defer_retire();
  return p;
}

std::shared_ptr<DirectLink> Device::direct_link(uint64_t key) {
  std::lock_guard lock(direct_mu_);
  auto it = direct_links_.find(key);
  if (it == direct_links_.end()) return nullptr;
  auto c = it->second.lock();
  if (!c || !c->live()) {
    direct_links_.erase(it);
    return nullptr;
  }
  return c;
}

void Device::add_direct_link(std::shared_ptr<DirectLink> c) {
  {
    std::lock_guard lock(direct_mu_);
    direct_links_[c->key()] = c;
    new_direct_.push_back(std::move(c));
  }
  wake();
}

Qp* Device::pin_qp(uint32_t qpn) {
  std::lock_guard lock(qps_mu_);
  auto it = qps_.find(qpn);
  if (it == qps_.end()) return nullptr;
  it->second->pin();
  return it->second;
}

void Device::unpin_qp(Qp* qp) {
  qp->unpin();
}

void Device::queue_fatal(uint32_t qpn, proto::FatalReason why) {
  {
    std::lock_guard lock(fatal_mu_);
    fatal_qpns_.push_back({qpn, static_cast<uint32_t>(why)});
  }
  wake();
}

std::shared_ptr<shm::Peer> Device::peer(uint32_t client_id, int& err) {
  std::lock_guard lock(peers_mu_);
  // Client ids are never reused: one Peer per client for the process's life. What it maps
  // comes with each connection (GetFd over the connected QP).
  auto it = peers_.find(client_id);
  if (it != peers_.end()) return it->second;
  auto p = std::make_shared<shm::Peer>(fd_source_, client_id);
  peers_[client_id] = p;
  err = 0;
  return p;
}

void Device::add_qp(Qp* qp) {
  std::lock_guard lock(qps_mu_);
  qps_[qp->qpn()] = qp;
}

void Device::remove_qp(Qp* qp) {
  {
    std::lock_guard lock(blocked_mu_);
    if (blocked_.erase(qp)) blocked_count_.fetch_sub(1);
  }
  std::lock_guard lock(qps_mu_);
  auto it = qps_.find(qp->qpn());
  if (it != qps_.end() && it->second == qp) qps_.erase(it);
}

void Device::mark_blocked(Qp* qp) {
  bool added;
  {
    std::lock_guard lock(blocked_mu_);
    added = blocked_.insert(qp).second;
    if (added) blocked_count_.fetch_add(1);
  }
  // The progress thread, once busy, keeps a short timed sleep for a while, so
  // a QP that blocks again and again (a receiver slower than its sender) costs
  // no wake-up system call each time.
  if (added && sleeping_forever_.load()) wake();
}

void Device::wake() {
  uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(wake_fd_, &one, sizeof(one));
}

int64_t Device::retry_blocked(bool from_thread) {
  std::lock_guard lock(blocked_mu_);
  int64_t now = now_ns(), next = -1;
  for (auto it = blocked_.begin(); it != blocked_.end();) {
    int64_t t = (*it)->retry(now, false);
    if (t < 0) {
      it = blocked_.erase(it);
      blocked_count_.fetch_sub(1);
      continue;
    }
    if (next < 0 || t < next) next = t;
    ++it;
  }
  (void)from_thread;
  return next;
}

void Device::progress_blocked() {
  retry_blocked(false);
}

void Device::handle_event(const Packet& pkt) {
  if (proto::is_cm_event(pkt.header.op)) {
    std::lock_guard lock(g_cm_mu);
    if (g_cm_handler) g_cm_handler(pkt);
    return;
  }
  if (pkt.header.op == static_cast<uint16_t>(proto::Op::kOdpFault)) {
    // A peer wants a range of an implicit ODP MR: registered by the registry's own thread.
    if (auto* ev = pkt.as<proto::OdpFaultEvent>())
      memory_->request_fault(ev->key, ev->addr, ev->length);
    return;
  }
  if (pkt.header.op == static_cast<uint16_t>(proto::Op::kDirectAccepted)) {
    // The other end of a direct connection to one of our QPs: taken in by the progress thread
    // (the caller may hold locks of the QP).
    const auto* ev = pkt.as<proto::DirectAcceptedEvent>();
    if (!ev || pkt.nfds != 1) return;
    UniqueFd fd(::fcntl(pkt.fds[0], F_DUPFD_CLOEXEC, 0));
    if (!fd) return;
    {
      std::lock_guard lock(direct_mu_);
      inbound_.push_back(Inbound{std::move(fd), *ev});
    }
    wake();
    return;
  }
  if (pkt.header.op != static_cast<uint16_t>(proto::Op::kQpFatal)) return;
  auto* ev = pkt.as<proto::QpFatalEvent>();
  if (!ev) return;
  // This may run inside a control call made with a QP lock held: defer the
  // work to the progress thread.
  {
    std::lock_guard lock(fatal_mu_);
    fatal_qpns_.push_back({ev->qpn, ev->reason});
  }
  wake();
}

void Device::handle_fatal_qps() {
  std::vector<std::pair<uint32_t, uint32_t>> qpns;
  {
    std::lock_guard lock(fatal_mu_);
    qpns.swap(fatal_qpns_);
  }
  for (auto [qpn, reason] : qpns) {
    std::lock_guard lock(qps_mu_);
    auto it = qps_.find(qpn);
    if (it == qps_.end()) {
      for (SharedRecvQp* q : shared_qps_)
        if (q->qpn() == qpn) {
          q->fatal();
          break;
        }
      continue;
    }
    // The router already completed the QP's work with an error: only the receives are left.
    bool routed = reason == static_cast<uint32_t>(proto::FatalReason::kRouted);
    it->second->fatal(routed ? IBV_EVENT_QP_LAST_WQE_REACHED : IBV_EVENT_QP_FATAL, !routed);
  }
}

// vrdmad went away (a restart, an upgrade, a crash). Data between containers of this host moves
// through shared memory and on the direct path through the processes' own sockets: those QPs go
// on. The QPs whose requests vrdmad's router carried fail as a fabric's would when a switch
// goes. What needs vrdmad (new QPs, registrations, rdma_cm) fails with ENODEV on this device;
// a device opened again (ibv_get_device_list) reaches the vrdmad that comes back.
void Device::handle_lost() {
  std::vector<Qp*> qps;
  std::lock_guard qlock(qps_mu_);
  for (auto& [n, qp] : qps_) qps.push_back(qp);
  size_t failed = 0;
  for (Qp* qp : qps)
    if (qp->on_router()) {
      qp->fatal(IBV_EVENT_QP_FATAL);
      ++failed;
    }
  if (const char* q = getenv("VRDMA_QUIET"); !q || !*q)
    fprintf(stderr,
            "vrdma: lost vrdmad: %zu QP(s) on its router failed, %zu go on; new objects need "
            "the device opened again\n",
            failed, qps.size() - failed);
}

void Device::add_shared_qp(SharedRecvQp* q) {
  std::lock_guard lock(qps_mu_);
  shared_qps_.push_back(q);
}

void Device::remove_shared_qp(SharedRecvQp* q) {
  std::lock_guard lock(qps_mu_);
  std::erase(shared_qps_, q);
}

void Device::add_context(Context* c) {
  std::lock_guard lock(contexts_mu_);
  contexts_.insert(c);
}

void Device::remove_context(Context* c) {
  std::lock_guard lock(contexts_mu_);
  contexts_.erase(c);
}

void Device::adopt_direct() {
  std::vector<std::shared_ptr<DirectLink>> fresh;
  std::vector<Inbound> inbound;
  {
    std::lock_guard lock(direct_mu_);
    fresh.swap(new_direct_);
    inbound.swap(inbound_);
  }
  for (Inbound& in : inbound) {
    // A new connection from another process: its first QP pair joins it, and the progress
    // thread watches it. A QP gone meanwhile lets it close.
    Qp* qp = pin_qp(in.ev.dst_qpn);
    if (!qp) continue;
    auto c = std::make_shared<DirectLink>(*this, std::move(in.fd), 0, false);
    if (c->attach_receiver(*qp, in.ev.src_ipv4, in.ev.src_qpn) == 0) fresh.push_back(c);
    unpin_qp(qp);
  }
  {
    std::lock_guard lock(direct_mu_);
    for (auto& c : new_direct_) fresh.push_back(std::move(c));
    new_direct_.clear();
  }
  for (auto& c : fresh) {
    const int fd = c->fd();
    if (!c->live() || watched_.count(fd)) continue;
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP | EPOLLET;
    ev.data.u64 = static_cast<uint64_t>(fd);
    if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) < 0) continue;
    watched_.emplace(fd, Watched{std::move(c), ev.events});
    // What arrived before it was watched: the first drive reads it.
    watched_[fd].conn->drive(now_ns(), DirectLink::Driver::kProgress);
  }
}

int64_t Device::progress_direct(const epoll_event* events, int n) {
  constexpr int64_t kAwakeNs = 1'000'000'000;
  constexpr uint32_t kIdleWakes = 8;
  const int64_t now = now_ns();
  // Sockets are watched edge-triggered: one wake per arrival, never a loop around a socket a
  // poller is reading (DirectLink::drive hands an arrival that finds it busy to the poller).
  for (int i = 0; i < n; ++i) {
    const uint64_t tag = events[i].data.u64;
    if (tag == kWakeEvent || tag == kControlEvent) continue;
    auto it = watched_.find(static_cast<int>(tag));
    if (it == watched_.end()) continue;
    Watched& w = it->second;
    const uint64_t before = w.conn->one_sided();
    w.conn->drive(now, DirectLink::Driver::kProgress);
    // While the program polls, what it polls for (its receives, its requests' answers) is its
    // poller's to take: this thread's wakes for them only take its core. It stays awake for
    // one-sided requests, which no poll of the target program waits for.
    const bool poller = w.conn->last_poll() + DirectLink::kPolledNs > now;
    w.idle_wakes = poller && w.conn->one_sided() == before ? w.idle_wakes + 1 : 0;
    if (w.idle_wakes >= kIdleWakes) {
      w.awake_until = 0;
      w.idle_wakes = 0;
    }
  }
  int64_t next = -1;
  for (auto it = watched_.begin(); it != watched_.end();) {
    DirectLink& c = *it->second.conn;
    int64_t due = c.deadline();
    // While a program polls the connection's CQs, this thread stands down: it does not wake
    // for the socket's bytes (the poller reads them), and looks again when the poller may have
    // stopped.
    const int64_t polled_until = c.last_poll() + DirectLink::kPolledNs;
    const bool polled = polled_until > now && now >= it->second.awake_until;
    if (!polled && !(it->second.events & EPOLLIN)) {
      // The poller stopped: from now on it leaves nothing unwritten, and what it left goes now
      // (waiting for a poll that is under way). Requests that arrived meanwhile waited for
      // nobody: this connection's other side needs this thread's answers for a while.
      c.stand_down(false);
      const uint64_t before = c.received();
      c.drive(now, DirectLink::Driver::kPost);
      if (c.received() != before) it->second.awake_until = now + kAwakeNs;
      due = c.deadline();
    } else if (due >= 0 && due <= now) {
      c.drive(now, DirectLink::Driver::kProgress);
      due = c.deadline();
    }
    if (!c.live()) {
      ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, it->first, nullptr);
      it = watched_.erase(it);
      continue;
    }
    if (polled) c.stand_down(true);
    if (polled && (due < 0 || polled_until < due)) due = polled_until;
    // Room in a full socket is waited for only while frames wait for it.
    const uint32_t want =
        (polled ? 0u : EPOLLIN) | EPOLLRDHUP | EPOLLET | (c.wants_room() ? EPOLLOUT : 0u);
    if (want != it->second.events) {
      epoll_event ev{};
      ev.events = want;
      ev.data.u64 = static_cast<uint64_t>(it->first);
      ::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, it->first, &ev);
      it->second.events = want;
    }
    if (due >= 0 && (next < 0 || due < next)) next = due;
    ++it;
  }
  return next;
}

void Device::progress_loop() {
  ThreadStop::Exempt exempt;                // never writes into memory being registered
  constexpr int64_t kLinger = 100'000'000;  // ns of timed sleeps after the last blocked QP
  constexpr int64_t kTick = 1'000'000;
  bool lost_handled = false;
  int64_t busy_until = 0;
  int64_t direct_next = -1;
  epoll_event events[64];
  for (;;) {
    if (stop_) break;
    int64_t now = now_ns();
    int64_t next = has_blocked() ? retry_blocked(true) : -1;
    if (next >= 0) {
      busy_until = now + kLinger;
    } else if (now < busy_until) {
      next = now + kTick;
    }
    if (direct_next >= 0 && (next < 0 || direct_next < next)) next = direct_next;
    sleeping_forever_.store(next < 0);
    // A QP blocked between the check above and the store must not be missed.
    if (next < 0 && blocked_count_.load() != 0) continue;
    timespec ts, *tsp = nullptr;
    if (next >= 0) {
      int64_t wait = next - now_ns();
      if (wait < 0) wait = 0;
      ts.tv_sec = wait / 1000000000;
      ts.tv_nsec = wait % 1000000000;
      tsp = &ts;
    }
    int n = ::epoll_pwait2(epoll_fd_, events, 64, tsp, nullptr);
    if (n < 0) {
      if (errno != EINTR) break;
      n = 0;
    }
    for (int i = 0; i < n; ++i) {
      if (events[i].data.u64 == kWakeEvent) {
        uint64_t v;
        [[maybe_unused]] ssize_t r = ::read(wake_fd_, &v, sizeof(v));
      } else if (events[i].data.u64 == kControlEvent) {
        if (!lost_handled) control_.drain();
        if (control_.lost())  // its end of the socket keeps saying so
          ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, control_.fd(), nullptr);
      }
    }
    adopt_direct();
    direct_next = progress_direct(events, n);
    handle_fatal_qps();
    if (control_.lost() && !lost_handled) {
      lost_handled = true;
      lost_ = true;
      handle_lost();
    }
  }
  watched_.clear();
}

}  // namespace vrdma
