#include "daemon/metrics/metrics_server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "common/address.h"
#include "common/log.h"
#include "daemon/metrics/exposition.h"

namespace vrdma::daemon::metrics {

namespace {
constexpr size_t kReadChunk = 2048;
}

MetricsServer::~MetricsServer() {
  while (!conns_.empty()) close(conns_.begin()->first);
  if (listen_ && epoll_ >= 0) ::epoll_ctl(epoll_, EPOLL_CTL_DEL, listen_.get(), nullptr);
}

int MetricsServer::start(int epoll_fd, const std::string& listen, Render render) {
  // IPV4:PORT; port 0 (any free port) is allowed here, for tests.
  size_t colon = listen.rfind(':');
  if (colon == std::string::npos || colon + 1 == listen.size() || listen.size() - colon > 6)
    return EINVAL;
  uint32_t addr;
  if (!parse_ipv4(listen.substr(0, colon), &addr)) return EINVAL;
  unsigned long port = 0;
  for (size_t i = colon + 1; i < listen.size(); ++i) {
    if (listen[i] < '0' || listen[i] > '9') return EINVAL;
    port = port * 10 + static_cast<unsigned long>(listen[i] - '0');
  }
  if (port > 65535) return EINVAL;
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd) return errno;
  int one = 1;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = addr;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) < 0) return errno;
  if (::listen(fd.get(), 16) < 0) return errno;
  socklen_t len = sizeof(sa);
  if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&sa), &len) < 0) return errno;
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kTagBase;
  if (::epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd.get(), &ev) < 0) return errno;
  epoll_ = epoll_fd;
  listen_ = std::move(fd);
  port_ = ntohs(sa.sin_port);
  render_ = std::move(render);
  return 0;
}

void MetricsServer::on_event(uint64_t tag, uint32_t events, int64_t now_ns) {
  uint32_t id = static_cast<uint32_t>(tag);
  if (id == 0) return accept_all(now_ns);
  auto it = conns_.find(id);
  if (it == conns_.end()) return;
  Conn& c = it->second;
  if (events & EPOLLERR) return close(id);
  switch (c.phase) {
    case Conn::Phase::kReading:
      if (events & EPOLLHUP) return close(id);
      return on_readable(id, c, now_ns);
    case Conn::Phase::kWriting:
      if (events & EPOLLHUP) return close(id);
      return write_answer(id, c, now_ns);
    case Conn::Phase::kDraining:
      return drain(id, c);
  }
}

void MetricsServer::accept_all(int64_t now_ns) {
  // A bounded number per event: the loop has other work.
  for (int i = 0; i < 16; ++i) {
    int fd = ::accept4(listen_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED)
        LOG_WARN("metrics: accept: %s", strerror(errno));
      return;
    }
    UniqueFd conn(fd);
    if (conns_.size() >= kMaxConnections) continue;  // closed at once
    uint32_t id = next_id_++;
    if (next_id_ == 0) next_id_ = 1;
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.u64 = kTagBase | id;
    if (::epoll_ctl(epoll_, EPOLL_CTL_ADD, fd, &ev) < 0) continue;
    Conn& c = conns_[id];
    c.fd = std::move(conn);
    c.deadline_ns = now_ns + kDeadlineNs;
  }
}

void MetricsServer::on_readable(uint32_t id, Conn& c, int64_t now_ns) {
  char buf[kReadChunk];
  ssize_t n = ::recv(c.fd.get(), buf, sizeof(buf), 0);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
  if (n <= 0) return close(id);  // gone before the head ended
  HttpRequest::State st = c.req.feed(std::string_view(buf, static_cast<size_t>(n)));
  if (st == HttpRequest::State::kIncomplete) return;
  if (st != HttpRequest::State::kOk) {
    int code = HttpRequest::status_code(st);
    respond(c, code, std::string(HttpRequest::reason(code)) + "\n", false);
  } else if (c.req.path() != kPath) {
    respond(c, 404, "vrdmad serves metrics at /metrics\n", c.req.method() == "HEAD");
  } else {
    ++scrapes_;
    respond(c, 200, render_ ? render_() : std::string(), c.req.method() == "HEAD");
  }
  c.phase = Conn::Phase::kWriting;
  write_answer(id, c, now_ns);
}

bool MetricsServer::watch(uint32_t id, Conn& c, uint32_t events) {
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = kTagBase | id;
  if (::epoll_ctl(epoll_, EPOLL_CTL_MOD, c.fd.get(), &ev) == 0) return true;
  close(id);
  return false;
}

void MetricsServer::write_answer(uint32_t id, Conn& c, int64_t now_ns) {
  while (c.sent < c.out.size()) {
    ssize_t n = ::send(c.fd.get(), c.out.data() + c.sent, c.out.size() - c.sent,
                       MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        watch(id, c, EPOLLOUT);
        return;
      }
      return close(id);
    }
    c.sent += static_cast<size_t>(n);
  }
  ::shutdown(c.fd.get(), SHUT_WR);
  c.out = std::string();
  c.phase = Conn::Phase::kDraining;
  c.deadline_ns = std::min(c.deadline_ns, now_ns + kDrainNs);
  if (watch(id, c, EPOLLIN | EPOLLRDHUP)) drain(id, c);
}

void MetricsServer::drain(uint32_t id, Conn& c) {
  char buf[kReadChunk];
  for (;;) {
    ssize_t n = ::recv(c.fd.get(), buf, sizeof(buf), MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n <= 0) return close(id);  // the client closed (or failed): done
    c.drained += static_cast<size_t>(n);
    if (c.drained > kMaxDrain) return close(id);
  }
}

void MetricsServer::respond(Conn& c, int code, const std::string& body, bool head_only) {
  std::string& o = c.out;
  o = "HTTP/1.1 " + std::to_string(code) + " " + HttpRequest::reason(code) + "\r\n";
  o += "Content-Type: ";
  o += code == 200 ? kContentType : "text/plain; charset=utf-8";
  o += "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  if (code == 405) o += "Allow: GET, HEAD\r\n";
  o += "Connection: close\r\n\r\n";
  if (!head_only) o += body;
  c.sent = 0;
}

void MetricsServer::close(uint32_t id) {
  auto it = conns_.find(id);
  if (it == conns_.end()) return;
  ::epoll_ctl(epoll_, EPOLL_CTL_DEL, it->second.fd.get(), nullptr);
  conns_.erase(it);
}

int64_t MetricsServer::next_deadline() const {
  int64_t d = -1;
  for (const auto& [id, c] : conns_)
    if (d < 0 || c.deadline_ns < d) d = c.deadline_ns;
  return d;
}

void MetricsServer::expire(int64_t now_ns) {
  for (auto it = conns_.begin(); it != conns_.end();) {
    uint32_t id = it->first;
    bool late = now_ns >= it->second.deadline_ns;
    ++it;
    if (late) close(id);
  }
}

}  // namespace vrdma::daemon::metrics
