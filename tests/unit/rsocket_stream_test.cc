// rsockets as a byte stream, both ends in this process against an in-process vrdmad (a peer
// that dies runs in a process of its own): random data checked byte for byte from 1 byte to
// 16 MiB, many small writes, both directions at once, non-blocking sockets driven by rpoll
// with an ordinary descriptor in the set, peek and gather/scatter, shutdown and close (end of
// file, EPIPE), a peer that dies (ECONNRESET), and a connection nobody accepts
// (ECONNREFUSED, at once). Every wait is bounded.
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <future>
#include <random>
#include <thread>

#include "rsocket_fixture.h"

namespace rstest {
namespace {

class RsocketStream : public ::testing::Test {
 protected:
  void SetUp() override { use_daemon(); }
};

class RsocketSizes : public RsocketStream, public ::testing::WithParamInterface<size_t> {};

TEST_P(RsocketSizes, RandomDataArrivesByteForByteBothWays) {
  size_t n = GetParam();
  Pair p = connect_pair();
  ASSERT_GE(p.server.get(), 0);
  std::vector<uint8_t> up = random_bytes(n, 1), down = random_bytes(n, 2);
  std::vector<uint8_t> got_up(n), got_down(n);
  // Both directions at once: each side sends from a thread while its other thread reads.
  auto a = std::async(std::launch::async, [&] { return send_all(p.client, up.data(), n, 60000); });
  auto b =
      std::async(std::launch::async, [&] { return send_all(p.server, down.data(), n, 60000); });
  EXPECT_TRUE(recv_all(p.server, got_up.data(), n, 60000)) << strerror(errno);
  EXPECT_TRUE(recv_all(p.client, got_down.data(), n, 60000)) << strerror(errno);
  EXPECT_TRUE(a.get());
  EXPECT_TRUE(b.get());
  EXPECT_TRUE(got_up == up) << "client to server data differs";
  EXPECT_TRUE(got_down == down) << "server to client data differs";
}

INSTANTIATE_TEST_SUITE_P(Sizes, RsocketSizes,
                         ::testing::Values(1, 63, 64, 65, 4095, 4096, 4097, 65536 + 17, 1 << 20,
                                           (1 << 20) + 3, 16 << 20));

TEST_F(RsocketStream, BlockingCallsMoveEverything) {
  Pair p = connect_pair();
  ASSERT_GE(p.server.get(), 0);
  size_t n = 3 << 20;
  std::vector<uint8_t> data = random_bytes(n, 3), got(n);
  // A blocking rsend returns once everything is sent; a blocking MSG_WAITALL receive once
  // everything arrived.
  auto sender = std::async(std::launch::async, [&] { return rsend(p.client, data.data(), n, 0); });
  ssize_t r = rrecv(p.server, got.data(), n, MSG_WAITALL);
  EXPECT_EQ(r, ssize_t(n)) << strerror(errno);
  ASSERT_EQ(sender.wait_for(std::chrono::seconds(30)), std::future_status::ready);
  EXPECT_EQ(sender.get(), ssize_t(n));
  EXPECT_TRUE(got == data);
}

TEST_F(RsocketStream, ManySmallWritesKeepTheirOrder) {
  Pair p = connect_pair();
  ASSERT_GE(p.server.get(), 0);
  std::vector<uint8_t> data = random_bytes(200000, 4);
  std::vector<size_t> sizes;
  std::mt19937 rng(5);
  for (size_t off = 0; off < data.size();) {
    size_t k = 1 + rng() % 97;
    if (off + k > data.size()) k = data.size() - off;
    sizes.push_back(k);
    off += k;
  }
  auto sender = std::async(std::launch::async, [&] {
    size_t off = 0;
    for (size_t k : sizes) {
      if (!send_all(p.client, data.data() + off, k)) return false;
      off += k;
    }
    return true;
  });
  std::vector<uint8_t> got(data.size());
  EXPECT_TRUE(recv_all(p.server, got.data(), got.size(), 60000)) << strerror(errno);
  EXPECT_TRUE(sender.get());
  EXPECT_GT(sizes.size(), 4000u);
  EXPECT_TRUE(got == data);
}

TEST_F(RsocketStream, NonBlockingSocketsUnderRpollWithAPipe) {
  Pair p = connect_pair([](int fd) { rfcntl(fd, F_SETFL, O_NONBLOCK); });
  ASSERT_GE(p.server.get(), 0);
  EXPECT_FALSE(rfcntl(p.server, F_GETFL) & O_NONBLOCK);  // as accept(): not inherited
  ASSERT_EQ(rfcntl(p.server, F_SETFL, O_NONBLOCK), 0);
  EXPECT_TRUE(rfcntl(p.server, F_GETFL) & O_NONBLOCK);
  char c;
  EXPECT_EQ(rrecv(p.server, &c, 1, 0), -1);
  EXPECT_EQ(errno, EAGAIN);
  int pipefd[2];
  ASSERT_EQ(pipe(pipefd), 0);
  // One thread, one loop: the client sends `up`, the server echoes what it reads, the client
  // reads the echo back; a pipe in the same set carries a byte half way.
  std::vector<uint8_t> up = random_bytes(5 << 20, 6), echo(up.size()), pending;
  size_t sent = 0, echoed = 0, got = 0;
  bool pipe_seen = false, pipe_written = false;
  std::vector<uint8_t> buf(70000);
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (got < up.size() && std::chrono::steady_clock::now() < end) {
    pollfd f[3] = {{p.client, short(POLLIN | (sent < up.size() ? POLLOUT : 0)), 0},
                   {p.server, short(POLLIN | (pending.size() > echoed ? POLLOUT : 0)), 0},
                   {pipefd[0], POLLIN, 0}};
    int n = rpoll(f, 3, 5000);
    ASSERT_GT(n, 0) << "rpoll: " << (n ? strerror(errno) : "timeout");
    if (f[0].revents & POLLOUT) {
      ssize_t r = rsend(p.client, up.data() + sent, std::min<size_t>(up.size() - sent, 100000), 0);
      if (r > 0) {
        sent += size_t(r);
      } else {
        ASSERT_EQ(errno, EAGAIN);
      }
      if (sent > up.size() / 2 && !pipe_written) {
        ASSERT_EQ(write(pipefd[1], "x", 1), 1);
        pipe_written = true;
      }
    }
    if (f[1].revents & POLLIN) {
      ssize_t r = rrecv(p.server, buf.data(), buf.size(), 0);
      if (r > 0) {
        pending.insert(pending.end(), buf.begin(), buf.begin() + r);
      } else {
        ASSERT_EQ(errno, EAGAIN);
      }
    }
    if ((f[1].revents & POLLOUT) && pending.size() > echoed) {
      ssize_t r = rsend(p.server, pending.data() + echoed, pending.size() - echoed, 0);
      if (r > 0) {
        echoed += size_t(r);
      } else {
        ASSERT_EQ(errno, EAGAIN);
      }
    }
    if (f[0].revents & POLLIN) {
      ssize_t r = rrecv(p.client, echo.data() + got, echo.size() - got, 0);
      if (r > 0) {
        got += size_t(r);
      } else {
        ASSERT_EQ(errno, EAGAIN);
      }
    }
    if (f[2].revents & POLLIN) {
      ASSERT_EQ(read(pipefd[0], &c, 1), 1);
      pipe_seen = true;
    }
  }
  EXPECT_EQ(got, up.size());
  EXPECT_TRUE(echo == up);
  EXPECT_TRUE(pipe_seen) << "rpoll never reported the pipe";
  close(pipefd[0]);
  close(pipefd[1]);
}

TEST_F(RsocketStream, RpollTimesOutAndSeesOrdinaryDescriptors) {
  Pair p = connect_pair();
  ASSERT_GE(p.server.get(), 0);
  pollfd f{p.server, POLLIN, 0};
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(rpoll(&f, 1, 200), 0);
  auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0)
          .count();
  EXPECT_GE(ms, 190);
  EXPECT_LT(ms, 5000);
  // Writable right away; readable once data came.
  f.events = POLLOUT;
  EXPECT_EQ(rpoll(&f, 1, 0), 1);
  EXPECT_TRUE(f.revents & POLLOUT);
  ASSERT_EQ(rsend(p.client, "abc", 3, 0), 3);
  f.events = POLLIN;
  EXPECT_EQ(rpoll(&f, 1, 5000), 1);
  EXPECT_TRUE(f.revents & POLLIN);
  // Only ordinary descriptors: rpoll is poll.
  int pipefd[2];
  ASSERT_EQ(pipe(pipefd), 0);
  ASSERT_EQ(write(pipefd[1], "y", 1), 1);
  pollfd q{pipefd[0], POLLIN, 0};
  EXPECT_EQ(rpoll(&q, 1, 1000), 1);
  close(pipefd[0]);
  close(pipefd[1]);
}

TEST_F(RsocketStream, SleepingReaderWakesForDataFromAnotherThread) {
  Pair p = connect_pair();
  ASSERT_GE(p.server.get(), 0);
  // The reader blocks (no data yet) and sleeps; the data arrives 300 ms later.
  auto reader = std::async(std::launch::async, [&] {
    char b[16] = {};
    ssize_t r = rrecv(p.server, b, sizeof(b), 0);
    return r == 5 && memcmp(b, "hello", 5) == 0;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ASSERT_EQ(rsend(p.client, "hello", 5, 0), 5);
  ASSERT_EQ(reader.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_TRUE(reader.get());
  // A reader and a writer asleep on one socket at once: the writer's data gets the other
  // side's reply to the reader.
  auto r2 = std::async(std::launch::async, [&] {
    char b[4] = {};
    return rrecv(p.client, b, 4, MSG_WAITALL) == 4 && memcmp(b, "pong", 4) == 0;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_EQ(rsend(p.client, "ping", 4, 0), 4);
  char b[4];
  ASSERT_TRUE(recv_all(p.server, b, 4));
  ASSERT_EQ(rsend(p.server, "pong", 4, 0), 4);
  ASSERT_EQ(r2.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_TRUE(r2.get());
}

void on_signal(int) {}

TEST_F(RsocketStream, SignalInterruptsABlockingReceive) {
  Pair p = connect_pair();
  ASSERT_GE(p.server.get(), 0);
  struct sigaction sa {
  }, old{};
  sa.sa_handler = on_signal;  // no SA_RESTART
  ASSERT_EQ(sigaction(SIGUSR1, &sa, &old), 0);
  std::promise<pthread_t> id;
  auto reader = std::async(std::launch::async, [&] {
    id.set_value(pthread_self());
    char c;
    ssize_t r = rrecv(p.server, &c, 1, 0);
    return r == -1 ? errno : 0;
  });
  pthread_t t = id.get_future().get();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  ASSERT_EQ(pthread_kill(t, SIGUSR1), 0);
  ASSERT_EQ(reader.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_EQ(reader.get(), EINTR);
  sigaction(SIGUSR1, &old, nullptr);
  // The connection is fine afterwards.
  ASSERT_EQ(rsend(p.client, "k", 1, 0), 1);
  char c;
  ASSERT_TRUE(recv_all(p.server, &c, 1));
  EXPECT_EQ(c, 'k');
}

TEST_F(RsocketStream, PeekWaitallAndScatterGather) {
  Pair p = connect_pair();
  ASSERT_GE(p.server.get(), 0);
  std::vector<uint8_t> data = random_bytes(1000, 7);
  iovec out[3] = {{data.data(), 10}, {data.data() + 10, 0}, {data.data() + 10, 990}};
  ASSERT_EQ(rwritev(p.client, out, 3), 1000);
  ASSERT_TRUE(wait_for(p.server, POLLIN) & POLLIN);
  uint8_t peek[100];
  EXPECT_EQ(rrecv(p.server, peek, sizeof(peek), MSG_PEEK), 100);
  EXPECT_EQ(memcmp(peek, data.data(), 100), 0);
  uint8_t a[7], b[500];
  iovec in[2] = {{a, sizeof(a)}, {b, sizeof(b)}};
  ASSERT_EQ(rreadv(p.server, in, 2), 507);
  EXPECT_EQ(memcmp(a, data.data(), 7), 0);
  EXPECT_EQ(memcmp(b, data.data() + 7, 500), 0);
  uint8_t rest[493];
  msghdr m{};
  iovec v{rest, sizeof(rest)};
  m.msg_iov = &v;
  m.msg_iovlen = 1;
  ASSERT_EQ(rrecvmsg(p.server, &m, MSG_WAITALL), 493);
  EXPECT_EQ(memcmp(rest, data.data() + 507, 493), 0);
  // sendmsg with a gather list, read/write names.
  msghdr sm{};
  iovec sv[2] = {{const_cast<char*>("ab"), 2}, {const_cast<char*>("cd"), 2}};
  sm.msg_iov = sv;
  sm.msg_iovlen = 2;
  ASSERT_EQ(rsendmsg(p.client, &sm, 0), 4);
  char four[4];
  ASSERT_TRUE(recv_all(p.server, four, 4));
  EXPECT_EQ(memcmp(four, "abcd", 4), 0);
  ASSERT_EQ(rwrite(p.server, "xyz", 3), 3);
  char three[3];
  ASSERT_EQ(rread(p.client, three, 3), 3);
  EXPECT_EQ(memcmp(three, "xyz", 3), 0);
}

TEST_F(RsocketStream, ShutdownWriteGivesEndOfFileAfterTheData) {
  Pair p = connect_pair();
  ASSERT_GE(p.server.get(), 0);
  std::vector<uint8_t> data = random_bytes(3 << 20, 8);
  auto sender = std::async(std::launch::async, [&] {
    if (!send_all(p.client, data.data(), data.size())) return -1;
    return rshutdown(p.client, SHUT_WR);
  });
  std::vector<uint8_t> got(data.size());
  ASSERT_TRUE(recv_all(p.server, got.data(), got.size()));
  EXPECT_EQ(sender.get(), 0);
  EXPECT_TRUE(got == data);
  EXPECT_EQ(rsend(p.client, "x", 1, 0), -1);
  EXPECT_EQ(errno, EPIPE);
  char c;
  ASSERT_TRUE(wait_for(p.server, POLLIN) & POLLIN);
  EXPECT_EQ(rrecv(p.server, &c, 1, 0), 0);  // end of file
  EXPECT_EQ(rrecv(p.server, &c, 1, 0), 0);
  // The other direction still works.
  ASSERT_EQ(rsend(p.server, "back", 4, 0), 4);
  char b[4];
  ASSERT_TRUE(recv_all(p.client, b, 4));
  EXPECT_EQ(memcmp(b, "back", 4), 0);
}

TEST_F(RsocketStream, CloseGivesEndOfFileThenEpipe) {
  Pair p = connect_pair();
  ASSERT_GE(p.server.get(), 0);
  std::vector<uint8_t> data = random_bytes(100000, 9);
  ASSERT_TRUE(send_all(p.server, data.data(), data.size()));
  auto t0 = std::chrono::steady_clock::now();
  p.server.reset();  // rclose: what was sent still arrives
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(3));
  std::vector<uint8_t> got(data.size());
  ASSERT_TRUE(recv_all(p.client, got.data(), got.size()));
  EXPECT_TRUE(got == data);
  char c;
  EXPECT_TRUE(wait_for(p.client, POLLIN) & (POLLIN | POLLHUP));
  EXPECT_EQ(rrecv(p.client, &c, 1, 0), 0);
  EXPECT_EQ(rsend(p.client, "x", 1, 0), -1);
  EXPECT_EQ(errno, EPIPE);
  // As for TCP: end of file is POLLIN and POLLRDHUP; hang-up once this side stopped
  // writing too.
  pollfd f{p.client, POLLIN | POLLOUT | POLLRDHUP, 0};
  EXPECT_EQ(rpoll(&f, 1, 0), 1);
  EXPECT_EQ(f.revents & (POLLIN | POLLRDHUP | POLLHUP), POLLIN | POLLRDHUP);
  ASSERT_EQ(rshutdown(p.client, SHUT_WR), 0);
  EXPECT_EQ(rpoll(&f, 1, 0), 1);
  EXPECT_TRUE(f.revents & POLLHUP);
}

TEST_F(RsocketStream, ShutdownReadAndBothDirections) {
  Pair p = connect_pair();
  ASSERT_GE(p.server.get(), 0);
  ASSERT_EQ(rshutdown(p.server, SHUT_RD), 0);
  char c;
  EXPECT_EQ(rrecv(p.server, &c, 1, 0), 0);
  ASSERT_EQ(rsend(p.server, "z", 1, 0), 1);  // writing still works
  ASSERT_TRUE(recv_all(p.client, &c, 1));
  ASSERT_EQ(rshutdown(p.client, SHUT_RDWR), 0);
  EXPECT_EQ(rsend(p.client, "x", 1, 0), -1);
  EXPECT_EQ(errno, EPIPE);
  ASSERT_TRUE(wait_for(p.server, POLLRDHUP) & POLLRDHUP);
  EXPECT_EQ(rsend(p.server, "x", 1, 0), -1);  // the peer reads no more
  EXPECT_EQ(errno, EPIPE);
}

TEST_F(RsocketStream, PeerThatDiesGivesItsDataThenEconnreset) {
  uint16_t port = next_port();
  Fd l = listener(port);
  size_t n = 200000;
  pid_t pid = spawn_dying_peer(port, n, 10);
  ASSERT_GT(pid, 0);
  ASSERT_TRUE(wait_for(l, POLLIN, 20000) & POLLIN);
  Fd s(raccept(l, nullptr, nullptr));
  ASSERT_GE(s.get(), 0) << strerror(errno);
  std::vector<uint8_t> got(n);
  EXPECT_TRUE(recv_all(s, got.data(), n, 20000)) << strerror(errno);
  EXPECT_TRUE(got == random_bytes(n, 10));
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "peer status " << status;
  // The peer never closed: its death resets the connection, within a bounded time.
  short ev = wait_for(s, POLLIN, 10000);
  EXPECT_TRUE(ev & POLLERR) << ev;
  char c;
  EXPECT_EQ(rrecv(s, &c, 1, 0), -1);
  EXPECT_EQ(errno, ECONNRESET);
  EXPECT_EQ(rsend(s, "x", 1, 0), -1);
  EXPECT_EQ(errno, ECONNRESET);
  int err = 0;
  socklen_t len = sizeof(err);
  EXPECT_EQ(rgetsockopt(s, SOL_SOCKET, SO_ERROR, &err, &len), 0);
  EXPECT_EQ(err, ECONNRESET);
}

TEST_F(RsocketStream, ConnectToNobodyIsRefusedAtOnce) {
  Fd c(rsocket(AF_INET, SOCK_STREAM, 0));
  ASSERT_GE(c.get(), 0);
  sockaddr_in a = addr(own_ip(), next_port());
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(rconnect(c, reinterpret_cast<sockaddr*>(&a), sizeof(a)), -1);
  EXPECT_EQ(errno, ECONNREFUSED);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  // Non-blocking: the refusal comes at once, or as EINPROGRESS and then rpoll reports the
  // failure and SO_ERROR says why (as for TCP, both are allowed).
  Fd d(rsocket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0));
  ASSERT_GE(d.get(), 0);
  EXPECT_EQ(rconnect(d, reinterpret_cast<sockaddr*>(&a), sizeof(a)), -1);
  if (errno == EINPROGRESS) {
    short ev = wait_for(d, POLLOUT, 5000);
    EXPECT_TRUE(ev & POLLERR) << ev;
    int err = 0;
    socklen_t len = sizeof(err);
    EXPECT_EQ(rgetsockopt(d, SOL_SOCKET, SO_ERROR, &err, &len), 0);
    EXPECT_EQ(err, ECONNREFUSED);
  } else {
    EXPECT_EQ(errno, ECONNREFUSED);
  }
  EXPECT_EQ(rsend(d, "x", 1, 0), -1);
  EXPECT_EQ(errno, ENOTCONN);
  // An address no container has.
  Fd e(rsocket(AF_INET, SOCK_STREAM, 0));
  sockaddr_in nowhere = addr(inet_addr("10.254.254.254"), 7471);
  EXPECT_EQ(rconnect(e, reinterpret_cast<sockaddr*>(&nowhere), sizeof(nowhere)), -1);
  EXPECT_TRUE(errno == EHOSTUNREACH || errno == ENETUNREACH) << strerror(errno);
}

TEST_F(RsocketStream, NonBlockingConnectCompletesUnderRpoll) {
  uint16_t port = next_port();
  Fd l = listener(port);
  Fd c(rsocket(AF_INET, SOCK_STREAM, 0));
  ASSERT_EQ(rfcntl(c, F_SETFL, O_NONBLOCK), 0);
  sockaddr_in a = addr(own_ip(), port);
  int r = rconnect(c, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  ASSERT_TRUE(r == 0 || errno == EINPROGRESS) << strerror(errno);
  if (r) {
    EXPECT_EQ(rsend(c, "x", 1, 0), -1);  // not yet
    EXPECT_EQ(errno, EAGAIN);
  }
  short ev = wait_for(c, POLLOUT);
  EXPECT_EQ(ev & (POLLERR | POLLHUP), 0) << ev;
  EXPECT_TRUE(ev & POLLOUT);
  int err = -1;
  socklen_t len = sizeof(err);
  EXPECT_EQ(rgetsockopt(c, SOL_SOCKET, SO_ERROR, &err, &len), 0);
  EXPECT_EQ(err, 0);
  EXPECT_EQ(rconnect(c, reinterpret_cast<sockaddr*>(&a), sizeof(a)), -1);
  EXPECT_EQ(errno, EISCONN);
  Fd s(raccept(l, nullptr, nullptr));
  ASSERT_GE(s.get(), 0);
  ASSERT_EQ(rsend(c, "hi", 2, 0), 2);
  char b[2];
  ASSERT_TRUE(recv_all(s, b, 2));
  EXPECT_EQ(memcmp(b, "hi", 2), 0);
}

TEST_F(RsocketStream, ListenerQueuesConnectionsBeforeAccept) {
  uint16_t port = next_port();
  Fd l = listener(port, [](int fd) { rfcntl(fd, F_SETFL, O_NONBLOCK); });
  EXPECT_EQ(raccept(l, nullptr, nullptr), -1);
  EXPECT_EQ(errno, EAGAIN);
  std::vector<Fd> clients;
  for (int i = 0; i < 5; ++i) {
    clients.emplace_back(rsocket(AF_INET, SOCK_STREAM, 0));
    sockaddr_in a = addr(own_ip(), port);
    ASSERT_EQ(rconnect(clients.back(), reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0)
        << strerror(errno);
    uint8_t id = static_cast<uint8_t>(i);
    ASSERT_EQ(rsend(clients.back(), &id, 1, 0), 1);
  }
  std::vector<bool> seen(5);
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(wait_for(l, POLLIN) & POLLIN);
    sockaddr_in peer{};
    socklen_t len = sizeof(peer);
    // librspreload takes a descriptor for the new socket before raccept, and its select()
    // needs the rsocket's number above it: raccept makes the number.
    int placeholder = open("/dev/null", O_RDONLY);
    ASSERT_GE(placeholder, 0);
    Fd s(raccept(l, reinterpret_cast<sockaddr*>(&peer), &len));
    ASSERT_GE(s.get(), 0) << strerror(errno);
    EXPECT_GT(s.get(), placeholder);
    close(placeholder);
    EXPECT_EQ(len, sizeof(peer));
    EXPECT_EQ(peer.sin_addr.s_addr, own_ip());
    uint8_t id = 0xff;
    ASSERT_TRUE(recv_all(s, &id, 1));
    ASSERT_LT(id, 5);
    EXPECT_FALSE(seen[id]);
    seen[id] = true;
  }
}

TEST_F(RsocketStream, ManyConnectionsAtOnce) {
  constexpr int kPairs = 32;
  std::vector<Pair> pairs;
  for (int i = 0; i < kPairs; ++i) {
    pairs.push_back(connect_pair());
    ASSERT_GE(pairs.back().server.get(), 0) << "pair " << i;
  }
  // Every connection carries its own data both ways at once.
  std::vector<std::future<bool>> senders;
  for (int i = 0; i < kPairs; ++i) {
    senders.push_back(std::async(std::launch::async, [&, i] {
      std::vector<uint8_t> up = random_bytes(100000, 100 + i), down = random_bytes(70000, 200 + i);
      return send_all(pairs[i].client, up.data(), up.size(), 30000) &&
             send_all(pairs[i].server, down.data(), down.size(), 30000);
    }));
  }
  for (int i = 0; i < kPairs; ++i) {
    std::vector<uint8_t> up(100000), down(70000);
    EXPECT_TRUE(recv_all(pairs[i].server, up.data(), up.size(), 30000)) << i;
    EXPECT_TRUE(recv_all(pairs[i].client, down.data(), down.size(), 30000)) << i;
    EXPECT_TRUE(up == random_bytes(100000, 100 + i)) << i;
    EXPECT_TRUE(down == random_bytes(70000, 200 + i)) << i;
  }
  for (auto& f : senders) EXPECT_TRUE(f.get());
}

int open_fds() {
  int n = 0;
  if (DIR* d = opendir("/proc/self/fd")) {
    while (readdir(d)) ++n;
    closedir(d);
  }
  return n;
}

TEST_F(RsocketStream, ClosedConnectionsGiveBackTheirDescriptors) {
  auto one = [] {
    Pair p = connect_pair();
    ASSERT_GE(p.server.get(), 0);
    pollfd f{p.server, POLLIN, 0};
    ASSERT_EQ(rpoll(&f, 1, 20), 0);  // sleeps: this thread's wake-up eventfd exists from now
    ASSERT_EQ(rsend(p.client, "x", 1, 0), 1);
    char c;
    ASSERT_TRUE(recv_all(p.server, &c, 1));
  };
  // The first connections open what lasts: the device, the accept service, eventfds.
  for (int i = 0; i < 3; ++i) one();
  int before = open_fds();
  for (int i = 0; i < 40; ++i) one();
  EXPECT_EQ(open_fds(), before);
}

TEST_F(RsocketStream, ClosingAListenerResetsWhatItHadNotHandedOut) {
  uint16_t port = next_port();
  Fd l = listener(port);
  Fd c(rsocket(AF_INET, SOCK_STREAM, 0));
  sockaddr_in a = addr(own_ip(), port);
  ASSERT_EQ(rconnect(c, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0) << strerror(errno);
  ASSERT_TRUE(wait_for(l, POLLIN) & POLLIN);  // established, never accepted
  l.reset();
  char b;
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(rrecv(c, &b, 1, 0), -1);  // blocking: the reset wakes it
  EXPECT_EQ(errno, ECONNRESET);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
}

}  // namespace
}  // namespace rstest
