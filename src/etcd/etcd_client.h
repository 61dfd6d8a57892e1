// An etcd v3 client over etcd's gRPC API (Debian's libgrpc++), with TLS and a client
// certificate: the calls vrdma's cluster directory needs (keys, one lease, one watch) and the
// auth calls that give each host a user and a role.
//
// Why gRPC and not the JSON gateway over an HTTP library: etcd maps the Common Name of a
// verified client certificate to its user only for gRPC requests; since etcd 3.3.11 requests
// that come through the gateway (/v3/...) are never authenticated by certificate, so per-host
// roles bound to host certificates need the gRPC API. gRPC also carries the watch, the lease
// keepalives and every call on one HTTP/2 connection per endpoint, and puts a deadline on each.
//
// Keys and values are bytes. Every call ends within the client's timeout (or sooner, by
// interrupt()); the watch is read without blocking (poll watch_fd()). Not thread-safe, except
// interrupt(): one thread owns a client.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace grpc {
class Channel;
class ClientContext;
}  // namespace grpc

namespace vrdma::etcd {

struct Endpoint {
  std::string host;  // dotted IPv4
  uint16_t port = 0;
  std::string text() const { return host + ":" + std::to_string(port); }
};

// How the client proves who it is. vrdmad always uses TLS with a client certificate; the
// other forms exist for tools and tests that show what etcd refuses.
struct Credentials {
  bool tls = true;
  std::string ca_pem;    // the cluster CA that signed etcd's certificate
  std::string cert_pem;  // this client's certificate; empty: none
  std::string key_pem;
};

// Reads the PEM files into `out`. false and *error when a file cannot be read or is empty.
bool load_credentials(const std::string& ca_file, const std::string& cert_file,
                      const std::string& key_file, Credentials* out, std::string* error);

struct Kv {
  std::string key;
  std::string value;
  int64_t lease = 0;
  int64_t create_revision = 0;
  int64_t mod_revision = 0;
};

struct Event {
  bool deleted = false;  // else a put
  Kv kv;                 // for a delete: the key (and the revision of the delete)
};

// One operation of an unconditional transaction.
struct Op {
  bool deleted = false;  // delete `key`, else put key=value under `lease` (0: none)
  std::string key;
  std::string value;
  int64_t lease = 0;
};

enum class PermType { kRead = 0, kWrite = 1, kReadWrite = 2 };

// The end of the key range that holds exactly the keys starting with `prefix`.
std::string prefix_end(const std::string& prefix);

class Watch;

class Client {
 public:
  Client(std::vector<Endpoint> endpoints, Credentials credentials, int timeout_ms);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // The endpoint calls go to; next_endpoint() moves on to the next one (after a failure) and
  // makes a new connection to it.
  const Endpoint& endpoint() const { return endpoints_[current_]; }
  void next_endpoint();
  std::string endpoints_text() const;  // "https://a:p,https://b:q"
  void set_timeout_ms(int timeout_ms) { timeout_ms_ = timeout_ms; }

  // Each returns true, or false with *error ("failed to connect to all addresses",
  // "etcdserver: permission denied", ...).
  bool grant(int ttl_s, int64_t* lease, int* granted_ttl_s, std::string* error);
  // *ttl_s 0: the lease no longer exists (expired or revoked).
  bool keepalive(int64_t lease, int* ttl_s, std::string* error);
  bool revoke(int64_t lease, std::string* error);
  bool put(const std::string& key, const std::string& value, int64_t lease, std::string* error);
  bool remove(const std::string& key, std::string* error);
  bool txn(const std::vector<Op>& ops, std::string* error);
  // Every key that starts with `prefix`, read page by page at one revision, and that revision.
  bool range_prefix(const std::string& prefix, std::vector<Kv>* kvs, int64_t* revision,
                    std::string* error);

  // Auth administration (needs the root user's certificate once auth is on).
  bool user_add(const std::string& name, std::string* error);  // no password: certificate only
  bool role_add(const std::string& name, std::string* error);
  bool role_grant_prefix(const std::string& role, PermType type, const std::string& prefix,
                         std::string* error);
  bool user_grant_role(const std::string& user, const std::string& role, std::string* error);
  bool auth_enable(std::string* error);

  // A watch on every key under `prefix` from `start_revision` on, open once etcd confirmed it.
  // Poll watch_fd() for input, then watch_read(). One watch at a time.
  bool watch_open(const std::string& prefix, int64_t start_revision, std::string* error);
  int watch_fd() const;
  bool watching() const;
  // Appends the events that arrived. false (and the watch closed) when it ended: etcd went
  // away, or canceled it. watch_compacted() then says whether the start revision was
  // compacted (read everything again and watch from there).
  bool watch_read(std::vector<Event>* events, std::string* error);
  bool watch_compacted() const { return compacted_; }
  void watch_close();

  // From any thread: ends the call in progress now (it fails with "interrupted"), and every
  // call after it at once, until resume().
  void interrupt();
  void resume() { interrupted_ = false; }

 private:
  template <class Stub, class Req, class Rep, class Method>
  bool unary(Stub* stub, Method method, const Req& req, Rep* rep, std::string* error);
  void connect();
  // The context of the call in progress, known to interrupt().
  void begin_call(grpc::ClientContext* ctx);
  void end_call();

  std::vector<Endpoint> endpoints_;
  size_t current_ = 0;
  Credentials credentials_;
  int timeout_ms_;
  std::shared_ptr<grpc::Channel> channel_;
  struct Stubs;
  std::unique_ptr<Stubs> stubs_;
  std::unique_ptr<Watch> watch_;
  bool compacted_ = false;

  std::mutex call_mu_;
  grpc::ClientContext* call_ = nullptr;  // guarded by call_mu_
  std::atomic<bool> interrupted_{false};
};

}  // namespace vrdma::etcd
