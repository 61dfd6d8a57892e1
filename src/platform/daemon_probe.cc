#include "platform/daemon_probe.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>

#include "common/unix_socket.h"

namespace vrdma::platform {

namespace {

std::string err_text(const std::string& what, int err) {
  return what + ": " + std::strerror(err);
}

}  // namespace

ProbeResult probe_daemon(const std::string& socket, int timeout_ms) {
  ProbeResult r;
  sockaddr_un addr{};
  if (socket.empty() || socket.size() >= sizeof(addr.sun_path)) {
    r.error = "socket path '" + socket + "' is empty or too long";
    return r;
  }
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, socket.c_str(), socket.size() + 1);
  // Non-blocking: a full backlog is "not answering" (EAGAIN), never a wait.
  int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    r.error = err_text("socket", errno);
    return r;
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) < 0) {
    r.error = err_text("cannot connect to " + socket, errno);
    return r;
  }
  proto::HelloReq req{proto::kVersion, static_cast<uint32_t>(proto::ClientKind::kCli)};
  if (int rc = send_packet(fd, proto::Op::kHello, 1, 0, &req, sizeof(req)); rc < 0) {
    r.error = err_text("cannot send Hello to " + socket, -rc);
    return r;
  }
  auto packet = std::make_unique<Packet>();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                    deadline - std::chrono::steady_clock::now())
                    .count();
    if (left <= 0) {
      r.error = "no Hello reply from " + socket + " within " + std::to_string(timeout_ms) + " ms";
      return r;
    }
    pollfd p{fd, POLLIN, 0};
    int n = ::poll(&p, 1, static_cast<int>(left));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      r.error = err_text("poll", errno);
      return r;
    }
    if (n == 0) continue;
    int rc = recv_packet(fd, *packet, MSG_DONTWAIT);
    if (rc == -EAGAIN) continue;
    if (rc < 0) {
      r.error = err_text("no Hello reply from " + socket, -rc);
      return r;
    }
    packet->close_fds();
    if (packet->header.seq == 0) continue;  // a notification
    if (packet->header.op != static_cast<uint16_t>(proto::Op::kHello) ||
        packet->header.status != 0 || !packet->as<proto::HelloRep>()) {
      r.error =
          "vrdmad at " + socket + " refused the Hello" +
          (packet->header.status > 0 ? ": " + std::string(std::strerror(packet->header.status))
                                     : std::string());
      return r;
    }
    r.hello = *packet->as<proto::HelloRep>();
    if (r.hello->version != proto::kVersion) {
      r.error =
          "vrdmad at " + socket + " speaks protocol version " + std::to_string(r.hello->version);
      r.hello.reset();
    }
    return r;
  }
}

}  // namespace vrdma::platform
