// tcp_echo: an ordinary TCP program (plain sockets, nothing RDMA) that checks every byte it
// moves, for running under LD_PRELOAD=librspreload.so.
//
//   tcp_echo server PORT                  accept one connection, echo it until end of file
//   tcp_echo client HOST PORT BYTES SEED  send BYTES pseudo-random bytes (from SEED), read the
//                                         echo back and compare it byte for byte
//
// The server waits with select(), the client with poll() over the socket and a pipe (an
// ordinary descriptor that must be reported too), both on non-blocking sockets. Each prints
// one line ("tcp_echo: served N bytes" / "tcp_echo: verified N bytes") and exits 0 only when
// everything matched; every wait is bounded (60 s without progress ends the run with exit 1).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr int kIdleMs = 60000;
constexpr size_t kChunk = 64 << 10;

[[noreturn]] void die(const char* what) {
  fprintf(stderr, "tcp_echo: %s: %s\n", what, strerror(errno));
  exit(1);
}

void usage(FILE* f) {
  fprintf(f,
          "usage: tcp_echo server PORT\n"
          "       tcp_echo client HOST PORT BYTES SEED\n"
          "An echo over TCP that checks every byte (see the comment at the top of the source).\n");
}

void set_nonblock(int fd) {
  int fl = fcntl(fd, F_GETFL);
  if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) die("fcntl");
}

uint8_t pattern(uint64_t seed, size_t i) {
  uint64_t x = (seed + 1) * 0x9e3779b97f4a7c15ull ^ (i / 8 + 1) * 0xbf58476d1ce4e5b9ull;
  x ^= x >> 31;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 29;
  return static_cast<uint8_t>(x >> (8 * (i % 8)));
}

int server(int port) {
  int l = socket(AF_INET, SOCK_STREAM, 0);
  if (l < 0) die("socket");
  int one = 1;
  if (setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one))) die("setsockopt");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  if (bind(l, reinterpret_cast<sockaddr*>(&a), sizeof(a))) die("bind");
  if (listen(l, 4)) die("listen");
  printf("tcp_echo: listening on port %d\n", port);
  fflush(stdout);
  sockaddr_in peer{};
  socklen_t plen = sizeof(peer);
  int c = accept(l, reinterpret_cast<sockaddr*>(&peer), &plen);
  if (c < 0) die("accept");
  set_nonblock(c);
  std::vector<uint8_t> buf;
  size_t head = 0, served = 0;
  bool eof = false;
  std::vector<uint8_t> in(kChunk);
  while (!eof || head < buf.size()) {
    fd_set r, w;
    FD_ZERO(&r);
    FD_ZERO(&w);
    if (!eof) FD_SET(c, &r);
    if (head < buf.size()) FD_SET(c, &w);
    timeval tv{kIdleMs / 1000, 0};
    int n = select(c + 1, &r, &w, nullptr, &tv);
    if (n < 0) die("select");
    if (n == 0) {
      errno = ETIMEDOUT;
      die("select");
    }
    if (FD_ISSET(c, &r)) {
      ssize_t k = read(c, in.data(), in.size());
      if (k > 0) {
        buf.insert(buf.end(), in.begin(), in.begin() + k);
      } else if (k == 0) {
        eof = true;
      } else if (errno != EAGAIN) {
        die("read");
      }
    }
    if (FD_ISSET(c, &w)) {
      ssize_t k = write(c, buf.data() + head, buf.size() - head);
      if (k > 0) {
        head += size_t(k);
        served += size_t(k);
      } else if (k < 0 && errno != EAGAIN) {
        die("write");
      }
      if (head == buf.size()) {
        buf.clear();
        head = 0;
      }
    }
  }
  shutdown(c, SHUT_WR);
  close(c);
  close(l);
  printf("tcp_echo: served %zu bytes to %s\n", served, inet_ntoa(peer.sin_addr));
  return 0;
}

int connect_to(const char* host, const char* port) {
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  if (int e = getaddrinfo(host, port, &hints, &res)) {
    fprintf(stderr, "tcp_echo: %s: %s\n", host, gai_strerror(e));
    exit(1);
  }
  // The server may not listen yet: try again for a while.
  auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(kIdleMs);
  for (;;) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    if (s < 0) die("socket");
    if (connect(s, res->ai_addr, res->ai_addrlen) == 0) {
      freeaddrinfo(res);
      return s;
    }
    if (errno != ECONNREFUSED || std::chrono::steady_clock::now() > end) die("connect");
    close(s);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

int client(const char* host, const char* port, size_t bytes, uint64_t seed) {
  int s = connect_to(host, port);
  int one = 1;
  if (setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one))) die("setsockopt");
  set_nonblock(s);
  int p[2];
  if (pipe(p)) die("pipe");
  std::vector<uint8_t> out(kChunk), in(kChunk);
  size_t sent = 0, got = 0;
  bool shut = false, pipe_written = false, pipe_seen = false;
  for (;;) {
    pollfd f[2] = {{s, short(POLLIN | (sent < bytes ? POLLOUT : 0)), 0}, {p[0], POLLIN, 0}};
    int n = poll(f, 2, kIdleMs);
    if (n < 0) die("poll");
    if (n == 0) {
      errno = ETIMEDOUT;
      die("poll");
    }
    if (f[1].revents & POLLIN) {
      char c;
      if (read(p[0], &c, 1) != 1) die("read pipe");
      pipe_seen = true;
    }
    if (f[0].revents & POLLOUT) {
      size_t k = bytes - sent < kChunk ? bytes - sent : kChunk;
      for (size_t i = 0; i < k; ++i) out[i] = pattern(seed, sent + i);
      ssize_t w = write(s, out.data(), k);
      if (w > 0)
        sent += size_t(w);
      else if (w < 0 && errno != EAGAIN)
        die("write");
      if (sent >= bytes / 2 && !pipe_written) {
        if (write(p[1], "x", 1) != 1) die("write pipe");
        pipe_written = true;
      }
    }
    if (sent == bytes && !shut) {
      if (shutdown(s, SHUT_WR)) die("shutdown");
      shut = true;
    }
    if (f[0].revents & (POLLIN | POLLHUP | POLLERR)) {
      ssize_t r = read(s, in.data(), in.size());
      if (r == 0) break;
      if (r < 0) {
        if (errno == EAGAIN) continue;
        die("read");
      }
      for (ssize_t i = 0; i < r; ++i) {
        if (in[size_t(i)] != pattern(seed, got + size_t(i))) {
          fprintf(stderr, "tcp_echo: byte %zu differs\n", got + size_t(i));
          return 1;
        }
      }
      got += size_t(r);
    }
  }
  close(s);
  if (got != bytes) {
    fprintf(stderr, "tcp_echo: end of file after %zu of %zu bytes\n", got, bytes);
    return 1;
  }
  if (!pipe_seen) {
    fprintf(stderr, "tcp_echo: poll never reported the pipe\n");
    return 1;
  }
  printf("tcp_echo: verified %zu bytes\n", got);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
    usage(stdout);
    return 0;
  }
  if (argc == 3 && !strcmp(argv[1], "server")) return server(atoi(argv[2]));
  if (argc == 6 && !strcmp(argv[1], "client"))
    return client(argv[2], argv[3], strtoull(argv[4], nullptr, 10), strtoull(argv[5], nullptr, 10));
  usage(stderr);
  return 2;
}
