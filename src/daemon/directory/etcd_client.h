// etcd v3 through its JSON gateway (POST /v3/...): the calls the cluster directory needs.
// Keys and values are plain bytes here (base64 is done inside), 64-bit numbers are int64_t
// (the gateway writes them as JSON strings). Every call ends within the client's timeout.
// Not thread-safe: one thread owns a client.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "daemon/directory/http_client.h"

namespace vrdma::daemon {

struct EtcdKv {
  std::string key;
  std::string value;
  int64_t lease = 0;
};

struct EtcdEvent {
  bool deleted = false;  // else a put
  std::string key;
  std::string value;  // empty for a delete
};

// One operation of an unconditional transaction.
struct EtcdOp {
  bool deleted = false;  // delete `key`, else put key=value under `lease` (0: none)
  std::string key;
  std::string value;
  int64_t lease = 0;
};

class EtcdClient {
 public:
  EtcdClient(std::vector<HttpEndpoint> endpoints, int timeout_ms);

  // The endpoint calls go to; next_endpoint() moves on to the next one (after a failure).
  const HttpEndpoint& endpoint() const { return endpoints_[current_]; }
  void next_endpoint() { current_ = (current_ + 1) % endpoints_.size(); }
  std::string endpoints_text() const;  // "http://a:p,http://b:q"
  void set_timeout_ms(int timeout_ms) { timeout_ms_ = timeout_ms; }

  // Each returns true, or false with *error ("Connection refused", "etcdserver: ...").
  bool grant(int ttl_s, int64_t* lease, int* granted_ttl_s, std::string* error);
  // *ttl_s 0: the lease no longer exists (expired or revoked).
  bool keepalive(int64_t lease, int* ttl_s, std::string* error);
  bool revoke(int64_t lease, std::string* error);
  bool put(const std::string& key, const std::string& value, int64_t lease, std::string* error);
  bool remove(const std::string& key, std::string* error);
  bool txn(const std::vector<EtcdOp>& ops, std::string* error);
  // Every key that starts with `prefix`, and the store's revision they were read at.
  bool range_prefix(const std::string& prefix, std::vector<EtcdKv>* kvs, int64_t* revision,
                    std::string* error);

  // A watch on every key under `prefix` from `start_revision` on. Poll watch_fd() for input,
  // then watch_read(). One watch at a time.
  bool watch_open(const std::string& prefix, int64_t start_revision, std::string* error);
  int watch_fd() const { return watch_.fd(); }
  bool watching() const { return watch_.is_open(); }
  // Appends the events that arrived. false (and the watch closed) when it ended: etcd went
  // away, or canceled it (e.g. the start revision was compacted).
  bool watch_read(std::vector<EtcdEvent>* events, std::string* error);
  void watch_close() { watch_.close(); }

 private:
  bool call(const char* path, const std::string& request, std::string* reply, std::string* error);

  std::vector<HttpEndpoint> endpoints_;
  size_t current_ = 0;
  int timeout_ms_;
  HttpStream watch_;
};

// The end of the key range that holds exactly the keys starting with `prefix`.
std::string etcd_prefix_end(const std::string& prefix);

}  // namespace vrdma::daemon
