// The etcd directory. Keys (values are JSON):
//   /vrdma/hosts/<id>                   {"router": "a.b.c.d:port", "cidrs": ["10.77.1.0/24"]}
//   /vrdma/containers/<a.b.c.d>         {"host": id, "name": "h1c0"}
//   /vrdma/listeners/<a.b.c.d>:<port>   {"host": id}
// This host's keys live under one lease, kept alive every third of its TTL. One thread does
// all etcd I/O: it applies queued writes in order, keeps the lease alive, and follows a watch
// on /vrdma/ into a local cache of hosts and containers, which is all that lookups read. When
// etcd goes away lookups say kUnavailable and the thread retries with backoff; when it comes
// back the thread takes a new lease if the old one expired, publishes this host's entries
// again (removing any it no longer has), re-reads everything and resumes the watch.
#include <arpa/inet.h>
#include <poll.h>
#include <sys/eventfd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "common/address.h"
#include "common/log.h"
#include "common/unique_fd.h"
#include "daemon/directory/directory_backends.h"
#include "daemon/directory/etcd_client.h"

namespace vrdma::daemon {

namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

constexpr const char* kPrefix = "/vrdma/";
constexpr std::string_view kHostsPrefix = "/vrdma/hosts/";
constexpr std::string_view kContainersPrefix = "/vrdma/containers/";
constexpr std::string_view kListenersPrefix = "/vrdma/listeners/";
constexpr int kIoTimeoutMs = 1000;     // each request, connect to last byte
constexpr int kRevokeTimeoutMs = 500;  // at stop(), best effort
constexpr int kMinBackoffMs = 200;
constexpr int kMaxBackoffMs = 1000;
constexpr size_t kOpsPerTxn = 100;  // etcd takes at most 128 by default

std::string host_key(uint32_t id) {
  return std::string(kHostsPrefix) + std::to_string(id);
}
std::string container_key(uint32_t ip) {
  return std::string(kContainersPrefix) + ipv4_text(ip);
}
std::string listener_key(uint32_t ip, uint16_t port) {
  return std::string(kListenersPrefix) + ip_port_text(ip, port);
}

std::string host_value(const HostEntry& h) {
  json cidrs = json::array();
  for (const auto& c : h.cidrs) cidrs.push_back(cidr_text(c));
  return json{{"router", h.router}, {"cidrs", cidrs}}.dump();
}
std::string container_value(uint32_t host, const std::string& name) {
  return json{{"host", host}, {"name", name}}.dump();
}
std::string listener_value(uint32_t host) {
  return json{{"host", host}}.dump();
}

std::optional<uint32_t> parse_id(std::string_view text) {
  uint32_t id = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), id);
  if (text.empty() || ec != std::errc() || p != text.data() + text.size()) return std::nullopt;
  return id;
}

std::optional<HostEntry> parse_host_value(uint32_t id, const std::string& value) {
  json j = json::parse(value, nullptr, false);
  if (!j.is_object()) return std::nullopt;
  HostEntry h;
  h.host_id = id;
  if (auto it = j.find("router"); it != j.end() && it->is_string()) h.router = *it;
  if (auto it = j.find("cidrs"); it != j.end() && it->is_array()) {
    for (const auto& c : *it) {
      if (!c.is_string()) return std::nullopt;
      Ipv4Cidr net;
      if (!parse_cidr(c.get<std::string>(), &net, nullptr)) return std::nullopt;
      h.cidrs.push_back(net);
    }
  }
  return h;
}

// The "host" field of a container's or listener's value.
std::optional<uint32_t> owner_of(const std::string& value) {
  json j = json::parse(value, nullptr, false);
  if (!j.is_object() || !j.contains("host") || !j["host"].is_number_unsigned()) return std::nullopt;
  return j["host"].get<uint32_t>();
}

std::string hex(int64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof(buf), "%llx", static_cast<unsigned long long>(v));
  return buf;
}

class EtcdDirectory final : public Directory {
 public:
  EtcdDirectory(std::vector<HttpEndpoint> endpoints, int lease_s)
      : client_(std::move(endpoints), kIoTimeoutMs),
        where_(client_.endpoints_text()),
        lease_s_(lease_s) {}
  ~EtcdDirectory() override { shutdown(true); }

  int start(const HostEntry& self) override {
    std::lock_guard lock(mu_);
    if (started_) return EALREADY;
    wake_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!wake_) return errno;
    self_ = self;
    started_ = true;
    thread_ = std::thread([this] { run(); });
    return 0;
  }
  void stop() override { shutdown(true); }
  void abandon() override { shutdown(false); }

  void publish_container(uint32_t ipv4_net, const std::string& name) override {
    std::lock_guard lock(mu_);
    own_containers_[ipv4_net] = name;
    enqueue(false, container_key(ipv4_net), container_value(self_.host_id, name));
  }
  void withdraw_container(uint32_t ipv4_net) override {
    std::lock_guard lock(mu_);
    own_containers_.erase(ipv4_net);
    enqueue(true, container_key(ipv4_net), {});
  }
  void publish_listener(uint32_t ipv4_net, uint16_t port) override {
    std::lock_guard lock(mu_);
    own_listeners_.insert({ipv4_net, port});
    enqueue(false, listener_key(ipv4_net, port), listener_value(self_.host_id));
  }
  void withdraw_listener(uint32_t ipv4_net, uint16_t port) override {
    std::lock_guard lock(mu_);
    own_listeners_.erase({ipv4_net, port});
    enqueue(true, listener_key(ipv4_net, port), {});
  }

  Lookup host_of(uint32_t ipv4_net, HostEntry* out) override {
    std::lock_guard lock(mu_);
    uint32_t ip = ntohl(ipv4_net);
    if (own_containers_.count(ipv4_net)) {
      *out = self_;
      return Lookup::kFound;
    }
    if (!available_) {
      for (const auto& c : self_.cidrs) {
        if (c.contains(ip)) {
          *out = self_;
          return Lookup::kFound;
        }
      }
      return Lookup::kUnavailable;
    }
    // A container of this host that it has not published is a leftover about to be removed.
    if (auto c = containers_.find(ipv4_net);
        c != containers_.end() && c->second.host != self_.host_id) {
      if (auto h = hosts_.find(c->second.host); h != hosts_.end()) {
        *out = h->second;
        return Lookup::kFound;
      }
    }
    if (const HostEntry* h = host_by_cidr(self_, hosts_, ip)) {
      *out = *h;
      return Lookup::kFound;
    }
    return Lookup::kNotFound;
  }

  Lookup host_by_id(uint32_t host_id, HostEntry* out) override {
    std::lock_guard lock(mu_);
    if (started_ && host_id == self_.host_id) {
      *out = self_;
      return Lookup::kFound;
    }
    if (!available_) return Lookup::kUnavailable;
    auto it = hosts_.find(host_id);
    if (it == hosts_.end()) return Lookup::kNotFound;
    *out = it->second;
    return Lookup::kFound;
  }

  Lookup host_by_router(uint32_t ipv4_net, HostEntry* out) override {
    std::lock_guard lock(mu_);
    if (!available_) return Lookup::kUnavailable;
    const HostEntry* h = host_by_router_ip(self_, hosts_, ipv4_net);
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
    size_t hosts = hosts_.size() + (hosts_.count(self_.host_id) ? 0 : 1);
    return text + "available, lease " + hex(lease_shown_) + ", " + std::to_string(hosts) +
           (hosts == 1 ? " host" : " hosts");
  }
  bool available() const override { return available_; }
  size_t hosts_known() const override {
    std::lock_guard lock(mu_);
    return hosts_.size() + (hosts_.count(self_.host_id) ? 0 : 1);
  }

 private:
  struct Container {
    uint32_t host = 0;
    std::string name;
  };
  struct Write {
    bool deleted = false;
    std::string key;
    std::string value;
  };

  // ---- the daemon's side (mu_ held) ----
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
    stopping_ = true;
    {
      std::lock_guard lock(mu_);
      wake();
    }
    thread_.join();
  }

  // ---- the etcd thread ----
  void run();
  bool resync(std::string* why);
  bool serve(std::string* why);
  bool apply_writes(std::string* why);
  bool keepalive(std::string* why);
  void set_available(bool up, const std::string& why);
  void wait_ms(int ms);
  void drain_wake();
  // Applies a put or delete of a key under /vrdma/ to the cache (mu_ held).
  void apply_locked(const EtcdEvent& e);
  std::chrono::milliseconds keepalive_interval() const {
    return std::chrono::milliseconds(std::max(100, lease_ttl_s_ * 1000 / 3));
  }

  EtcdClient client_;  // the etcd thread's
  const std::string where_;
  const int lease_s_;

  mutable std::mutex mu_;
  bool started_ = false;
  HostEntry self_;
  std::map<uint32_t, std::string> own_containers_;  // what this host publishes
  std::set<std::pair<uint32_t, uint16_t>> own_listeners_;
  std::deque<Write> queue_;                   // not yet sent to etcd
  std::map<uint32_t, HostEntry> hosts_;       // cache, from etcd
  std::map<uint32_t, Container> containers_;  // cache, by address (network order)
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
};

void EtcdDirectory::run() {
  int backoff_ms = kMinBackoffMs;
  bool up = false;
  std::string why;
  while (!stopping_) {
    if (up) {
      if (serve(&why)) continue;
      if (stopping_) break;
      if (lease_lost_) {  // etcd answers; only this host's entries are gone
        LOG_WARN("directory: etcd %s: lease %s expired; publishing this host again", where_.c_str(),
                 hex(lease_shown_).c_str());
        if (resync(&why)) continue;
      }
      up = false;
      set_available(false, why);
      backoff_ms = kMinBackoffMs;
      continue;
    }
    if (resync(&why)) {
      up = true;
      set_available(true, why);
      continue;
    }
    if (stopping_) break;
    set_available(false, why);
    client_.next_endpoint();
    wait_ms(backoff_ms);
    backoff_ms = std::min(backoff_ms * 2, kMaxBackoffMs);
  }
  client_.watch_close();
  available_ = false;
  if (revoke_ && lease_) {
    client_.set_timeout_ms(kRevokeTimeoutMs);
    if (!client_.revoke(lease_, &why))
      LOG_DEBUG("directory: etcd %s: cannot revoke lease %s: %s", where_.c_str(),
                hex(lease_).c_str(), why.c_str());
  }
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
               hex(lease_shown_).c_str(), hosts_.size());
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

  std::vector<EtcdKv> kvs;
  int64_t revision = 0;
  if (!client_.range_prefix(kPrefix, &kvs, &revision, why)) return false;

  // This host's entries as they should be, and whatever it left behind earlier (before an
  // outage, or in a previous run) removed. Queued writes are covered by this.
  std::vector<EtcdOp> ops;
  {
    std::lock_guard lock(mu_);
    queue_.clear();
    ops.push_back({false, host_key(self_.host_id), host_value(self_), lease_});
    for (const auto& [ip, name] : own_containers_)
      ops.push_back({false, container_key(ip), container_value(self_.host_id, name), lease_});
    for (const auto& [ip, port] : own_listeners_)
      ops.push_back({false, listener_key(ip, port), listener_value(self_.host_id), lease_});
    std::set<std::string> wanted;
    for (const auto& op : ops) wanted.insert(op.key);
    for (const auto& kv : kvs) {
      bool owned_entry =
          kv.key.starts_with(kContainersPrefix) || kv.key.starts_with(kListenersPrefix);
      if (owned_entry && owner_of(kv.value) == self_.host_id && !wanted.count(kv.key))
        ops.push_back({true, kv.key, {}, 0});
    }
  }
  for (size_t i = 0; i < ops.size(); i += kOpsPerTxn) {
    if (stopping_) return false;
    size_t end = std::min(ops.size(), i + kOpsPerTxn);
    std::vector<EtcdOp> batch(ops.begin() + static_cast<long>(i),
                              ops.begin() + static_cast<long>(end));
    if (!client_.txn(batch, why)) return false;
  }
  // The watch replays everything after the range, this host's writes included.
  if (!client_.watch_open(kPrefix, revision + 1, why)) return false;
  {
    std::lock_guard lock(mu_);
    hosts_.clear();
    containers_.clear();
    for (const auto& kv : kvs) apply_locked({false, kv.key, kv.value});
  }
  // Events that came with the watch's first response are already buffered: the socket will
  // not signal them again.
  std::vector<EtcdEvent> events;
  bool ok = client_.watch_read(&events, why);
  {
    std::lock_guard lock(mu_);
    for (const auto& e : events) apply_locked(e);
  }
  if (!ok) return false;
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
    std::vector<EtcdEvent> events;
    bool ok = client_.watch_read(&events, why);
    std::lock_guard lock(mu_);
    for (const auto& e : events) apply_locked(e);
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

void EtcdDirectory::apply_locked(const EtcdEvent& e) {
  std::string_view key = e.key;
  if (key.starts_with(kHostsPrefix)) {
    auto id = parse_id(key.substr(kHostsPrefix.size()));
    if (!id) return;
    if (e.deleted) {
      hosts_.erase(*id);
    } else if (auto h = parse_host_value(*id, e.value)) {
      hosts_[*id] = std::move(*h);
    } else {
      LOG_DEBUG("directory: ignoring malformed %s", e.key.c_str());
    }
  } else if (key.starts_with(kContainersPrefix)) {
    uint32_t ip;
    if (!parse_ipv4(std::string(key.substr(kContainersPrefix.size())), &ip)) return;
    if (e.deleted) {
      containers_.erase(ip);
      return;
    }
    json j = json::parse(e.value, nullptr, false);
    auto host = owner_of(e.value);
    if (!host) {
      LOG_DEBUG("directory: ignoring malformed %s", e.key.c_str());
      return;
    }
    std::string name = j.is_object() ? j.value("name", std::string()) : std::string();
    containers_[ip] = Container{*host, std::move(name)};
  }
  // Listeners are not cached: a connection request goes to the host that owns the address,
  // which knows its own listeners.
}

}  // namespace

std::unique_ptr<Directory> make_etcd_directory(std::vector<HttpEndpoint> endpoints, int lease_s) {
  return std::make_unique<EtcdDirectory>(std::move(endpoints), lease_s);
}

}  // namespace vrdma::daemon
