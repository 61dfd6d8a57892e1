// The rate limits of a container or a tenant: a bucket of bytes and one of messages
// (token_bucket.h). A scheduler holds each container's and tenant's limits by pointer, so that
// the schedulers of several router threads can hold the same ones (LimitTable): a container
// limited to 100 MB/s gets 100 MB/s over the links of every thread together, not per thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "daemon/qos/token_bucket.h"

namespace vrdma::qos {

struct Rule;

struct Limits {
  TokenBucket bytes, msgs;
  void set(uint64_t bytes_per_s, uint64_t msgs_per_s, int64_t now) {
    bytes.set_rate(bytes_per_s, now);
    msgs.set_rate(msgs_per_s, now);
  }
  bool open(int64_t now) {
    bytes.refill(now);
    msgs.refill(now);
    return bytes.open() && msgs.open();
  }
};

// The limits of every container (by address and tenant) and tenant (by name) that some
// scheduler holds, for the router threads to share. Looked up as a container or tenant joins
// a thread's scheduler (a lock; not the data path); an entry goes when no scheduler holds it.
class LimitTable {
 public:
  std::shared_ptr<Limits> container(uint32_t ipv4, const std::string& tenant);
  std::shared_ptr<Limits> tenant(const std::string& name);

 private:
  template <typename Map, typename Key>
  std::shared_ptr<Limits> get(Map& m, const Key& k);
  std::mutex mu_;
  std::map<std::pair<uint32_t, std::string>, std::weak_ptr<Limits>> containers_;
  std::map<std::string, std::weak_ptr<Limits>> tenants_;
};

}  // namespace vrdma::qos
