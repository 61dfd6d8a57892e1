#include "common/unix_socket.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>

namespace vrdma {

void Packet::close_fds() {
  for (int i = 0; i < nfds; ++i) ::close(fds[i]);
  nfds = 0;
}

static int make_addr(const std::string& path, sockaddr_un& addr) {
  if (path.empty() || path.size() >= sizeof(addr.sun_path)) return -ENAMETOOLONG;
  memset(&addr, 0, sizeof(addr));
  addr.sun_family = AF_UNIX;
  memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  return 0;
}

int unix_connect(const std::string& path) {
  sockaddr_un addr;
  if (int rc = make_addr(path, addr); rc < 0) return rc;
  int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) return -errno;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) < 0) {
    int err = errno;
    ::close(fd);
    return -err;
  }
  return fd;
}

int unix_listen(const std::string& path, int backlog) {
  sockaddr_un addr;
  if (int rc = make_addr(path, addr); rc < 0) return rc;
  int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return -errno;
  ::unlink(path.c_str());
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) < 0 ||
      ::listen(fd, backlog) < 0) {
    int err = errno;
    ::close(fd);
    return -err;
  }
  return fd;
}

int send_packet(int fd, proto::Op op, uint32_t seq, int32_t status, const void* payload, size_t len,
                std::span<const int> fds) {
  if (len > proto::kMaxMessage - sizeof(proto::Header) ||
      fds.size() > static_cast<size_t>(proto::kMaxFdsPerMessage))
    return EMSGSIZE;
  proto::Header h{proto::kMagic, static_cast<uint16_t>(op), 0, seq,
                  status,        static_cast<uint32_t>(len)};
  iovec iov[2] = {{&h, sizeof(h)}, {const_cast<void*>(payload), len}};
  msghdr msg{};
  msg.msg_iov = iov;
  msg.msg_iovlen = len ? 2 : 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * proto::kMaxFdsPerMessage)];
  if (!fds.empty()) {
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  }
  for (;;) {
    ssize_t n = ::sendmsg(fd, &msg, MSG_NOSIGNAL);
    if (n >= 0) return 0;
    if (errno != EINTR) return errno;
  }
}

int recv_packet(int fd, Packet& out, int flags) {
  out.nfds = 0;
  out.truncated = false;
  out.header = {};
  iovec iov[2] = {{&out.header, sizeof(out.header)}, {out.payload, sizeof(out.payload)}};
  msghdr msg{};
  msg.msg_iov = iov;
  msg.msg_iovlen = 2;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * proto::kMaxFdsPerMessage)];
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t n;
  do {
    n = ::recvmsg(fd, &msg, flags | MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return -errno;
  if (n == 0) return -ECONNRESET;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    int count = static_cast<int>((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
    for (int i = 0; i < count; ++i) {
      int received;
      memcpy(&received, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      if (out.nfds < proto::kMaxFdsPerMessage)
        out.fds[out.nfds++] = received;
      else
        ::close(received);
    }
  }
  if (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) out.truncated = true;
  if (static_cast<size_t>(n) < sizeof(proto::Header) || out.header.magic != proto::kMagic ||
      out.header.len != static_cast<size_t>(n) - sizeof(proto::Header))
    out.truncated = true;
  return static_cast<int>(n - std::min<ssize_t>(n, sizeof(proto::Header)));
}

std::string socket_path_from_env() {
  const char* env = ::getenv(proto::kSocketEnv);
  return env && *env ? std::string(env) : std::string(proto::kDefaultSocket);
}

}  // namespace vrdma
