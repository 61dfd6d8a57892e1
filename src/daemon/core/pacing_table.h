// Same-host rate limits, vrdmad's half: one pacing page (shm/pacing.h) per container and one
// per tenant, shared with their processes (Op::kPacing), with the QoS rules' limits written in.
// A page lives while a client of its container (or tenant) does.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include "common/unique_fd.h"
#include "daemon/qos/rules.h"
#include "shm/pacing.h"

namespace vrdma::daemon {

class PacingTable {
 public:
  PacingTable() = default;
  PacingTable(const PacingTable&) = delete;
  PacingTable& operator=(const PacingTable&) = delete;
  ~PacingTable();

  // A client of container `ipv4` in `tenant` joins: its two pages (made on first use), as
  // descriptors the table keeps (send them, do not close them). 0 or a positive errno.
  int acquire(uint32_t ipv4, const std::string& tenant, int fds[2]);
  // That client is gone; the last one of a container (tenant) frees its page.
  void release(uint32_t ipv4, const std::string& tenant);
  // The rules in force from now on: every page's limits.
  void apply(const qos::RuleSet& rules);

  const shm::PacingPage* container_page(uint32_t ipv4, const std::string& tenant) const;
  size_t pages() const { return containers_.size() + tenants_.size(); }

 private:
  struct Page {
    UniqueFd fd;
    shm::PacingPage* page = nullptr;
    uint32_t users = 0;
  };
  static int make(Page& p);
  static void unmap(Page& p);
  static void set_limits(Page& p, const qos::Rule& rule);

  std::map<std::pair<std::string, uint32_t>, Page> containers_;  // (tenant, address)
  std::map<std::string, Page> tenants_;
  qos::RuleSet rules_;
};

}  // namespace vrdma::daemon
