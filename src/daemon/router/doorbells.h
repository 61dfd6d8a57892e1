// The doorbells of clients' routed QPs: one eventfd per client, which its library rings after
// posting to a QP whose router thread sleeps (engine/route.cc). Several router threads
// (router_pool.h) may carry QPs of one client, and the library has one doorbell: every thread
// that carries a QP of the client watches the same eventfd, edge-triggered, and none reads it.
// Each ring is an edge every watcher sees (an eventfd signals on every write), so no thread
// can take a ring from another; the counter only grows, by one per ring, far from its limit.
//
// The table is shared by the threads (a lock, taken when a QP connects and when a client goes,
// never on the data path): a client's eventfd is made by the first thread that needs it and
// closed when the last thread that took it lets it go.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>

#include "common/unique_fd.h"

namespace vrdma::daemon {

class DoorbellTable {
 public:
  // The client's eventfd (made on first use), counted as taken once more; -1 when none can be
  // made.
  int acquire(uint32_t client);
  // One taker lets go; the last closes it.
  void release(uint32_t client);
  size_t size() const;

 private:
  struct Entry {
    UniqueFd fd;
    uint32_t takers = 0;
  };
  mutable std::mutex mu_;
  std::map<uint32_t, Entry> bells_;
};

}  // namespace vrdma::daemon
