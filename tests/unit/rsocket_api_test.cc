// The rest of the rsocket API against an in-process vrdmad: descriptors, addresses,
// socket options (set, get, inherited, refused once connected), rfcntl, rselect, riomap /
// riowrite / riounmap, and the errors bad arguments and wrong states give.
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/select.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <future>

#include "rsocket_fixture.h"

namespace rstest {
namespace {

class RsocketApi : public ::testing::Test {
 protected:
  void SetUp() override { use_daemon(); }
};

int get_int(int fd, int level, int name) {
  int v = -12345;
  socklen_t len = sizeof(v);
  EXPECT_EQ(rgetsockopt(fd, level, name, &v, &len), 0)
      << level << "/" << name << ": " << strerror(errno);
  EXPECT_EQ(len, sizeof(int));
  return v;
}

int set_int(int fd, int level, int name, int v) {
  return rsetsockopt(fd, level, name, &v, sizeof(v));
}

TEST_F(RsocketApi, SocketsAreRealDistinctDescriptors) {
  Fd a(rsocket(AF_INET, SOCK_STREAM, 0)), b(rsocket(AF_INET6, SOCK_STREAM, IPPROTO_TCP));
  ASSERT_GE(a.get(), 0) << strerror(errno);
  ASSERT_GE(b.get(), 0) << strerror(errno);
  EXPECT_NE(a.get(), b.get());
  EXPECT_GE(fcntl(a, F_GETFD), 0);  // an open descriptor of this process
  EXPECT_TRUE(rfcntl(a, F_GETFD) & FD_CLOEXEC);
  int n = a.release();
  ASSERT_EQ(rclose(n), 0);
  EXPECT_EQ(fcntl(n, F_GETFD), -1);  // closed with the socket
  EXPECT_EQ(errno, EBADF);
  EXPECT_EQ(rclose(n), -1);
  EXPECT_EQ(errno, EBADF);
}

// librspreload takes a descriptor for the program first (open of /dev/null), then asks for the
// rsocket, and maps select()'s results back by walking descriptors upwards: an rsocket number
// below the program's descriptor would stand for it, and select() would flag the wrong one (a
// server that never sees its control connection readable). Another thread closing a lower
// descriptor in between must not hand that hole to the rsocket.
TEST_F(RsocketApi, NumbersAreAboveTheDescriptorTheCallerJustTook) {
  auto caller_descriptor_above_a_hole = [](int& hole) {
    hole = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    const int taken = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    ::close(hole);  // free again, below `taken`
    return taken;
  };
  int hole = -1;
  const int a = caller_descriptor_above_a_hole(hole);
  ASSERT_GT(a, hole);
  Fd s(rsocket(AF_INET, SOCK_STREAM, 0));
  ASSERT_GE(s.get(), 0) << strerror(errno);
  EXPECT_GT(s.get(), a);
  ::close(a);

  uint16_t port = next_port();
  Fd l = listener(port);
  Fd c(rsocket(AF_INET, SOCK_STREAM, 0));
  sockaddr_in dst = addr(own_ip(), port);
  ASSERT_EQ(rconnect(c, reinterpret_cast<sockaddr*>(&dst), sizeof(dst)), 0) << strerror(errno);
  ASSERT_TRUE(wait_for(l, POLLIN) & POLLIN);
  const int b = caller_descriptor_above_a_hole(hole);
  Fd accepted(raccept(l, nullptr, nullptr));
  ASSERT_GE(accepted.get(), 0) << strerror(errno);
  EXPECT_GT(accepted.get(), b);
  ::close(b);
  // The renumbered sockets work as before.
  const char msg[] = "hello";
  ASSERT_TRUE(send_all(c, msg, sizeof(msg)));
  char got[sizeof(msg)] = {};
  ASSERT_TRUE(recv_all(accepted, got, sizeof(got)));
  EXPECT_STREQ(got, msg);
}

TEST_F(RsocketApi, BadArgumentsAndStates) {
  EXPECT_EQ(rsocket(AF_UNIX, SOCK_STREAM, 0), -1);
  EXPECT_EQ(errno, EAFNOSUPPORT);
  EXPECT_EQ(rsocket(AF_INET, SOCK_DGRAM, 0), -1);  // datagram rsockets are not implemented
  EXPECT_EQ(errno, ESOCKTNOSUPPORT);
  EXPECT_EQ(rsocket(AF_INET, SOCK_STREAM, IPPROTO_UDP), -1);
  EXPECT_EQ(errno, EPROTONOSUPPORT);
  int pipefd[2];
  ASSERT_EQ(pipe(pipefd), 0);
  char c = 0;
  EXPECT_EQ(rsend(pipefd[1], &c, 1, 0), -1);  // not an rsocket
  EXPECT_EQ(errno, EBADF);
  EXPECT_EQ(rrecv(-1, &c, 1, 0), -1);
  EXPECT_EQ(errno, EBADF);
  close(pipefd[0]);
  close(pipefd[1]);

  Fd s(rsocket(AF_INET, SOCK_STREAM, 0));
  ASSERT_GE(s.get(), 0);
  EXPECT_EQ(rrecv(s, &c, 1, 0), -1);
  EXPECT_EQ(errno, ENOTCONN);
  EXPECT_EQ(rsend(s, &c, 1, 0), -1);
  EXPECT_EQ(errno, ENOTCONN);
  EXPECT_EQ(rshutdown(s, SHUT_WR), -1);
  EXPECT_EQ(errno, ENOTCONN);
  EXPECT_EQ(rshutdown(s, 42), -1);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(raccept(s, nullptr, nullptr), -1);  // not listening
  EXPECT_EQ(errno, EINVAL);
  sockaddr_in peer{};
  socklen_t len = sizeof(peer);
  EXPECT_EQ(rgetpeername(s, reinterpret_cast<sockaddr*>(&peer), &len), -1);
  EXPECT_EQ(errno, ENOTCONN);
  EXPECT_EQ(rsetsockopt(s, SOL_SOCKET, SO_REUSEADDR, nullptr, 4), -1);
  EXPECT_EQ(errno, EFAULT);
  EXPECT_EQ(set_int(s, SOL_SOCKET, SO_BROADCAST, 1), -1);
  EXPECT_EQ(errno, ENOPROTOOPT);
  EXPECT_EQ(rconnect(s, nullptr, 0), -1);
  EXPECT_EQ(errno, EFAULT);
  sockaddr_in6 v6{};
  v6.sin6_family = AF_INET6;
  inet_pton(AF_INET6, "2001:db8::1", &v6.sin6_addr);
  EXPECT_EQ(rbind(s, reinterpret_cast<sockaddr*>(&v6), sizeof(v6)), -1);
  EXPECT_EQ(errno, EAFNOSUPPORT);
  sockaddr_in other = addr(inet_addr("10.254.1.2"), 0);
  EXPECT_EQ(rbind(s, reinterpret_cast<sockaddr*>(&other), sizeof(other)), -1);
  EXPECT_EQ(errno, EADDRNOTAVAIL);
  sockaddr_in any = addr(INADDR_ANY, 0);
  EXPECT_EQ(rbind(s, reinterpret_cast<sockaddr*>(&any), sizeof(any) - 1), -1);
  EXPECT_EQ(errno, EINVAL);
  ASSERT_EQ(rbind(s, reinterpret_cast<sockaddr*>(&any), sizeof(any)), 0) << strerror(errno);
  EXPECT_EQ(rbind(s, reinterpret_cast<sockaddr*>(&any), sizeof(any)), -1);  // twice
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(riowrite(s, &c, 1, 0, 0), size_t(-1));
  EXPECT_EQ(errno, ENOTCONN);
  EXPECT_EQ(rfcntl(s, F_DUPFD, 0), -1);
  EXPECT_EQ(errno, EINVAL);

  Pair p = connect_pair();
  ASSERT_GE(p.server.get(), 0);
  sockaddr_in a = addr(own_ip(), 1);
  EXPECT_EQ(rconnect(p.client, reinterpret_cast<sockaddr*>(&a), sizeof(a)), -1);
  EXPECT_EQ(errno, EISCONN);
  EXPECT_EQ(rlisten(p.client, 1), -1);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(rsend(p.client, &c, 1, MSG_OOB), -1);
  EXPECT_EQ(errno, EOPNOTSUPP);
  EXPECT_EQ(rrecv(p.client, &c, 1, MSG_OOB), -1);
  EXPECT_EQ(errno, EOPNOTSUPP);
  EXPECT_EQ(rsend(p.client, nullptr, 1, 0), -1);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(rsend(p.client, &c, 0, 0), 0);
}

TEST_F(RsocketApi, SecondListenerOnAPortIsEaddrinuse) {
  uint16_t port = next_port();
  Fd l = listener(port);
  Fd m(rsocket(AF_INET, SOCK_STREAM, 0));
  sockaddr_in a = addr(INADDR_ANY, port);
  ASSERT_EQ(rbind(m, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  EXPECT_EQ(rlisten(m, 4), -1);
  EXPECT_EQ(errno, EADDRINUSE);
  EXPECT_EQ(rlisten(l, 4), 0);  // again: nothing changes
}

TEST_F(RsocketApi, NamesOfBothEnds) {
  uint16_t port = next_port();
  Fd l = listener(port);
  sockaddr_in a{};
  socklen_t len = sizeof(a);
  ASSERT_EQ(rgetsockname(l, reinterpret_cast<sockaddr*>(&a), &len), 0);
  EXPECT_EQ(a.sin_family, AF_INET);
  EXPECT_EQ(ntohs(a.sin_port), port);
  // An AF_INET6 client reaching the container by its v4-mapped address.
  Fd c(rsocket(AF_INET6, SOCK_STREAM, 0));
  sockaddr_in6 dst{};
  dst.sin6_family = AF_INET6;
  dst.sin6_port = htons(port);
  dst.sin6_addr.s6_addr[10] = dst.sin6_addr.s6_addr[11] = 0xff;
  uint32_t ip = own_ip();
  memcpy(dst.sin6_addr.s6_addr + 12, &ip, 4);
  ASSERT_EQ(rconnect(c, reinterpret_cast<sockaddr*>(&dst), sizeof(dst)), 0) << strerror(errno);
  ASSERT_TRUE(wait_for(l, POLLIN) & POLLIN);
  sockaddr_in from{};
  len = sizeof(from);
  Fd s(raccept(l, reinterpret_cast<sockaddr*>(&from), &len));
  ASSERT_GE(s.get(), 0);
  sockaddr_in6 cname{}, cpeer{};
  socklen_t l6 = sizeof(cname);
  ASSERT_EQ(rgetsockname(c, reinterpret_cast<sockaddr*>(&cname), &l6), 0);
  EXPECT_EQ(l6, sizeof(sockaddr_in6));
  EXPECT_EQ(cname.sin6_family, AF_INET6);
  EXPECT_TRUE(IN6_IS_ADDR_V4MAPPED(&cname.sin6_addr));
  l6 = sizeof(cpeer);
  ASSERT_EQ(rgetpeername(c, reinterpret_cast<sockaddr*>(&cpeer), &l6), 0);
  EXPECT_EQ(ntohs(cpeer.sin6_port), port);
  EXPECT_EQ(memcmp(cpeer.sin6_addr.s6_addr + 12, &ip, 4), 0);
  // The server sees the client's address and port.
  EXPECT_EQ(from.sin_addr.s_addr, ip);
  EXPECT_EQ(from.sin_port, cname.sin6_port);
  sockaddr_in sname{}, speer{};
  len = sizeof(sname);
  ASSERT_EQ(rgetsockname(s, reinterpret_cast<sockaddr*>(&sname), &len), 0);
  EXPECT_EQ(ntohs(sname.sin_port), port);
  EXPECT_EQ(sname.sin_addr.s_addr, ip);
  len = sizeof(speer);
  ASSERT_EQ(rgetpeername(s, reinterpret_cast<sockaddr*>(&speer), &len), 0);
  EXPECT_EQ(speer.sin_port, cname.sin6_port);
  // A short buffer gets what fits and the full length.
  len = 4;
  ASSERT_EQ(rgetsockname(s, reinterpret_cast<sockaddr*>(&sname), &len), 0);
  EXPECT_EQ(len, sizeof(sockaddr_in));
  len = 0;
  EXPECT_EQ(rgetsockname(s, nullptr, &len), 0);
  EXPECT_EQ(len, sizeof(sockaddr_in));
}

TEST_F(RsocketApi, ClientBoundBeforeConnectKeepsItsPort) {
  uint16_t port = next_port(), local = next_port();
  Fd l = listener(port);
  Fd c(rsocket(AF_INET, SOCK_STREAM, 0));
  sockaddr_in me = addr(htonl(INADDR_LOOPBACK), local);  // loopback: the container itself
  ASSERT_EQ(rbind(c, reinterpret_cast<sockaddr*>(&me), sizeof(me)), 0) << strerror(errno);
  sockaddr_in a = addr(htonl(INADDR_LOOPBACK), port);
  ASSERT_EQ(rconnect(c, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0) << strerror(errno);
  ASSERT_TRUE(wait_for(l, POLLIN) & POLLIN);
  sockaddr_in from{};
  socklen_t len = sizeof(from);
  Fd s(raccept(l, reinterpret_cast<sockaddr*>(&from), &len));
  ASSERT_GE(s.get(), 0);
  EXPECT_EQ(ntohs(from.sin_port), local);
  EXPECT_EQ(from.sin_addr.s_addr, own_ip());
}

TEST_F(RsocketApi, OptionsRoundTripAndTakeEffect) {
  Fd s(rsocket(AF_INET, SOCK_STREAM, 0));
  ASSERT_GE(s.get(), 0);
  EXPECT_EQ(get_int(s, SOL_SOCKET, SO_TYPE), SOCK_STREAM);
  EXPECT_EQ(get_int(s, SOL_SOCKET, SO_ERROR), 0);
  EXPECT_EQ(get_int(s, SOL_SOCKET, SO_ACCEPTCONN), 0);
  for (int name : {SO_REUSEADDR, SO_KEEPALIVE, SO_OOBINLINE}) {
    EXPECT_EQ(get_int(s, SOL_SOCKET, name), 0);
    EXPECT_EQ(set_int(s, SOL_SOCKET, name, 1), 0);
    EXPECT_NE(get_int(s, SOL_SOCKET, name), 0);
  }
  EXPECT_EQ(set_int(s, IPPROTO_TCP, TCP_NODELAY, 1), 0);
  EXPECT_EQ(get_int(s, IPPROTO_TCP, TCP_NODELAY), 1);
  EXPECT_EQ(set_int(s, IPPROTO_TCP, TCP_KEEPIDLE, 30), 0);
  EXPECT_EQ(get_int(s, IPPROTO_TCP, TCP_KEEPIDLE), 30);
  EXPECT_EQ(set_int(s, IPPROTO_TCP, TCP_KEEPIDLE, 0), -1);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_GT(get_int(s, IPPROTO_TCP, TCP_MAXSEG), 0);
  linger lg{1, 5};
  EXPECT_EQ(rsetsockopt(s, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)), 0);
  linger back{};
  socklen_t len = sizeof(back);
  EXPECT_EQ(rgetsockopt(s, SOL_SOCKET, SO_LINGER, &back, &len), 0);
  EXPECT_EQ(back.l_onoff, 1);
  EXPECT_EQ(back.l_linger, 5);
  // Buffers: the value set, doubled (as Linux reports it).
  EXPECT_EQ(set_int(s, SOL_SOCKET, SO_SNDBUF, 100000), 0);
  EXPECT_EQ(get_int(s, SOL_SOCKET, SO_SNDBUF), 200000);
  EXPECT_EQ(set_int(s, SOL_SOCKET, SO_RCVBUF, 300000), 0);
  EXPECT_EQ(get_int(s, SOL_SOCKET, SO_RCVBUF), 600000);
  // SOL_RDMA.
  EXPECT_EQ(set_int(s, SOL_RDMA, RDMA_SQSIZE, 100), 0);
  EXPECT_EQ(get_int(s, SOL_RDMA, RDMA_SQSIZE), 100);
  EXPECT_EQ(set_int(s, SOL_RDMA, RDMA_RQSIZE, 1), 0);  // raised to the least
  EXPECT_EQ(get_int(s, SOL_RDMA, RDMA_RQSIZE), 16);
  EXPECT_EQ(set_int(s, SOL_RDMA, RDMA_INLINE, 200), 0);
  EXPECT_EQ(get_int(s, SOL_RDMA, RDMA_INLINE), 200);
  EXPECT_EQ(set_int(s, SOL_RDMA, RDMA_IOMAPSIZE, 4), 0);
  EXPECT_EQ(get_int(s, SOL_RDMA, RDMA_IOMAPSIZE), 4);
  EXPECT_EQ(set_int(s, SOL_RDMA, RDMA_SQSIZE, -1), -1);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(set_int(s, SOL_RDMA, 999, 1), -1);
  EXPECT_EQ(errno, ENOPROTOOPT);
  int tiny = 0;
  len = 1;
  EXPECT_EQ(rgetsockopt(s, SOL_SOCKET, SO_TYPE, &tiny, &len), -1);
  EXPECT_EQ(errno, EINVAL);

  // A listener's options go to the sockets it accepts; once connected the ring is the
  // power of two at or above the size asked, and SOL_RDMA is fixed.
  Pair p = connect_pair([](int fd) {
    set_int(fd, SOL_SOCKET, SO_RCVBUF, 300000);
    set_int(fd, SOL_RDMA, RDMA_SQSIZE, 64);
    set_int(fd, SOL_SOCKET, SO_KEEPALIVE, 1);
  });
  ASSERT_GE(p.server.get(), 0);
  EXPECT_EQ(get_int(p.server, SOL_SOCKET, SO_RCVBUF), 1 << 20);
  EXPECT_EQ(get_int(p.server, SOL_RDMA, RDMA_SQSIZE), 64);
  EXPECT_EQ(get_int(p.server, SOL_SOCKET, SO_KEEPALIVE), 1);
  EXPECT_EQ(get_int(p.client, SOL_SOCKET, SO_RCVBUF), 1 << 20);
  EXPECT_EQ(set_int(p.client, SOL_RDMA, RDMA_SQSIZE, 32), -1);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(set_int(p.client, SOL_SOCKET, SO_RCVBUF, 1000), 0);  // accepted, changes nothing
  EXPECT_EQ(get_int(p.client, SOL_SOCKET, SO_RCVBUF), 1 << 20);
  // A connection with the smallest queues and buffers still moves a lot of data.
  Pair q = connect_pair([](int fd) {
    set_int(fd, SOL_RDMA, RDMA_SQSIZE, 16);
    set_int(fd, SOL_RDMA, RDMA_RQSIZE, 16);
    set_int(fd, SOL_RDMA, RDMA_INLINE, 0);
    set_int(fd, SOL_SOCKET, SO_SNDBUF, 1);
    set_int(fd, SOL_SOCKET, SO_RCVBUF, 1);
  });
  ASSERT_GE(q.server.get(), 0);
  std::vector<uint8_t> data = random_bytes(2 << 20, 11), got(2 << 20);
  auto sender = std::async(std::launch::async,
                           [&] { return send_all(q.client, data.data(), data.size(), 60000); });
  EXPECT_TRUE(recv_all(q.server, got.data(), got.size(), 60000)) << strerror(errno);
  EXPECT_TRUE(sender.get());
  EXPECT_TRUE(got == data);
}

TEST_F(RsocketApi, RfcntlSetsNonBlocking) {
  Pair p = connect_pair();
  ASSERT_GE(p.server.get(), 0);
  EXPECT_EQ(rfcntl(p.server, F_GETFL) & O_NONBLOCK, 0);
  ASSERT_EQ(rfcntl(p.server, F_SETFL, O_NONBLOCK), 0);
  char c;
  EXPECT_EQ(rrecv(p.server, &c, 1, 0), -1);
  EXPECT_EQ(errno, EAGAIN);
  ASSERT_EQ(rfcntl(p.server, F_SETFL, 0), 0);
  EXPECT_EQ(rrecv(p.server, &c, 1, MSG_DONTWAIT), -1);  // per call
  EXPECT_EQ(errno, EAGAIN);
}

TEST_F(RsocketApi, RselectMixesRsocketsAndPipes) {
  Pair p = connect_pair();
  ASSERT_GE(p.server.get(), 0);
  int pipefd[2];
  ASSERT_EQ(pipe(pipefd), 0);
  int maxfd = std::max({p.server.get(), p.client.get(), pipefd[0]}) + 1;
  fd_set r, w;
  FD_ZERO(&r);
  FD_SET(p.server, &r);
  FD_SET(pipefd[0], &r);
  timeval tv{0, 100000};
  EXPECT_EQ(rselect(maxfd, &r, nullptr, nullptr, &tv), 0);  // nothing yet
  ASSERT_EQ(write(pipefd[1], "p", 1), 1);
  ASSERT_EQ(rsend(p.client, "q", 1, 0), 1);
  FD_ZERO(&r);
  FD_SET(p.server, &r);
  FD_SET(pipefd[0], &r);
  FD_ZERO(&w);
  FD_SET(p.client, &w);
  tv = {5, 0};
  int n = 0;
  for (int i = 0; i < 10 && n < 3; ++i) {  // the pipe may be seen before the rsocket's data
    fd_set rr = r, ww = w;
    n = rselect(maxfd, &rr, &ww, nullptr, &tv);
    if (n == 3) {
      EXPECT_TRUE(FD_ISSET(p.server, &rr));
      EXPECT_TRUE(FD_ISSET(pipefd[0], &rr));
      EXPECT_TRUE(FD_ISSET(p.client, &ww));
    }
  }
  EXPECT_EQ(n, 3);
  EXPECT_EQ(rselect(-1, nullptr, nullptr, nullptr, nullptr), -1);
  EXPECT_EQ(errno, EINVAL);
  close(pipefd[0]);
  close(pipefd[1]);
}

TEST_F(RsocketApi, RiomapRiowriteLandInTheMappedBuffer) {
  Pair p = connect_pair([](int fd) { set_int(fd, SOL_RDMA, RDMA_IOMAPSIZE, 2); });
  ASSERT_GE(p.server.get(), 0);
  size_t n = (1 << 20) + 123;
  void* mem = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mem, MAP_FAILED);
  auto* target = static_cast<uint8_t*>(mem);
  memset(target, 0, n);
  off_t off = riomap(p.server, target, n, PROT_WRITE, 0, 4096);
  ASSERT_EQ(off, 4096) << strerror(errno);
  // The mapping is known to the peer once it read something sent after riomap.
  ASSERT_EQ(rsend(p.server, "m", 1, 0), 1);
  char c;
  ASSERT_TRUE(recv_all(p.client, &c, 1));
  std::vector<uint8_t> data = random_bytes(n, 12);
  // Two writes at offsets inside the mapping, then a message that tells the owner.
  size_t half = n / 2;
  EXPECT_EQ(riowrite(p.client, data.data(), half, 4096, 0), half) << strerror(errno);
  EXPECT_EQ(riowrite(p.client, data.data() + half, n - half, off_t(4096 + half), 0), n - half);
  ASSERT_EQ(rsend(p.client, "d", 1, 0), 1);
  ASSERT_TRUE(recv_all(p.server, &c, 1));
  EXPECT_EQ(c, 'd');
  EXPECT_EQ(memcmp(target, data.data(), n), 0) << "riowrite data differs";
  // riowrite never shows up in the byte stream.
  EXPECT_EQ(rrecv(p.server, &c, 1, MSG_DONTWAIT), -1);
  EXPECT_EQ(errno, EAGAIN);
  // Outside any mapping: EINVAL; beyond the end of one: what fits.
  EXPECT_EQ(riowrite(p.client, data.data(), 10, 0, 0), size_t(-1));
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(riowrite(p.client, data.data(), 100, off_t(4096 + n - 10), 0), 10u);
  // A second mapping with an offset chosen by riomap (-1: the address), a local one, and no
  // third remote one (RDMA_IOMAPSIZE 2 on the peer).
  std::vector<uint8_t> second(8192), local(4096);
  off_t off2 = riomap(p.server, second.data(), second.size(), PROT_WRITE, 0, -1);
  EXPECT_EQ(off2, off_t(reinterpret_cast<uintptr_t>(second.data())));
  EXPECT_EQ(riomap(p.server, local.data(), local.size(), 0, 0, 0), 0);
  std::vector<uint8_t> third(4096);
  EXPECT_EQ(riomap(p.server, third.data(), third.size(), PROT_WRITE, 0, 1 << 30), -1);
  EXPECT_EQ(errno, ENOMEM);
  ASSERT_EQ(rsend(p.server, "2", 1, 0), 1);
  ASSERT_TRUE(recv_all(p.client, &c, 1));
  EXPECT_EQ(riowrite(p.client, "second", 6, off2 + 100, 0), 6u);
  ASSERT_EQ(rsend(p.client, "e", 1, 0), 1);
  ASSERT_TRUE(recv_all(p.server, &c, 1));
  EXPECT_EQ(memcmp(second.data() + 100, "second", 6), 0);
  // Unmapped: the peer learns it with the stream; unknown buffers are EINVAL.
  EXPECT_EQ(riounmap(p.server, target, n), 0);
  EXPECT_EQ(riounmap(p.server, target, n), -1);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(riounmap(p.server, local.data(), local.size()), 0);
  ASSERT_EQ(rsend(p.server, "u", 1, 0), 1);
  ASSERT_TRUE(recv_all(p.client, &c, 1));
  EXPECT_EQ(riowrite(p.client, data.data(), 10, 4096, 0), size_t(-1));
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(riounmap(p.server, second.data(), second.size()), 0);
  // Without RDMA_IOMAPSIZE on the peer there is nothing to map into.
  Pair q = connect_pair();
  ASSERT_GE(q.server.get(), 0);
  EXPECT_EQ(riomap(q.client, third.data(), third.size(), PROT_WRITE, 0, 0), -1);
  EXPECT_EQ(errno, ENOMEM);
  EXPECT_EQ(riomap(q.client, third.data(), third.size(), PROT_READ, 0, 0), -1);
  EXPECT_EQ(errno, EINVAL);
  munmap(mem, n);
}

}  // namespace
}  // namespace rstest
