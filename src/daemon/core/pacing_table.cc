#include "daemon/core/pacing_table.h"

#include <sys/mman.h>

#include <new>

#include "shm/shared_file.h"

namespace vrdma::daemon {

PacingTable::~PacingTable() {
  for (auto& [k, p] : containers_) unmap(p);
  for (auto& [k, p] : tenants_) unmap(p);
}

int PacingTable::make(Page& p) {
  int fd = -1;
  if (int e = shm::create_sealed("vrdma-pacing", shm::kPacingPageSize, false, fd)) return e;
  p.fd.reset(fd);
  void* base = ::mmap(nullptr, shm::kPacingPageSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    int e = errno;
    p.fd.reset();
    return e;
  }
  p.page = new (base) shm::PacingPage{};
  p.page->magic = shm::PacingPage::kMagic;
  p.page->version = 1;
  return 0;
}

void PacingTable::unmap(Page& p) {
  if (p.page) ::munmap(p.page, shm::kPacingPageSize);
  p.page = nullptr;
}

void PacingTable::set_limits(Page& p, const qos::Rule& rule) {
  p.page->bytes_per_s.store(rule.bytes_per_s, std::memory_order_relaxed);
  p.page->msgs_per_s.store(rule.msgs_per_s, std::memory_order_relaxed);
}

int PacingTable::acquire(uint32_t ipv4, const std::string& tenant, int fds[2]) {
  Page& c = containers_[{tenant, ipv4}];
  if (!c.page) {
    if (int e = make(c)) {
      containers_.erase({tenant, ipv4});
      return e;
    }
    set_limits(c, rules_.container(ipv4));
  }
  Page& t = tenants_[tenant];
  if (!t.page) {
    if (int e = make(t)) {
      tenants_.erase(tenant);
      if (!c.users) {
        unmap(c);
        containers_.erase({tenant, ipv4});
      }
      return e;
    }
    set_limits(t, tenant.empty() ? qos::Rule{} : rules_.tenant(tenant));
  }
  ++c.users;
  ++t.users;
  fds[0] = c.fd.get();
  fds[1] = t.fd.get();
  return 0;
}

void PacingTable::release(uint32_t ipv4, const std::string& tenant) {
  if (auto it = containers_.find({tenant, ipv4});
      it != containers_.end() && --it->second.users == 0) {
    unmap(it->second);
    containers_.erase(it);
  }
  if (auto it = tenants_.find(tenant); it != tenants_.end() && --it->second.users == 0) {
    unmap(it->second);
    tenants_.erase(it);
  }
}

void PacingTable::apply(const qos::RuleSet& rules) {
  rules_ = rules;
  for (auto& [key, p] : containers_) set_limits(p, rules_.container(key.second));
  for (auto& [name, p] : tenants_) set_limits(p, name.empty() ? qos::Rule{} : rules_.tenant(name));
}

const shm::PacingPage* PacingTable::container_page(uint32_t ipv4, const std::string& tenant) const {
  auto it = containers_.find({tenant, ipv4});
  return it == containers_.end() ? nullptr : it->second.page;
}

}  // namespace vrdma::daemon
