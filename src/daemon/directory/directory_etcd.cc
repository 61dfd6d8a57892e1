// The etcd directory: keys and values as entries.h lays them out, every host's under its own
// prefix, which etcd's auth lets only that host write (TLS with the host's certificate; etcd
// takes the certificate's Common Name as the user).
//
// This host's keys live under one lease, kept alive every third of its TTL. One thread does
// all etcd I/O: it applies queued writes in order, keeps the lease alive, and follows a watch
// on /vrdma/ into a DirectoryView (every entry checked, conflicts settled), which is all that
// lookups read. An entry that fails a check is logged (rate-limited) and ignored; nothing etcd
// returns can end the thread. When etcd goes away lookups say kUnavailable and the thread
// retries with backoff; when it comes back the thread takes a new lease if the old one
// expired, publishes this host's entries again (removing anything else under its prefix),
// re-reads everything and resumes the watch. A watch whose start was compacted is replaced the
// same way, without the directory becoming unavailable.
#include <arpa/inet.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "common/address.h"
#include "common/log.h"
#include "common/unique_fd.h"
#include "daemon/directory/directory_backends.h"
#include "daemon/directory/directory_view.h"
#include "daemon/directory/entries.h"
#include "etcd/etcd_client.h"

namespace vrdma::daemon {

namespace {

using Clock = std::chrono::steady_clock;

constexpr int kIoTimeoutMs = 1000;     // each call, connect to last byte
constexpr int kRevokeTimeoutMs = 500;  // at stop(), best effort
constexpr int kMinBackoffMs = 200;
constexpr int kMaxBackoffMs = 1000;
constexpr size_t kOpsPerTxn = 100;  // etcd takes at most 128 by default
// Notes about ignored entries: at most this many per window, then one line with the count.
constexpr int kNotesPerWindow = 20;
constexpr auto kNoteWindow = std::chrono::seconds(10);

std::string hex(int64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof(buf), "%llx", static_cast<unsigned long long>(v));
  return buf;
}

// Rate limit for log lines about entries that were ignored (a host can write many).
class NoteLimiter {
 public:
  void note(const std::string& where, const std::string& text) {
    auto now = Clock::now();
    if (now - window_start_ >= kNoteWindow) {
      if (suppressed_)
        LOG_WARN("directory: etcd %s: %d more notes about ignored entries were not logged",
                 where.c_str(), suppressed_);
      window_start_ = now;
      in_window_ = 0;
      suppressed_ = 0;
    }
    if (in_window_++ < kNotesPerWindow)
      LOG_WARN("directory: etcd %s: %s", where.c_str(), text.c_str());
    else
      ++suppressed_;
  }

 private:
  Clock::time_point window_start_{};
  int in_window_ = 0;
  int suppressed_ = 0;
};

class EtcdDirectory final : public Directory {
 public:
  EtcdDirectory(std::vector<etcd::Endpoint> endpoints, etcd::Credentials credentials, int lease_s)
      : client_(std::move(endpoints), std::move(credentials), kIoTimeoutMs),
        where_(client_.endpoints_text()),
        lease_s_(lease_s) {}
  ~EtcdDirectory() override { shutdown(true); }

  int start(const HostEntry& self) override {
    std::lock_guard lock(mu_);
    if (started_) return EALREADY;
    wake_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!wake_) return errno;
    self_ = self;
    view_.set_self(self);
    started_ = true;
    thread_ = std::thread([this] { run(); });
    return 0;
  }
  void stop() override { shutdown(true); }
  void abandon() override { shutdown(false); }

  void publish_container(uint32_t ipv4_net, const ContainerInfo& info) override {
    std::lock_guard lock(mu_);
    auto [it, added] = own_containers_.try_emplace(ipv4_net, info);
    if (!added && it->second == info) return;
    it->second = info;
    if (!in_own_networks(ipv4_net)) {
      LOG_WARN(
          "directory: container %s (%s) is outside this host's networks (--pod-cidr); other "
          "hosts would refuse its entry, so it is not published",
          ipv4_text(ipv4_net).c_str(), info.name.c_str());
      return;
    }
    enqueue(false, container_key(self_.host_id, ipv4_net), container_value(info));
  }
  void withdraw_container(uint32_t ipv4_net) override {
    std::lock_guard lock(mu_);
    if (!own_containers_.erase(ipv4_net) || !in_own_networks(ipv4_net)) return;
    enqueue(true, container_key(self_.host_id, ipv4_net), {});
  }
  void publish_listener(uint32_t ipv4_net, uint16_t port) override {
    std::lock_guard lock(mu_);
    own_listeners_.insert({ipv4_net, port});
    enqueue(false, listener_key(self_.host_id, ipv4_net, port), listener_value());
  }
  void withdraw_listener(uint32_t ipv4_net, uint16_t port) override {
    std::lock_guard lock(mu_);
    own_listeners_.erase({ipv4_net, port});
    enqueue(true, listener_key(self_.host_id, ipv4_net, port), {});
  }

  Lookup host_of(uint32_t ipv4_net, HostEntry* out) override {
    std::lock_guard lock(mu_);
    if (own_containers_.count(ipv4_net) || (!available_ && in_own_networks(ipv4_net))) {
      *out = self_;
      return Lookup::kFound;
    }
    if (!available_) return Lookup::kUnavailable;
    auto h = view_.host_of(ntohl(ipv4_net));
    if (!h) return Lookup::kNotFound;
    *out = std::move(*h);
    return Lookup::kFound;
  }

  void group_members(uint32_t group_net,
                     std::vector<std::pair<uint32_t, uint32_t>>* out) override {
    std::lock_guard lock(mu_);
    if (const auto* m = view_.group_members(group_net))
      for (const auto& [host, ip] : *m)
        if (host != self_.host_id) out->emplace_back(host, htonl(ip));
  }

  Lookup tenant_of(uint32_t ipv4_net, std::string* tenant) override {
    std::lock_guard lock(mu_);
    if (!available_) return Lookup::kUnavailable;
    const ContainerInfo* c = view_.container(ntohl(ipv4_net));
    if (!c || c->tenant.empty()) return Lookup::kNotFound;
    *tenant = c->tenant;
    return Lookup::kFound;
  }

  Lookup host_by_id(uint32_t host_id, HostEntry* out) override {
    std::lock_guard lock(mu_);
    if (started_ && host_id == self_.host_id) {
      *out = self_;
      return Lookup::kFound;
    }
    if (!available_) return Lookup::kUnavailable;
    auto h = view_.host_by_id(host_id);
    if (!h) return Lookup::kNotFound;
    *out = std::move(*h);
    return Lookup::kFound;
  }

  Lookup host_by_router(uint32_t ipv4_net, HostEntry* out) override {
    std::lock_guard lock(mu_);
    if (!available_) return Lookup::kUnavailable;
    const HostEntry* h = view_.host_by_router(ipv4_net);
    if (!h) return Lookup::kNotFound;
    *out = *h;
    return Lookup::kFound;
  }

  std::string describe() const override {
    std::lock_guard lock(mu_);
    std::string text = "etcd " + where_ + ": ";
    if (!started_) return text + "not started";
    if (!available_) {
      text += "unavailable";
      if (!last_error_.empty()) text += " (" + last_error_ + ")";
      return text;
    }
    size_t hosts = view_.hosts_known();
    return text + "available, lease " + hex(lease_shown_) + ", " + std::to_string(hosts) +
           (hosts == 1 ? " host" : " hosts");
  }
  bool available() const override { return available_; }
  size_t hosts_known() const override {
    std::lock_guard lock(mu_);
    return view_.hosts_known();
  }

 private:
  struct Write {
    bool deleted = false;
    std::string key;
    std::string value;
  };

  // ---- the daemon's side (mu_ held) ----
  bool in_own_networks(uint32_t ipv4_net) const {
    uint32_t ip = ntohl(ipv4_net);
    return std::any_of(self_.cidrs.begin(), self_.cidrs.end(),
                       [&](const Ipv4Cidr& c) { return c.contains(ip); });
  }
  void enqueue(bool deleted, std::string key, std::string value) {
    queue_.push_back({deleted, std::move(key), std::move(value)});
    wake();
  }
  void wake() {
    if (!wake_) return;
    uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(wake_.get(), &one, sizeof(one));
  }
  void shutdown(bool revoke) {
    if (!thread_.joinable()) return;
    revoke_ = revoke;
    // A call in progress ends now, not at its deadline, and so do any before the thread sees
    // stopping_; it resumes the client for the revoke only after that (so never before this).
    client_.interrupt();
    stopping_ = true;
    {
      std::lock_guard lock(mu_);
      wake();
    }
    thread_.join();
  }

  // ---- the etcd thread ----
  void run();
  void run_once(int* backoff_ms, bool* up);
  bool resync(std::string* why);
  bool serve(std::string* why);
  bool apply_writes(std::string* why);
  bool keepalive(std::string* why);
  void set_available(bool up, const std::string& why);
  void wait_ms(int ms);
  void drain_wake();
  // Feeds etcd's entries to the view and logs what it refused. Nothing escapes.
  void apply_updates(const std::vector<etcd::Kv>& kvs, bool replace_all);
  void apply_events(const std::vector<etcd::Event>& events);
  std::vector<std::string> apply_locked(const DirectoryUpdate& u);
  void log_notes(const std::vector<std::string>& notes);
  std::chrono::milliseconds keepalive_interval() const {
    return std::chrono::milliseconds(std::max(100, lease_ttl_s_ * 1000 / 3));
  }

  etcd::Client client_;  // the etcd thread's (interrupt() from any thread)
  const std::string where_;
  const int lease_s_;

  mutable std::mutex mu_;
  bool started_ = false;
  HostEntry self_;
  std::map<uint32_t, ContainerInfo> own_containers_;  // what this host publishes
  std::set<std::pair<uint32_t, uint16_t>> own_listeners_;
  std::deque<Write> queue_;  // not yet sent to etcd
  DirectoryView view_;       // the other hosts, from etcd
  int64_t lease_shown_ = 0;
  std::string last_error_;
  std::atomic<bool> available_{false};
  std::atomic<bool> stopping_{false};
  std::atomic<bool> revoke_{true};
  UniqueFd wake_;  // eventfd: a write was queued, or stop
  std::thread thread_;

  // Only the etcd thread touches these.
  int64_t lease_ = 0;
  int lease_ttl_s_ = 0;
  bool lease_lost_ = false;
  Clock::time_point next_keepalive_;
  NoteLimiter notes_;
};

void EtcdDirectory::run() {
  int backoff_ms = kMinBackoffMs;
  bool up = false;
  while (!stopping_) {
    try {
      run_once(&backoff_ms, &up);
    } catch (const std::exception& e) {
      // Nothing should get here; if anything does, the directory starts over, it does not die.
      LOG_ERROR("directory: etcd %s: unexpected error: %s; starting over", where_.c_str(),
                e.what());
      client_.watch_close();
      up = false;
      set_available(false, std::string("unexpected error: ") + e.what());
      wait_ms(kMaxBackoffMs);
    }
  }
  client_.watch_close();
  available_ = false;
  client_.resume();
  if (revoke_ && lease_) {
    std::string why;
    client_.set_timeout_ms(kRevokeTimeoutMs);
    if (!client_.revoke(lease_, &why))
      LOG_DEBUG("directory: etcd %s: cannot revoke lease %s: %s", where_.c_str(),
                hex(lease_).c_str(), why.c_str());
  }
}

void EtcdDirectory::run_once(int* backoff_ms, bool* up) {
  std::string why;
  if (*up) {
    if (serve(&why)) return;
    if (stopping_) return;
    if (lease_lost_ || client_.watch_compacted()) {  // etcd answers; start over at once
      if (lease_lost_)
        LOG_WARN("directory: etcd %s: lease %s expired; publishing this host again", where_.c_str(),
                 hex(lease_shown_).c_str());
      else
        LOG_INFO("directory: etcd %s: %s; reading everything again", where_.c_str(), why.c_str());
      if (resync(&why)) return;
    }
    *up = false;
    set_available(false, why);
    *backoff_ms = kMinBackoffMs;
    return;
  }
  if (resync(&why)) {
    *up = true;
    set_available(true, why);
    return;
  }
  if (stopping_) return;
  set_available(false, why);
  client_.next_endpoint();
  wait_ms(*backoff_ms);
  *backoff_ms = std::min(*backoff_ms * 2, kMaxBackoffMs);
}

// Logs transitions only: the first failure after being available (or at start), and the
// return.
void EtcdDirectory::set_available(bool up, const std::string& why) {
  std::lock_guard lock(mu_);
  bool was = available_;
  bool first_failure = !up && last_error_.empty();
  available_ = up;
  if (up) {
    last_error_.clear();
    if (!was)
      LOG_INFO("directory: etcd %s available (lease %s, %zu hosts known)", where_.c_str(),
               hex(lease_shown_).c_str(), view_.hosts_known());
    return;
  }
  last_error_ = why.empty() ? "unknown error" : why;
  if (was || first_failure)
    LOG_WARN("directory: etcd %s unavailable: %s; retrying", where_.c_str(), why.c_str());
}

bool EtcdDirectory::resync(std::string* why) {
  lease_lost_ = false;
  client_.watch_close();
  if (lease_) {
    int ttl = 0;
    if (!client_.keepalive(lease_, &ttl, why)) return false;
    if (ttl == 0) lease_ = 0;
  }
  if (!lease_) {
    if (!client_.grant(lease_s_, &lease_, &lease_ttl_s_, why)) return false;
    std::lock_guard lock(mu_);
    lease_shown_ = lease_;
  }
  if (stopping_) return false;

  std::vector<etcd::Kv> kvs;
  int64_t revision = 0;
  if (!client_.range_prefix(std::string(kDirectoryRoot), &kvs, &revision, why)) return false;

  // This host's entries as they should be, and anything else under its prefix (left before
  // an outage, in a previous run, or written by someone else with its certificate) removed.
  // Queued writes are covered by this.
  std::vector<etcd::Op> ops;
  {
    std::lock_guard lock(mu_);
    queue_.clear();
    const uint32_t id = self_.host_id;
    ops.push_back({false, host_info_key(id), host_info_value(self_), lease_});
    for (const auto& c : self_.cidrs)
      ops.push_back({false, network_key(id, c), network_value(), lease_});
    for (const auto& [ip, info] : own_containers_)
      if (in_own_networks(ip))
        ops.push_back({false, container_key(id, ip), container_value(info), lease_});
    for (const auto& [ip, port] : own_listeners_)
      ops.push_back({false, listener_key(id, ip, port), listener_value(), lease_});
    std::set<std::string> wanted;
    for (const auto& op : ops) wanted.insert(op.key);
    const std::string mine = host_prefix(id);
    for (const auto& kv : kvs)
      if (kv.key.starts_with(mine) && !wanted.count(kv.key)) ops.push_back({true, kv.key, {}, 0});
  }
  for (size_t i = 0; i < ops.size(); i += kOpsPerTxn) {
    if (stopping_) return false;
    size_t end = std::min(ops.size(), i + kOpsPerTxn);
    std::vector<etcd::Op> batch(ops.begin() + static_cast<long>(i),
                                ops.begin() + static_cast<long>(end));
    if (!client_.txn(batch, why)) {
      if (why->find("lease not found") != std::string::npos) lease_ = 0;
      return false;
    }
  }
  // The watch replays everything after the range, this host's writes included.
  if (!client_.watch_open(std::string(kDirectoryRoot), revision + 1, why)) return false;
  apply_updates(kvs, true);
  next_keepalive_ = Clock::now() + keepalive_interval();
  return true;
}

bool EtcdDirectory::serve(std::string* why) {
  if (!apply_writes(why)) return false;
  auto now = Clock::now();
  if (now >= next_keepalive_) {
    if (!keepalive(why)) return false;
    next_keepalive_ = now + keepalive_interval();
  }
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(next_keepalive_ - now);
  pollfd fds[2] = {{wake_.get(), POLLIN, 0}, {client_.watch_fd(), POLLIN, 0}};
  int n = ::poll(fds, 2, static_cast<int>(std::max<int64_t>(1, left.count())));
  if (n < 0 && errno != EINTR) {
    *why = std::string("poll: ") + std::strerror(errno);
    return false;
  }
  if (n <= 0) return true;
  if (fds[0].revents) drain_wake();
  if (fds[1].revents) {
    std::vector<etcd::Event> events;
    bool ok = client_.watch_read(&events, why);
    apply_events(events);
    if (!ok) return false;
  }
  return true;
}

bool EtcdDirectory::apply_writes(std::string* why) {
  while (!stopping_) {
    Write w;
    {
      std::lock_guard lock(mu_);
      if (queue_.empty()) return true;
      w = std::move(queue_.front());
      queue_.pop_front();
    }
    // A failed write is not retried by itself: the resync that follows publishes this host's
    // entries as they are by then.
    bool ok = w.deleted ? client_.remove(w.key, why) : client_.put(w.key, w.value, lease_, why);
    if (!ok) {
      if (why->find("lease not found") != std::string::npos) {
        lease_ = 0;
        lease_lost_ = true;
      }
      return false;
    }
  }
  return true;
}

bool EtcdDirectory::keepalive(std::string* why) {
  int ttl = 0;
  if (!client_.keepalive(lease_, &ttl, why)) return false;
  if (ttl > 0) return true;
  *why = "lease " + hex(lease_) + " expired";
  lease_ = 0;
  lease_lost_ = true;
  return false;
}

void EtcdDirectory::wait_ms(int ms) {
  pollfd p{wake_.get(), POLLIN, 0};
  if (::poll(&p, 1, ms) > 0) drain_wake();
}

void EtcdDirectory::drain_wake() {
  uint64_t count;
  [[maybe_unused]] ssize_t n = ::read(wake_.get(), &count, sizeof(count));
}

std::vector<std::string> EtcdDirectory::apply_locked(const DirectoryUpdate& u) {
  try {
    std::string note = view_.apply(u);
    if (!note.empty()) return {note};
  } catch (const std::exception& e) {
    return {"ignoring " + printable(u.key) + ": " + e.what()};
  }
  return {};
}

void EtcdDirectory::apply_updates(const std::vector<etcd::Kv>& kvs, bool replace_all) {
  std::vector<std::string> notes;
  {
    std::lock_guard lock(mu_);
    if (replace_all) view_.clear();
    for (const auto& kv : kvs)
      for (auto& n : apply_locked({false, kv.key, kv.value, kv.create_revision}))
        notes.push_back(std::move(n));
    try {
      for (auto& n : view_.settle()) notes.push_back(std::move(n));
    } catch (const std::exception& e) {
      notes.push_back(std::string("cannot weigh the entries: ") + e.what());
    }
  }
  log_notes(notes);
}

void EtcdDirectory::apply_events(const std::vector<etcd::Event>& events) {
  if (events.empty()) return;
  std::vector<std::string> notes;
  {
    std::lock_guard lock(mu_);
    for (const auto& e : events)
      for (auto& n : apply_locked({e.deleted, e.kv.key, e.kv.value, e.kv.create_revision}))
        notes.push_back(std::move(n));
    try {
      for (auto& n : view_.settle()) notes.push_back(std::move(n));
    } catch (const std::exception& e) {
      notes.push_back(std::string("cannot weigh the entries: ") + e.what());
    }
  }
  log_notes(notes);
}

void EtcdDirectory::log_notes(const std::vector<std::string>& notes) {
  for (const auto& n : notes) notes_.note(where_, n);
}

}  // namespace

std::unique_ptr<Directory> make_etcd_directory(std::vector<etcd::Endpoint> endpoints,
                                               etcd::Credentials credentials, int lease_s) {
  return std::make_unique<EtcdDirectory>(std::move(endpoints), std::move(credentials), lease_s);
}

}  // namespace vrdma::daemon
