// Helpers for the vrdmad tests: a daemon in a thread on a private socket, raw protocol
// connections with bounded waits, and client arenas in memfds.
#pragma once

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/protocol.h"
#include "common/unix_socket.h"
#include "daemon/core/daemon.h"
#include "shm/layout.h"

namespace vrdma::daemon::testing {

inline constexpr int kTimeoutMs = 5000;

// A daemon serving a socket in a fresh temporary directory, run() in its own thread. Its
// configuration gives the host's processes (the tests) a device; `tweak` may change that.
class DaemonFixture {
 public:
  explicit DaemonFixture(std::function<void(DaemonConfig&)> tweak = {});
  ~DaemonFixture();
  const std::string& socket() const { return socket_; }
  Daemon& daemon() { return *daemon_; }
  std::thread& thread() { return thread_; }
  void stop();  // stops and joins; idempotent

 private:
  std::string dir_;
  std::string socket_;
  std::unique_ptr<Daemon> daemon_;
  std::thread thread_;
};

// One protocol connection. Every wait is bounded.
class Conn {
 public:
  Conn() = default;
  explicit Conn(int fd) : fd_(fd) {}
  static Conn open(const std::string& path);
  Conn(Conn&& o) noexcept
      : fd_(std::exchange(o.fd_, -1)), seq_(o.seq_), async_(std::move(o.async_)) {}
  Conn& operator=(Conn&& o) noexcept;
  ~Conn() { close(); }
  int fd() const { return fd_; }
  void close();

  // Receives one packet, waiting at most timeout_ms. false on timeout or error (then *err
  // holds -errno, -ETIMEDOUT on timeout).
  bool recv(Packet& p, int timeout_ms = kTimeoutMs, int* err = nullptr);
  // Sends a request and waits for the reply with its sequence number. Asynchronous packets
  // (seq 0) that arrive first are kept for take_async().
  bool call(proto::Op op, const void* payload, size_t len, Packet& reply,
            std::span<const int> fds = {});
  template <typename T>
  bool call(proto::Op op, const T& req, Packet& reply, std::span<const int> fds = {}) {
    return call(op, &req, sizeof(req), reply, fds);
  }
  // Waits for an asynchronous packet (seq 0).
  bool take_async(Packet& p, int timeout_ms = kTimeoutMs);
  // True when the daemon closed the connection within the timeout (unread packets are read
  // and discarded).
  bool closed_by_daemon(int timeout_ms = kTimeoutMs);

  proto::HelloRep hello(proto::ClientKind kind = proto::ClientKind::kVerbs);
  std::string status();  // "" on failure
  uint32_t client_id() const { return client_id_; }
  // fd ids for the descriptors a test hands over (2 and up: 0 is the arena, 1 the key table).
  uint32_t next_fd_id() { return next_fd_id_++; }

 private:
  int fd_ = -1;
  uint32_t seq_ = 1;
  uint32_t client_id_ = 0;
  uint32_t next_fd_id_ = 2;
  std::deque<std::unique_ptr<Packet>> async_;
};

// A client arena in a memfd (sealed against shrinking and growing unless `sealed` is false),
// mapped by the test too.
class TestArena {
 public:
  explicit TestArena(uint64_t size = shm::kArenaSize, uint32_t magic = shm::kArenaMagic,
                     bool sealed = true);
  ~TestArena();
  int fd() const { return fd_; }
  uint64_t size() const { return size_; }
  shm::ArenaHeader* header() { return static_cast<shm::ArenaHeader*>(base_); }
  shm::QpShared* qp_at(uint32_t offset) {
    return reinterpret_cast<shm::QpShared*>(static_cast<char*>(base_) + offset);
  }
  // The i-th QP slot used by the tests.
  static uint32_t qp_offset(int i) {
    return 4096 + static_cast<uint32_t>(i) * sizeof(shm::QpShared);
  }

 private:
  int fd_ = -1;
  uint64_t size_ = 0;
  void* base_ = nullptr;
};

// A QP object (shm::QpObject, a receive ring and queue of 4) in a sealed memfd, mapped by the
// test too.
class TestObject {
 public:
  TestObject(uint32_t owner, bool sealed = true);
  ~TestObject();
  int fd() const { return fd_; }
  shm::QpObject* object() { return static_cast<shm::QpObject*>(base_); }

 private:
  int fd_ = -1;
  uint64_t size_ = 0;
  void* base_ = nullptr;
};

// Convenience wrappers; each asserts nothing, returns the reply status (or -1 on no reply).
int put_arena(Conn& c, TestArena& a);
int put_fd(Conn& c, uint32_t fd_id, proto::FdKind kind, int fd, uint64_t size = 0,
           uint32_t flags = 0);
// Hands over a new QP object (kept in `objects` if given, so the test can look at it) and asks
// for a QPN with it.
int alloc_qpn(Conn& c, uint32_t type, uint32_t offset, uint32_t* qpn,
              std::vector<std::unique_ptr<TestObject>>* objects = nullptr,
              uint32_t* object_fd_id = nullptr, uint32_t pd = 1);
int connect_qp(Conn& c, uint32_t local, uint32_t dest, const uint8_t* gid16,
               proto::ConnectQpRep* rep = nullptr);
int get_fd(Conn& c, uint32_t owner, uint32_t fd_id, int* fd_out, uint32_t via_qpn = 0);
int alloc_key(Conn& c, uint32_t index, uint32_t* key, uint32_t access = 0x7, uint32_t pd = 1);

// First non-loopback IPv4 of an interface that is up in this namespace, else 127.0.0.1.
uint32_t expected_ipv4();

}  // namespace vrdma::daemon::testing
