// Helpers of the rsocket tests: an in-process vrdmad shared by every test, connected pairs of
// rsockets, transfers bounded in time (rpoll with a deadline, never an unbounded block), and a
// peer in another process (this test binary started again with --rsocket-peer).
#pragma once

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <rdma/rsocket.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace rstest {

inline constexpr int kWaitMs = 10000;

// Starts the shared daemon (once) and points the libraries at it.
void use_daemon();
uint32_t own_ip();  // network order
uint16_t next_port();
sockaddr_in addr(uint32_t ip, uint16_t port);
std::vector<uint8_t> random_bytes(size_t n, uint32_t seed);

// An rsocket closed at the end of the scope.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Fd& operator=(Fd&& o) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }
  int get() const { return fd_; }
  operator int() const { return fd_; }
  int release() {
    int f = fd_;
    fd_ = -1;
    return f;
  }
  void reset();

 private:
  int fd_ = -1;
};

using Setup = std::function<void(int fd)>;

// A bound, listening rsocket on the container's address (wildcard) and `port`.
Fd listener(uint16_t port, const Setup& setup = {});
// A client connected to a listener and the socket raccept returned for it. `setup` runs on
// the listener and on the client before the connection.
struct Pair {
  Fd client, server;
};
Pair connect_pair(const Setup& setup = {});

// Moves all bytes, waiting with rpoll for at most timeout_ms in all; works on blocking and
// non-blocking sockets (MSG_DONTWAIT). false on error or timeout (errno set).
bool send_all(int fd, const void* p, size_t n, int timeout_ms = kWaitMs);
bool recv_all(int fd, void* p, size_t n, int timeout_ms = kWaitMs);
// Waits with rpoll until `events` (any of them) are reported; returns revents, 0 on timeout.
short wait_for(int fd, short events, int timeout_ms = kWaitMs);

// A peer in its own process (the test binary with --rsocket-peer=PORT:BYTES:SEED): it
// connects to PORT, sends BYTES of random_bytes(BYTES, SEED), then kills itself without
// closing. Returns the pid or -1.
pid_t spawn_dying_peer(uint16_t port, size_t bytes, uint32_t seed);

}  // namespace rstest
