#include "rsocket_fixture.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <random>

#include "daemon_test_util.h"

extern char** environ;

namespace rstest {

using vrdma::daemon::testing::DaemonFixture;

namespace {

int64_t ms_left(std::chrono::steady_clock::time_point end) {
  auto d =
      std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
  return d.count() < 0 ? 0 : d.count();
}

}  // namespace

void use_daemon() {
  static DaemonFixture* d = [] {
    auto* fx = new DaemonFixture();
    setenv("VRDMA_SOCKET", fx->socket().c_str(), 1);
    return fx;
  }();
  (void)d;
}

uint32_t own_ip() {
  return vrdma::daemon::testing::expected_ipv4();
}

uint16_t next_port() {
  static std::atomic<uint16_t> p{31000};
  return p++;
}

sockaddr_in addr(uint32_t ip, uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = ip;
  a.sin_port = htons(port);
  return a;
}

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  std::mt19937 rng(seed);
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    uint32_t r = rng();
    memcpy(&v[i], &r, 4);
  }
  for (; i < n; ++i) v[i] = static_cast<uint8_t>(rng());
  return v;
}

Fd& Fd::operator=(Fd&& o) noexcept {
  if (this != &o) {
    reset();
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

void Fd::reset() {
  if (fd_ >= 0) rclose(fd_);
  fd_ = -1;
}

Fd listener(uint16_t port, const Setup& setup) {
  Fd l(rsocket(AF_INET, SOCK_STREAM, 0));
  EXPECT_GE(l.get(), 0) << strerror(errno);
  if (l.get() < 0) return l;
  if (setup) setup(l);
  sockaddr_in a = addr(INADDR_ANY, port);
  EXPECT_EQ(rbind(l, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0) << strerror(errno);
  EXPECT_EQ(rlisten(l, 8), 0) << strerror(errno);
  return l;
}

Pair connect_pair(const Setup& setup) {
  Pair p;
  uint16_t port = next_port();
  Fd l = listener(port, setup);
  if (l.get() < 0) return p;
  p.client = Fd(rsocket(AF_INET, SOCK_STREAM, 0));
  EXPECT_GE(p.client.get(), 0) << strerror(errno);
  if (setup) setup(p.client);
  sockaddr_in a = addr(own_ip(), port);
  // A blocking connect completes without raccept: the accept service answers it.
  int fl = rfcntl(p.client, F_GETFL);
  rfcntl(p.client, F_SETFL, fl & ~O_NONBLOCK);
  EXPECT_EQ(rconnect(p.client, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0) << strerror(errno);
  rfcntl(p.client, F_SETFL, fl);
  EXPECT_TRUE(wait_for(l, POLLIN) & POLLIN) << "no connection to accept";
  p.server = Fd(raccept(l, nullptr, nullptr));
  EXPECT_GE(p.server.get(), 0) << strerror(errno);
  return p;
}

short wait_for(int fd, short events, int timeout_ms) {
  auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    pollfd p{fd, events, 0};
    int n = rpoll(&p, 1, static_cast<int>(ms_left(end)));
    if (n > 0) return p.revents;
    if (n < 0 && errno != EINTR) return 0;
    if (ms_left(end) == 0) return 0;
  }
}

bool send_all(int fd, const void* p, size_t n, int timeout_ms) {
  auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  const auto* b = static_cast<const uint8_t*>(p);
  size_t done = 0;
  while (done < n) {
    ssize_t r = rsend(fd, b + done, n - done, MSG_DONTWAIT);
    if (r > 0) {
      done += size_t(r);
      continue;
    }
    if (r < 0 && errno != EAGAIN) return false;
    if (ms_left(end) == 0) {
      errno = ETIMEDOUT;
      return false;
    }
    pollfd pf{fd, POLLOUT, 0};
    rpoll(&pf, 1, static_cast<int>(ms_left(end)));
  }
  return true;
}

bool recv_all(int fd, void* p, size_t n, int timeout_ms) {
  auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  auto* b = static_cast<uint8_t*>(p);
  size_t done = 0;
  while (done < n) {
    ssize_t r = rrecv(fd, b + done, n - done, MSG_DONTWAIT);
    if (r > 0) {
      done += size_t(r);
      continue;
    }
    if (r == 0) {
      errno = ECONNRESET;  // end of file before all of it
      return false;
    }
    if (errno != EAGAIN) return false;
    if (ms_left(end) == 0) {
      errno = ETIMEDOUT;
      return false;
    }
    pollfd pf{fd, POLLIN, 0};
    rpoll(&pf, 1, static_cast<int>(ms_left(end)));
  }
  return true;
}

pid_t spawn_dying_peer(uint16_t port, size_t bytes, uint32_t seed) {
  char self[4096];
  ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (len <= 0) return -1;
  self[len] = 0;
  std::string arg = "--rsocket-peer=" + std::to_string(port) + ":" + std::to_string(bytes) + ":" +
                    std::to_string(seed);
  char* argv[] = {self, arg.data(), nullptr};
  pid_t pid = -1;
  if (posix_spawn(&pid, self, nullptr, nullptr, argv, environ) != 0) return -1;
  return pid;
}

namespace {

// The peer process: connect, send, die without closing.
[[noreturn]] void run_dying_peer(const char* spec) {
  unsigned port = 0;
  size_t bytes = 0;
  unsigned seed = 0;
  if (sscanf(spec, "%u:%zu:%u", &port, &bytes, &seed) != 3) _exit(2);
  int fd = rsocket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) _exit(3);
  sockaddr_in a = addr(htonl(INADDR_LOOPBACK), static_cast<uint16_t>(port));
  if (rconnect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a))) _exit(4);
  std::vector<uint8_t> data = random_bytes(bytes, seed);
  if (!send_all(fd, data.data(), data.size())) _exit(5);
  raise(SIGKILL);
  _exit(6);
}

}  // namespace

}  // namespace rstest

int main(int argc, char** argv) {
  if (argc == 2 && strncmp(argv[1], "--rsocket-peer=", 15) == 0)
    rstest::run_dying_peer(argv[1] + 15);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
