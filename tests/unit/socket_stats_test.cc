// The direct path's traffic as the kernel counts it: the sock_diag readings of TCP connections
// to or from a port (a real connection over loopback, in this process's namespace), and the
// ledger that keeps a namespace's totals monotonic as connections close.
#include "daemon/direct/socket_stats.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <linux/netlink.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <thread>
#include <vector>

#include "common/unique_fd.h"

namespace vrdma::daemon {
namespace {

// A connected pair over loopback: `server` accepted on `port`.
struct Pair {
  UniqueFd listener, client, server;
  uint16_t port = 0;
};

Pair connect_pair() {
  Pair p;
  p.listener.reset(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  EXPECT_EQ(::bind(p.listener.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  EXPECT_EQ(::listen(p.listener.get(), 4), 0);
  EXPECT_EQ(::getsockname(p.listener.get(), reinterpret_cast<sockaddr*>(&a), &len), 0);
  p.port = ntohs(a.sin_port);
  p.client.reset(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  EXPECT_EQ(::connect(p.client.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  p.server.reset(::accept(p.listener.get(), nullptr, nullptr));
  return p;
}

void move_bytes(int from, int to, size_t n) {
  std::vector<char> buf(n, 'x');
  size_t sent = 0, got = 0;
  while (got < n) {
    if (sent < n) {
      ssize_t w = ::send(from, buf.data() + sent, n - sent, MSG_DONTWAIT);
      if (w > 0) sent += static_cast<size_t>(w);
    }
    ssize_t r = ::recv(to, buf.data(), n - got, MSG_DONTWAIT);
    if (r > 0) got += static_cast<size_t>(r);
  }
}

UniqueFd diag_socket() {
  return UniqueFd(::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, 4));
}

TEST(SocketStats, ReadsBothEndsOfConnectionsOnThePortOnly) {
  Pair p = connect_pair();
  Pair other = connect_pair();  // another port: not counted
  move_bytes(p.client.get(), p.server.get(), 100000);
  move_bytes(p.server.get(), p.client.get(), 3000);
  move_bytes(other.client.get(), other.server.get(), 5000);
  UniqueFd diag = diag_socket();
  ASSERT_TRUE(diag);
  std::map<uint64_t, SocketBytes> s;
  ASSERT_EQ(read_port_sockets(diag.get(), p.port, s), 0);
  ASSERT_EQ(s.size(), 2u);  // the client's end and the server's (not the listener)
  uint64_t sent = 0, received = 0;
  for (const auto& [cookie, b] : s) {
    sent += b.sent;
    received += b.received;
  }
  // The client sent 100000 and got 3000; the server the other way round (tcpi_bytes_acked
  // counts the connecting side's SYN as a byte).
  EXPECT_GE(sent, 103000u);
  EXPECT_LE(sent, 103001u);
  EXPECT_EQ(received, 103000u);
}

TEST(SocketStats, TheLedgerStaysMonotonicAsConnectionsComeAndGo) {
  DirectTraffic t;
  t.update({}, {{1, {100, 10}}, {2, {50, 5}}});
  EXPECT_EQ(t.totals().sent, 150u);
  EXPECT_EQ(t.connections(), 2u);
  // 1 is destroyed with its final figures; 2 grows.
  t.update({{1, {180, 12}}}, {{2, {70, 5}}});
  EXPECT_EQ(t.totals().sent, 250u);
  EXPECT_EQ(t.totals().received, 17u);
  // 2 disappears before the kernel's word on it: its last reading counts, then the rest.
  t.update({}, {});
  EXPECT_EQ(t.totals().sent, 250u);
  EXPECT_EQ(t.connections(), 0u);
  t.update({{2, {90, 6}}}, {});
  EXPECT_EQ(t.totals().sent, 270u);
  EXPECT_EQ(t.totals().received, 18u);
  // One that opened and closed between two readings.
  t.update({{3, {1000, 1}}}, {});
  EXPECT_EQ(t.totals().sent, 1270u);
  // Carried into a new ledger of the namespace.
  DirectTraffic next;
  next.carry(t.totals());
  next.update({}, {{4, {5, 0}}});
  EXPECT_EQ(next.totals().sent, 1275u);
}

}  // namespace
}  // namespace vrdma::daemon
