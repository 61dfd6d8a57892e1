// DirectPort's dials over loopback: the handshake keeps the caller's deadline; once through,
// the far end's answer may take longer (its vrdmad is busy), up to the limit's answer_ns.
#include "daemon/direct/direct_port.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <chrono>
#include <optional>
#include <thread>

#include "common/clock.h"

namespace vrdma::daemon {
namespace {

constexpr int64_t kMs = 1'000'000;

// A plain TCP listener on loopback standing for the far end's direct port.
struct FarEnd {
  UniqueFd fd;
  uint16_t port = 0;
  FarEnd() {
    fd.reset(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof(sa)), 0);
    EXPECT_EQ(::listen(fd.get(), 4), 0);
    // A dial that never arrives leaves serve() bounded: accept gives up after 5 s.
    const timeval wait{5, 0};
    ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof(wait));
    socklen_t len = sizeof(sa);
    ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&sa), &len);
    port = ntohs(sa.sin_port);
  }
  // Accepts one connection, reads the hello, then answers `status` after `delay_ms` (or
  // keeps it silent with a negative status) and holds it until `hold_ms` passed.
  std::thread serve(int delay_ms, int status, int hold_ms) {
    return std::thread([this, delay_ms, status, hold_ms] {
      UniqueFd c(::accept4(fd.get(), nullptr, nullptr, SOCK_CLOEXEC));
      if (!c) return;
      uint8_t buf[sizeof(wire::Header) + sizeof(wire::DirectHello)];
      size_t have = 0;
      while (have < sizeof(buf)) {
        ssize_t n = ::recv(c.get(), buf + have, sizeof(buf) - have, 0);
        if (n <= 0) return;
        have += size_t(n);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
      if (status >= 0) {
        uint8_t b = uint8_t(status);
        [[maybe_unused]] ssize_t n = ::send(c.get(), &b, 1, MSG_NOSIGNAL);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(hold_ms));
    });
  }
};

struct Dialer {
  UniqueFd ep{::epoll_create1(EPOLL_CLOEXEC)};
  DirectPort port;
  std::optional<int> status;
  bool got_fd = false;
  int64_t ended_ns = 0;
  explicit Dialer(int64_t answer_ns)
      : port(ep.get(), DirectPortLimits{8, 64, 2'000 * kMs, answer_ns}, [](auto&) {}) {}

  void dial(uint16_t to, int64_t deadline_ns) {
    UniqueFd s(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    wire::DirectHello h{};
    port.dial(std::move(s), htonl(INADDR_LOOPBACK), to, h, deadline_ns,
              [this](int st, UniqueFd fd) {
                status = st;
                got_fd = bool(fd);
                ended_ns = now_ns();
              });
  }
  // Runs the loop until the dial ended (bounded: 5 s).
  void run() {
    const int64_t stop = now_ns() + 5'000 * kMs;
    while (!status && now_ns() < stop) {
      epoll_event ev[4];
      int n = ::epoll_wait(ep.get(), ev, 4, 10);
      for (int i = 0; i < n; ++i) port.on_event(ev[i].data.u64, ev[i].events, now_ns());
      port.expire(now_ns());
    }
  }
};

TEST(DirectPortDial, AFarEndThatAnswersLateStillConnects) {
  FarEnd far;
  std::thread t = far.serve(/*delay_ms=*/200, /*status=*/0, /*hold_ms=*/100);
  Dialer d(/*answer_ns=*/2'000 * kMs);
  d.dial(far.port, now_ns() + 50 * kMs);  // the handshake takes microseconds on loopback
  d.run();
  t.join();
  ASSERT_TRUE(d.status.has_value());
  EXPECT_EQ(*d.status, 0);
  EXPECT_TRUE(d.got_fd);
  EXPECT_EQ(d.port.dials(), 0u);
}

TEST(DirectPortDial, AFarEndThatNeverAnswersTimesOutAfterTheAnswerLimit) {
  FarEnd far;
  std::thread t = far.serve(/*delay_ms=*/0, /*status=*/-1, /*hold_ms=*/1'500);
  Dialer d(/*answer_ns=*/300 * kMs);
  const int64_t start = now_ns();
  d.dial(far.port, start + 50 * kMs);
  d.run();
  ASSERT_TRUE(d.status.has_value());
  EXPECT_EQ(*d.status, ETIMEDOUT);
  EXPECT_FALSE(d.got_fd);
  EXPECT_GE(d.ended_ns - start, 300 * kMs);  // not the handshake's 50 ms
  t.join();
}

TEST(DirectPortDial, ARefusalEndsTheDial) {
  FarEnd far;
  std::thread t = far.serve(/*delay_ms=*/0, /*status=*/1, /*hold_ms=*/0);
  Dialer d(/*answer_ns=*/2'000 * kMs);
  d.dial(far.port, now_ns() + 500 * kMs);
  d.run();
  t.join();
  ASSERT_TRUE(d.status.has_value());
  EXPECT_EQ(*d.status, ECONNREFUSED);
  EXPECT_FALSE(d.got_fd);
}

TEST(DirectPortDial, NobodyListeningIsRefused) {
  uint16_t closed;
  {
    FarEnd far;  // a port that was just free; closed again before the dial
    closed = far.port;
  }
  Dialer d(/*answer_ns=*/2'000 * kMs);
  d.dial(closed, now_ns() + 500 * kMs);
  d.run();
  ASSERT_TRUE(d.status.has_value());
  EXPECT_EQ(*d.status, ECONNREFUSED);
}

}  // namespace
}  // namespace vrdma::daemon
