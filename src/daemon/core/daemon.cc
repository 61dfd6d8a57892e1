#include "daemon/core/daemon.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <random>

#include "common/address.h"
#include "common/clock.h"
#include "common/log.h"
#include "daemon/core/socket_group.h"
#include "shm/sigbus_guard.h"

namespace vrdma::daemon {

namespace {

// The event loop's sources, by the high 32 bits of their epoll tag (the low bits: a client's
// id, or a router's or metrics server's own number): 1 the listener, 2 the wake-up, 3 the
// router's (its listening socket, before its thread runs: none), 4 the reload signal, 5 the
// metrics server's, 6 the router thread's queue of tasks for this loop.
constexpr uint64_t kListenTag = 1ull << 32;
constexpr uint64_t kWakeTag = 2ull << 32;
constexpr uint64_t kReloadTag = 4ull << 32;
constexpr uint64_t kRouterTasksTag = 6ull << 32;
static_assert(Router::kTagBase == 3ull << 32 && metrics::MetricsServer::kTagBase == 5ull << 32 &&
                  DirectPort::kTagBase == 7ull << 32,
              "each source of the event loop has a tag of its own");
constexpr int kPacketsPerWakeup = 64;  // then let other clients have a turn
constexpr int kAcceptsPerWakeup = 64;
// How often the namespaces of containers without clients are looked for (check_idle_addresses).
constexpr int64_t kIdleCheckNs = 1'000'000'000;

uint64_t random64() {
  uint64_t v = 0;
  if (::getrandom(&v, sizeof(v), 0) != sizeof(v)) {
    std::random_device rd;
    v = (static_cast<uint64_t>(rd()) << 32) | rd();
  }
  return v ? v : 1;
}

}  // namespace

Daemon::Daemon(DaemonConfig config)
    : cfg_(std::move(config)),
      identity_(cfg_.identity_options()),
      quotas_(cfg_.quotas),
      allow_(cfg_.allow),
      wake_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)),
      reload_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)),
      boot_(random64()),
      packet_(std::make_unique<Packet>()) {
  pacing_.apply(cfg_.qos);
}

Daemon::~Daemon() {
  shutdown_all();
}

int Daemon::start() {
  if (started_) return EALREADY;
  if (cfg_.socket_path.empty()) return EINVAL;
  if (!wake_ || !reload_) return EMFILE;
  shm::install_sigbus_guard();
  if (int err = identity_.init()) {
    LOG_ERROR("cannot open the daemon's own network namespace: %s", strerror(err));
    return err;
  }
  if (int err = listen_on_socket()) return err;
  epoll_.reset(::epoll_create1(EPOLL_CLOEXEC));
  if (!epoll_) return errno;
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kListenTag;
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, listen_.get(), &ev) < 0) return errno;
  ev.data.u64 = kWakeTag;
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, wake_.get(), &ev) < 0) return errno;
  ev.data.u64 = kReloadTag;
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, reload_.get(), &ev) < 0) return errno;
  spare_.reset(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  // Every container with a device gets its direct port (direct.cc): the pod network carries
  // the set-up of its connections, to other hosts and on this one.
  direct_ = std::make_unique<DirectPort>(epoll_.get(), DirectPortLimits{},
                                         [this](DirectPort::Arrival& a) { direct_arrival(a); });
  if (int err = start_services()) return err;
  started_at_ = std::chrono::steady_clock::now();
  if (int err = start_metrics()) return err;
  started_ = true;

  std::string tenants;
  for (const auto& t : cfg_.tenants) tenants += " " + t.name + "=" + cidr_text(t);
  LOG_INFO("listening on %s host_id=%u boot=%016llx tenants:%s", cfg_.socket_path.c_str(),
           cfg_.host_id, static_cast<unsigned long long>(boot_),
           tenants.empty() ? " (none)" : tenants.c_str());
  return 0;
}

int Daemon::listen_on_socket() {
  // Another daemon still serving this path? Do not steal its socket.
  if (int probe = unix_connect(cfg_.socket_path); probe >= 0) {
    ::close(probe);
    LOG_ERROR("%s: another vrdmad is serving this socket", cfg_.socket_path.c_str());
    return EADDRINUSE;
  }
  int fd = unix_listen(cfg_.socket_path);
  if (fd < 0) {
    LOG_ERROR("%s: cannot listen: %s", cfg_.socket_path.c_str(), strerror(-fd));
    return -fd;
  }
  listen_.reset(fd);
  // Connecting needs write permission on the socket: the daemon's user and the socket's group.
  // The group is set before the mode, so that the socket is never open to the wrong group.
  gid_t group = ::getegid();
  if (!cfg_.socket_group.empty()) {
    std::string why;
    if (!resolve_group(cfg_.socket_group, &group, &why)) {
      LOG_ERROR("%s: --socket-group: %s", cfg_.socket_path.c_str(), why.c_str());
      return EINVAL;
    }
  }
  if (::chown(cfg_.socket_path.c_str(), static_cast<uid_t>(-1), group) < 0 ||
      ::chmod(cfg_.socket_path.c_str(), 0660) < 0) {
    int err = errno;
    LOG_ERROR("%s: cannot set its group and mode: %s", cfg_.socket_path.c_str(), strerror(err));
    return err;
  }
  struct stat st {};
  if (::stat(cfg_.socket_path.c_str(), &st) == 0) {
    socket_dev_ = st.st_dev;
    socket_ino_ = st.st_ino;
  }
  return 0;
}

int Daemon::start_services() {
  std::string dir_error;
  directory_ = make_directory(cfg_.directory_config(), &dir_error);
  if (!directory_) {
    LOG_ERROR("directory: %s", dir_error.c_str());
    return EINVAL;
  }
  if (int err = directory_->start(cfg_.self_entry())) {
    LOG_ERROR("directory: cannot start: %s", strerror(err));
    return err;
  }
  cm_ = std::make_unique<CmService>(static_cast<CmPort&>(*this), *directory_);
  cm_->set_remote_timeout(int64_t(cfg_.cm_remote_timeout_s) * 1'000'000'000);
  if (cfg_.router_listen.empty()) return 0;
  return make_router(cfg_.router_config());
}

int Daemon::make_router(const RouterConfig& rc) {
  router_dir_ = std::make_unique<LockedDirectory>(*directory_, state_mu_);
  router_ = std::make_unique<RouterPool>(
      rc, *router_dir_, [this] { return router_hooks(); }, boot_);
  // The router's thread inherits the priority (nice is per thread on Linux).
  if (cfg_.router_nice && ::setpriority(PRIO_PROCESS, 0, cfg_.router_nice) < 0)
    LOG_WARN("router: cannot set priority %d: %s", cfg_.router_nice, strerror(errno));
  if (int err = router_->start()) return err;
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kRouterTasksTag;
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, router_->control_fd(), &ev) < 0) return errno;
  return 0;
}

void Daemon::stop() {
  uint64_t one = 1;
  ssize_t rc = ::write(wake_.get(), &one, sizeof(one));  // async-signal-safe
  (void)rc;
}

int Daemon::run() {
  if (!started_) return EINVAL;
  epoll_event events[64];
  int result = 0;
  bool stopping = false;
  // The daemon's state is this thread's while it handles events; the router thread takes it
  // (ports.cc) while this one sleeps in epoll.
  std::unique_lock<std::mutex> state(state_mu_);
  state_gen_.fetch_add(1, std::memory_order_release);  // odd: held
  if (router_) {
    if (int err = router_->run()) return err;
  }
  int64_t next_cm_tick = 0;
  while (!stopping) {
    int timeout = -1;
    if (router_) {
      int64_t now = now_ns();
      if (int64_t dl = cm_->next_deadline(now); dl >= 0)
        timeout = static_cast<int>(std::max<int64_t>(1, (dl - now + 999999) / 1000000));
    }
    if (!idle_addresses_.empty() || !direct_ports_.empty()) {
      // (The direct path's statistics are read as often: sample_direct_traffic.)
      const int idle_ms = static_cast<int>(kIdleCheckNs / 1000000);
      timeout = timeout < 0 ? idle_ms : std::min(timeout, idle_ms);
    }
    if (metrics_) timeout = metrics_timeout(timeout);
    if (int64_t dl = direct_->expire(now_ns()); dl >= 0) {
      const int ms = static_cast<int>(std::max<int64_t>(1, (dl - now_ns() + 999999) / 1000000));
      timeout = timeout < 0 ? ms : std::min(timeout, ms);
    }
    state_gen_.fetch_add(1, std::memory_order_release);  // even: free
    state.unlock();
    int n = ::epoll_wait(epoll_.get(), events, 64, timeout);
    state.lock();
    state_gen_.fetch_add(1, std::memory_order_release);  // odd: held
    if (n < 0) {
      if (errno == EINTR) continue;
      result = errno;
      LOG_ERROR("epoll_wait: %s", strerror(errno));
      break;
    }
    for (int i = 0; i < n; ++i) {
      uint64_t tag = events[i].data.u64;
      if (tag == kWakeTag) {
        uint64_t v;
        ssize_t rc = ::read(wake_.get(), &v, sizeof(v));
        (void)rc;
        stopping = true;
      } else if (tag == kReloadTag) {
        uint64_t v;
        ssize_t rc = ::read(reload_.get(), &v, sizeof(v));
        (void)rc;
        reload();
      } else if (tag == kListenTag) {
        accept_clients();
      } else if (tag == kRouterTasksTag) {
        if (router_) router_->run_control_tasks();
      } else if (metrics::MetricsServer::is_tag(tag)) {
        if (metrics_) metrics_->on_event(tag, events[i].events, now_ns());
      } else if (DirectPort::is_tag(tag)) {
        direct_->on_event(tag, events[i].events, now_ns());
      } else {
        on_client_event(static_cast<uint32_t>(tag), events[i].events);
      }
      reap();
    }
    check_idle_addresses(now_ns());
    sample_direct_traffic(now_ns());
    tickets_.expire(now_ns());
    if (metrics_) metrics_->expire(now_ns());
    if (router_) {
      int64_t now = now_ns();
      if (int64_t dl = cm_->next_deadline(now); dl >= 0 && now >= next_cm_tick) {
        cm_->tick(now);
        next_cm_tick = dl;
      }
      reap();
    }
  }
  LOG_INFO("stopping: %zu client(s) connected", clients_.size());
  // The router thread may be waiting for the state: let it have it while it stops.
  state_gen_.fetch_add(1, std::memory_order_release);
  state.unlock();
  if (router_) router_->stop();
  state.lock();
  if (router_) router_->run_control_tasks();  // what it left for this loop
  metrics_.reset();
  shutdown_all();
  direct_.reset();
  router_.reset();
  if (directory_) directory_->stop();
  return result;
}

bool Daemon::address_in_use(uint32_t ipv4, uint32_t except) const {
  for (const auto& [id, other] : clients_)
    if (id != except && !other->doomed && other->hello &&
        other->kind == static_cast<uint32_t>(proto::ClientKind::kVerbs) &&
        other->ident.ipv4 == ipv4)
      return true;
  return false;
}

void Daemon::withdraw_address(uint32_t ipv4) {
  if (cm_) cm_->remove_address(ipv4);
  if (ipv4 && directory_) directory_->withdraw_container(ipv4);
}

void Daemon::address_idle(const Client& c) {
  if (c.ident.host || !c.ident.ipv4) {
    if (cm_) cm_->remove_address(c.ident.ipv4);
    return;
  }
  if (!c.ident.named || c.ident.anonymous) return withdraw_address(c.ident.ipv4);
  idle_addresses_[c.ident.ipv4] = c.ident.netns;
}

void Daemon::check_idle_addresses(int64_t now) {
  if (idle_addresses_.empty() || now < next_idle_check_ns_) return;
  next_idle_check_ns_ = now + kIdleCheckNs;
  for (auto it = idle_addresses_.begin(); it != idle_addresses_.end();) {
    if (identity_.pinned(it->second)) {
      ++it;
      continue;
    }
    LOG_INFO("container %s is gone (its network namespace is no longer pinned): withdrawn",
             ipv4_text(it->first).c_str());
    withdraw_address(it->first);
    it = idle_addresses_.erase(it);
  }
}

void Daemon::shutdown_all() {
  // The daemon going away is not the clients' death: leave their arenas alone.
  std::vector<uint32_t> ids;
  for (auto& [id, c] : clients_) ids.push_back(id);
  for (uint32_t id : ids)
    if (auto it = clients_.find(id); it != clients_.end())
      drop(*it->second, "daemon stopping", false);
  doomed_.clear();
  if (listen_) {
    listen_.reset();
    struct stat st {};
    if (::stat(cfg_.socket_path.c_str(), &st) == 0 && st.st_dev == socket_dev_ &&
        st.st_ino == socket_ino_)
      ::unlink(cfg_.socket_path.c_str());
  }
  epoll_.reset();
  started_ = false;
}

Client* Daemon::find_live(uint32_t id) {
  auto it = clients_.find(id);
  return it == clients_.end() || it->second->doomed ? nullptr : it->second.get();
}

void Daemon::accept_clients() {
  for (int i = 0; i < kAcceptsPerWakeup; ++i) {
    int fd = ::accept4(listen_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      int err = errno;
      if (err == EINTR || err == ECONNABORTED) continue;
      if (err == EAGAIN || err == EWOULDBLOCK) return;
      if ((err == EMFILE || err == ENFILE) && spare_) {
        // Out of descriptors: the pending connection would keep the listening socket readable
        // and spin this loop. Accept it with the spare descriptor and close it at once.
        spare_.reset();
        int shed = ::accept4(listen_.get(), nullptr, nullptr, SOCK_CLOEXEC);
        if (shed >= 0) ::close(shed);
        spare_.reset(::open("/dev/null", O_RDONLY | O_CLOEXEC));
        LOG_WARN("out of file descriptors: refused a connection");
        continue;
      }
      LOG_ERROR("accept: %s", strerror(err));
      return;
    }
    auto c = std::make_unique<Client>();
    c->id = next_client_id_++;
    c->sock.reset(fd);
    if (!admit_client(*c)) continue;  // closes it
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.u64 = c->id;
    if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev) < 0) {
      LOG_ERROR("epoll_ctl: %s", strerror(errno));
      release_client(*c);
      if (c->identified) identity_.release(c->ident.netns);
      continue;
    }
    if (c->identified) {
      LOG_INFO("client %u connected: pid=%d uid=%u container=%s ip=%s tenant=%s%s%s", c->id,
               c->ident.pid, c->ident.uid, c->ident.container.c_str(),
               ipv4_text(c->ident.ipv4).c_str(), c->tenant.empty() ? "(none)" : c->tenant.c_str(),
               c->ident.anonymous ? " anonymous" : "",
               c->refused ? " (refused: over its container's connection quota)" : "");
    } else {
      LOG_WARN("client %u connected but cannot be identified: %s", c->id,
               c->identify_error.c_str());
    }
    clients_.emplace(c->id, std::move(c));
  }
}

void Daemon::on_client_event(uint32_t id, uint32_t events) {
  Client* c = find_live(id);
  if (!c) return;
  if (events & EPOLLIN) {
    for (int i = 0; i < kPacketsPerWakeup && !c->doomed; ++i) {
      int n = recv_packet(c->sock.get(), *packet_, MSG_DONTWAIT);
      if (n == -EAGAIN || n == -EWOULDBLOCK) return;
      if (n < 0) {
        packet_->close_fds();
        schedule_drop(*c,
                      n == -ECONNRESET ? "disconnected" : std::string("receive: ") + strerror(-n));
        return;
      }
      handle_packet(*c, *packet_, n);
    }
    return;
  }
  if (events & (EPOLLHUP | EPOLLERR | EPOLLRDHUP)) schedule_drop(*c, "disconnected");
}

bool Daemon::send(Client& c, proto::Op op, uint32_t seq, int32_t status, const void* payload,
                  size_t len, std::span<const int> fds) {
  if (c.doomed) return false;
  int rc = send_packet(c.sock.get(), op, seq, status, payload, len, fds);
  if (rc == 0) return true;
  schedule_drop(c, std::string("send failed: ") + strerror(rc));
  return false;
}

bool Daemon::reply_error(Client& c, const Decoded& d, int error) {
  return send(c, d.op, d.seq, error, nullptr, 0);
}

void Daemon::schedule_drop(Client& c, const std::string& why) {
  if (c.doomed) return;
  c.doomed = true;
  c.drop_reason = why;
  doomed_.push_back(c.id);
}

void Daemon::reap() {
  while (!doomed_.empty()) {
    uint32_t id = doomed_.back();
    doomed_.pop_back();
    auto it = clients_.find(id);
    if (it == clients_.end()) continue;
    drop(*it->second, it->second->drop_reason, true);
  }
}

void Daemon::drop(Client& c, const std::string& why, bool notify_peers) {
  const uint32_t id = c.id;
  c.doomed = true;
  if (c.sock) ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, c.sock.get(), nullptr);
  xrc_client_gone(c);  // its shared XRC_RECV QPs go to another holder first
  const std::set<uint32_t> qpns = registry_.qpns_of(id);
  const size_t nkeys = registry_.keys_of(id).size();
  if (metrics_)
    for (uint32_t q : qpns) metrics_retire(c, q);  // before anything marks them gone
  size_t notified = 0;
  if (notify_peers) {
    // 1. Tell peers that map the arena directly: the client is dead, its QPs are in error.
    if (c.arena.mapped()) {
      bool ok = c.arena.mark_dead();
      for (uint32_t q : qpns) ok = c.arena.mark_qp_gone(registry_.find_qp(q)->arena_offset) && ok;
      if (!ok) LOG_WARN("client %u: its arena could not be fully updated (shrunk?)", id);
    }
    // What senders map: every QP object says its QP is gone.
    for (auto& [fd_id, f] : c.fds)
      if (f.kind == proto::FdKind::kQpObject) f.object.mark_gone();
    // 2. Tell every other client whose QP was connected to one of them.
    for (const FatalNotice& n : registry_.notices_for_death(id)) {
      Client* peer = find_live(n.client);
      if (!peer) continue;
      proto::QpFatalEvent ev{n.qpn, static_cast<uint32_t>(proto::FatalReason::kPeerGone)};
      if (send(*peer, proto::Op::kQpFatal, 0, 0, &ev, sizeof(ev))) {
        ++notified;
        LOG_INFO("client %u: QP 0x%x fatal (peer client %u gone)", n.client, n.qpn, id);
      }
    }
  }
  // 3. Forget everything it had (its rdma_cm peers are told, unless the daemon is stopping).
  if (auto changed = mcast_.client_gone(id); !changed.empty()) {
    publish_groups(c);
    mcast_changed(changed);
  }
  if (router_) router_->client_gone(id);
  if (cm_) cm_->client_gone(id, notify_peers);
  direct_port_release(c);
  for (uint32_t q : qpns) direct_qp_freed(q);
  // 4. The last verbs client of a container's address gone: the address is withdrawn when the
  // container goes (published again when a client comes back).
  if (notify_peers && c.hello && c.kind == static_cast<uint32_t>(proto::ClientKind::kVerbs) &&
      !address_in_use(c.ident.ipv4, id))
    address_idle(c);
  release_client(c);
  registry_.remove_client(id);
  xrcds_.client_gone(id);
  const size_t nfds = c.fds.size();
  c.fds.clear();
  c.arena.unmap();
  if (c.identified) identity_.release(c.ident.netns);
  if (c.identified) {
    LOG_INFO(
        "client %u %s: pid=%d container=%s; freed %zu QP(s), %zu key(s), %zu fd(s); "
        "notified %zu peer QP(s)",
        id, why.c_str(), c.ident.pid, c.ident.container.c_str(), qpns.size(), nkeys, nfds,
        notified);
  } else {
    LOG_INFO("client %u %s (unidentified)", id, why.c_str());
  }
  clients_.erase(id);  // closes the socket; `c` is gone
}

}  // namespace vrdma::daemon
