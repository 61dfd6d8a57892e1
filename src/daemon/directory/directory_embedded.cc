// The embedded directory: this host and a fixed set of peers from the command line. It knows
// the peers' container networks but not their containers, and it is always available.
#include <arpa/inet.h>

#include <map>
#include <mutex>

#include "daemon/directory/directory_backends.h"

namespace vrdma::daemon {

namespace {

class EmbeddedDirectory final : public Directory {
 public:
  explicit EmbeddedDirectory(std::vector<HostEntry> peers) {
    for (auto& p : peers) peers_[p.host_id] = std::move(p);
  }

  int start(const HostEntry& self) override {
    std::lock_guard lock(mu_);
    if (peers_.count(self.host_id)) return EINVAL;  // make_directory rules this out
    self_ = self;
    return 0;
  }
  void stop() override {}

  void publish_container(uint32_t ipv4_net, const ContainerInfo& info) override {
    std::lock_guard lock(mu_);
    containers_[ipv4_net] = info;
  }
  void withdraw_container(uint32_t ipv4_net) override {
    std::lock_guard lock(mu_);
    containers_.erase(ipv4_net);
  }
  // Only this host's listeners exist here, and the daemon knows them itself.
  void publish_listener(uint32_t, uint16_t) override {}
  void withdraw_listener(uint32_t, uint16_t) override {}

  Lookup host_of(uint32_t ipv4_net, HostEntry* out) override {
    std::lock_guard lock(mu_);
    if (containers_.count(ipv4_net)) {
      *out = self_;
      return Lookup::kFound;
    }
    const HostEntry* h = host_by_cidr(self_, peers_, ntohl(ipv4_net));
    if (!h) return Lookup::kNotFound;
    *out = *h;
    return Lookup::kFound;
  }

  // Its peers are fixed hosts whose containers it does not know: any may have members.
  void group_members(uint32_t, std::vector<std::pair<uint32_t, uint32_t>>* out) override {
    std::lock_guard lock(mu_);
    for (const auto& [id, h] : peers_)
      if (!h.router.empty()) out->emplace_back(id, 0);
  }

  // Its peers are fixed hosts whose containers it does not know.
  Lookup tenant_of(uint32_t, std::string*) override { return Lookup::kNotFound; }

  Lookup host_by_id(uint32_t host_id, HostEntry* out) override {
    std::lock_guard lock(mu_);
    if (host_id == self_.host_id) {
      *out = self_;
      return Lookup::kFound;
    }
    auto it = peers_.find(host_id);
    if (it == peers_.end()) return Lookup::kNotFound;
    *out = it->second;
    return Lookup::kFound;
  }

  Lookup host_by_router(uint32_t ipv4_net, HostEntry* out) override {
    std::lock_guard lock(mu_);
    const HostEntry* h = host_by_router_ip(self_, peers_, ipv4_net);
    if (!h) return Lookup::kNotFound;
    *out = *h;
    return Lookup::kFound;
  }

  std::string describe() const override {
    std::lock_guard lock(mu_);
    size_t hosts = peers_.size() + 1;
    return "embedded: " + std::to_string(hosts) + (hosts == 1 ? " host" : " hosts");
  }
  bool available() const override { return true; }
  size_t hosts_known() const override {
    std::lock_guard lock(mu_);
    return peers_.size() + 1;
  }

 private:
  mutable std::mutex mu_;
  HostEntry self_;
  std::map<uint32_t, HostEntry> peers_;
  std::map<uint32_t, ContainerInfo> containers_;  // this host's, by address (network order)
};

}  // namespace

std::unique_ptr<Directory> make_embedded_directory(std::vector<HostEntry> peers) {
  return std::make_unique<EmbeddedDirectory>(std::move(peers));
}

}  // namespace vrdma::daemon
