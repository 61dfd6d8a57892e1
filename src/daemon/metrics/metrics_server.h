// The metrics endpoint: a small HTTP/1.x server in vrdmad's own event loop (no thread). Each
// scrape is one connection: its request head is read (at most HttpRequest::kMaxHead bytes),
// the page rendered, written without blocking, and the connection closed. A client gets
// kDeadlineNs for all of it, and at most kMaxConnections are open at once (more are closed at
// once), so a slow or hostile client costs a descriptor for a while, never the loop's time.
//
//   MetricsServer m;
//   m.start(epoll_fd, "127.0.0.1:9464", [] { return page; });  // registers its descriptors
//   ... in the loop: if (MetricsServer::is_tag(tag)) m.on_event(tag, events, now);
//   ... timeout from m.next_deadline(), then m.expire(now)
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "common/unique_fd.h"
#include "daemon/metrics/http_request.h"

namespace vrdma::daemon::metrics {

class MetricsServer {
 public:
  using Render = std::function<std::string()>;
  // vrdmad's event loop tells sources apart by the high 32 bits of their epoll tag (its own
  // listener, wake-up and reload, then the router's 3): this server's are 5 << 32 | n.
  static constexpr uint64_t kTagBase = 5ull << 32;
  static constexpr size_t kMaxConnections = 8;
  static constexpr int64_t kDeadlineNs = 5'000'000'000;
  static constexpr const char* kPath = "/metrics";

  static bool is_tag(uint64_t tag) { return (tag >> 32) == (kTagBase >> 32); }

  MetricsServer() = default;
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  // Listens on "IPV4:PORT" (port 0: any) and adds its descriptors to `epoll_fd`. 0 or errno.
  int start(int epoll_fd, const std::string& listen, Render render);
  uint16_t port() const { return port_; }

  void on_event(uint64_t tag, uint32_t events, int64_t now_ns);
  // The earliest deadline of an open connection, -1 when none is open.
  int64_t next_deadline() const;
  // Closes the connections whose deadline passed.
  void expire(int64_t now_ns);

  uint64_t scrapes() const { return scrapes_; }
  size_t open_connections() const { return conns_.size(); }

 private:
  struct Conn {
    UniqueFd fd;
    HttpRequest req;
    std::string out;
    size_t sent = 0;
    int64_t deadline_ns = 0;
    // Reading the head; writing the answer; then, its write side shut, reading and dropping
    // what the client still sends until it closes (closing with unread input would reset the
    // connection and could destroy the answer before the client read it).
    enum class Phase { kReading, kWriting, kDraining } phase = Phase::kReading;
    size_t drained = 0;
  };
  static constexpr size_t kMaxDrain = 64 * 1024;
  static constexpr int64_t kDrainNs = 1'000'000'000;
  void accept_all(int64_t now_ns);
  void on_readable(uint32_t id, Conn& c, int64_t now_ns);
  void respond(Conn& c, int code, const std::string& body, bool head_only);
  // Writes what the socket takes; then the connection drains, waits for room, or is closed.
  void write_answer(uint32_t id, Conn& c, int64_t now_ns);
  void drain(uint32_t id, Conn& c);
  bool watch(uint32_t id, Conn& c, uint32_t events);
  void close(uint32_t id);

  int epoll_ = -1;
  UniqueFd listen_;
  uint16_t port_ = 0;
  Render render_;
  uint32_t next_id_ = 1;
  std::map<uint32_t, Conn> conns_;
  uint64_t scrapes_ = 0;
};

}  // namespace vrdma::daemon::metrics
