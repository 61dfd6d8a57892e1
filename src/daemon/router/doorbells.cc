// The shared doorbell table (doorbells.h).
#include "daemon/router/doorbells.h"

#include <sys/eventfd.h>

namespace vrdma::daemon {

int DoorbellTable::acquire(uint32_t client) {
  std::lock_guard<std::mutex> g(mu_);
  auto it = bells_.find(client);
  if (it == bells_.end()) {
    UniqueFd fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!fd) return -1;
    it = bells_.emplace(client, Entry{std::move(fd), 0}).first;
  }
  ++it->second.takers;
  return it->second.fd.get();
}

void DoorbellTable::release(uint32_t client) {
  std::lock_guard<std::mutex> g(mu_);
  auto it = bells_.find(client);
  if (it != bells_.end() && --it->second.takers == 0) bells_.erase(it);
}

size_t DoorbellTable::size() const {
  std::lock_guard<std::mutex> g(mu_);
  return bells_.size();
}

}  // namespace vrdma::daemon
