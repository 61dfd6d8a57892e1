// The directory as the router thread sees it: every call under the daemon's state lock, which
// the control thread holds while it handles events (the directory is the control thread's:
// directory.h). The router only looks things up.
#pragma once

#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "daemon/directory/directory.h"

namespace vrdma::daemon {

class LockedDirectory : public Directory {
 public:
  LockedDirectory(Directory& d, std::mutex& mu) : d_(d), mu_(mu) {}
  int start(const HostEntry& self) override {
    std::lock_guard<std::mutex> l(mu_);
    return d_.start(self);
  }
  void stop() override {
    std::lock_guard<std::mutex> l(mu_);
    d_.stop();
  }
  void publish_container(uint32_t ip, const ContainerInfo& info) override {
    std::lock_guard<std::mutex> l(mu_);
    d_.publish_container(ip, info);
  }
  void withdraw_container(uint32_t ip) override {
    std::lock_guard<std::mutex> l(mu_);
    d_.withdraw_container(ip);
  }
  void publish_listener(uint32_t ip, uint16_t port) override {
    std::lock_guard<std::mutex> l(mu_);
    d_.publish_listener(ip, port);
  }
  void withdraw_listener(uint32_t ip, uint16_t port) override {
    std::lock_guard<std::mutex> l(mu_);
    d_.withdraw_listener(ip, port);
  }
  Lookup host_of(uint32_t ip, HostEntry* out) override {
    std::lock_guard<std::mutex> l(mu_);
    return d_.host_of(ip, out);
  }
  Lookup host_by_id(uint32_t id, HostEntry* out) override {
    std::lock_guard<std::mutex> l(mu_);
    return d_.host_by_id(id, out);
  }
  Lookup host_by_router(uint32_t ip, HostEntry* out) override {
    std::lock_guard<std::mutex> l(mu_);
    return d_.host_by_router(ip, out);
  }
  Lookup tenant_of(uint32_t ip, std::string* tenant) override {
    std::lock_guard<std::mutex> l(mu_);
    return d_.tenant_of(ip, tenant);
  }
  void group_members(uint32_t group, std::vector<std::pair<uint32_t, uint32_t>>* out) override {
    std::lock_guard<std::mutex> l(mu_);
    d_.group_members(group, out);
  }
  std::string describe() const override {
    std::lock_guard<std::mutex> l(mu_);
    return d_.describe();
  }
  bool available() const override {
    std::lock_guard<std::mutex> l(mu_);
    return d_.available();
  }
  size_t hosts_known() const override {
    std::lock_guard<std::mutex> l(mu_);
    return d_.hosts_known();
  }

 private:
  Directory& d_;
  std::mutex& mu_;
};

}  // namespace vrdma::daemon
