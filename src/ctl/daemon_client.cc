#include "ctl/daemon_client.h"

#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>

#include "common/control_ops.h"
#include "common/unix_socket.h"
#include "ctl/error.h"

namespace vrdma::ctl {

namespace {

// unix_connect blocks while the daemon's backlog is full; an interval timer
// (SIGALRM without SA_RESTART) bounds it.
int connect_with_timeout(const std::string& path, int timeout_ms) {
  struct sigaction sa {
  }, old{};
  sa.sa_handler = [](int) {};
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGALRM, &sa, &old);
  itimerval timer{{0, 0}, {timeout_ms / 1000, (timeout_ms % 1000) * 1000}};
  ::setitimer(ITIMER_REAL, &timer, nullptr);
  int fd = unix_connect(path);
  itimerval off{};
  ::setitimer(ITIMER_REAL, &off, nullptr);
  ::sigaction(SIGALRM, &old, nullptr);
  return fd;
}

}  // namespace

DaemonClient::DaemonClient(std::string socket, int timeout_ms)
    : socket_(std::move(socket)), timeout_ms_(timeout_ms) {
  fd_ = connect_with_timeout(socket_, timeout_ms_);
  if (fd_ < 0) {
    int err = -fd_;
    switch (err) {
      case ENOENT:
        throw Error("vrdmad is not running (no socket " + socket_ + ")");
      case ECONNREFUSED:
        throw Error("vrdmad is not running (" + socket_ + " refuses connections)");
      case EINTR:
        throw Error("timed out connecting to vrdmad at " + socket_);
      default:
        throw Error(errno_text("cannot connect to vrdmad at " + socket_, err));
    }
  }
  proto::HelloReq req{proto::kVersion, static_cast<uint32_t>(proto::ClientKind::kCli)};
  std::string reply = call(proto::Op::kHello, &req, sizeof(req));
  if (reply.size() != sizeof(hello_))
    throw Error("malformed Hello reply from vrdmad at " + socket_ + " (" +
                std::to_string(reply.size()) + " bytes)");
  std::memcpy(&hello_, reply.data(), sizeof(hello_));
  if (hello_.version != proto::kVersion)
    throw Error("vrdmad at " + socket_ + " speaks protocol version " +
                std::to_string(hello_.version) + ", this vrdma speaks " +
                std::to_string(proto::kVersion));
}

DaemonClient::~DaemonClient() {
  if (fd_ >= 0) ::close(fd_);
}

std::string DaemonClient::status() {
  return call(proto::Op::kStatus, nullptr, 0);
}

std::string DaemonClient::reload() {
  return call(proto::Op::kReload, nullptr, 0);
}

std::string DaemonClient::qos(const std::string& rule) {
  proto::QosReq req{};
  if (rule.size() >= sizeof(req.rule)) throw Error("QoS rule too long: " + rule);
  std::memcpy(req.rule, rule.data(), rule.size());
  return call(proto::Op::kQos, &req, sizeof(req));
}

std::string DaemonClient::call(proto::Op op, const void* payload, size_t len) {
  const uint32_t seq = ++seq_;
  const std::string what = std::string(proto::op_name(op)) + " to vrdmad at " + socket_;
  if (int err = send_packet(fd_, op, seq, 0, payload, len))
    throw Error(errno_text("cannot send " + what, err));

  using Clock = std::chrono::steady_clock;
  auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms_);
  auto packet = std::make_unique<Packet>();
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    pollfd p{fd_, POLLIN, 0};
    int n = ::poll(&p, 1, static_cast<int>(std::max<int64_t>(0, left.count())));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Error(errno_text("poll", errno));
    if (n == 0)
      throw Error("no reply to " + what + " within " + std::to_string(timeout_ms_) + " ms");
    int rc = recv_packet(fd_, *packet, MSG_DONTWAIT);
    if (rc == -EAGAIN) continue;
    if (rc == -ECONNRESET) throw Error("vrdmad at " + socket_ + " closed the connection");
    if (rc < 0) throw Error(errno_text("cannot receive from vrdmad at " + socket_, -rc));
    packet->close_fds();
    if (packet->truncated) throw Error("malformed reply to " + what);
    if (packet->header.seq == 0) continue;  // an asynchronous notification
    if (packet->header.seq != seq || packet->header.op != static_cast<uint16_t>(op))
      throw Error("unexpected reply to " + what + " (op " + std::to_string(packet->header.op) +
                  ", seq " + std::to_string(packet->header.seq) + ")");
    if (packet->header.status != 0) {
      // Some refusals say why (a Reload's refused configuration).
      std::string why(reinterpret_cast<const char*>(packet->payload), packet->header.len);
      while (!why.empty() && why.back() == '\n') why.pop_back();
      throw Error("vrdmad refused " + std::string(proto::op_name(op)) + ": " +
                  (why.empty() ? std::strerror(packet->header.status) : why));
    }
    return std::string(reinterpret_cast<const char*>(packet->payload), packet->header.len);
  }
}

}  // namespace vrdma::ctl
