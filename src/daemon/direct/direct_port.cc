#include "daemon/direct/direct_port.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "transport/frame_check.h"

namespace vrdma::daemon {

namespace {
constexpr int kAcceptsPerEvent = 64;  // then the loop serves others
constexpr size_t kHelloBytes = sizeof(wire::Header) + sizeof(wire::DirectHello);
}  // namespace

DirectPort::DirectPort(int epoll_fd, DirectPortLimits lim, OnArrival on_arrival)
    : epoll_(epoll_fd), lim_(lim), on_arrival_(std::move(on_arrival)) {}

DirectPort::~DirectPort() {
  for (auto& [id, d] : dials_)
    if (d.done) d.done(ECANCELED, UniqueFd());
}

void DirectPort::watch(int fd, uint32_t id, uint32_t events, bool add) {
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = kTagBase | id;
  ::epoll_ctl(epoll_, add ? EPOLL_CTL_ADD : EPOLL_CTL_MOD, fd, &ev);
}

uint32_t DirectPort::listen(UniqueFd sock, uint32_t ipv4, uint16_t port, int* err) {
  int one = 1;
  ::setsockopt(sock.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  sa.sin_addr.s_addr = ipv4;
  if (::bind(sock.get(), reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) < 0 ||
      ::listen(sock.get(), 128) < 0) {
    *err = errno;
    return 0;
  }
  const uint32_t id = next_id_++;
  watch(sock.get(), id, EPOLLIN, true);
  listeners_[id] = Listener{std::move(sock), ipv4};
  *err = 0;
  return id;
}

void DirectPort::unlisten(uint32_t id) {
  auto it = listeners_.find(id);
  if (it == listeners_.end()) return;
  ::epoll_ctl(epoll_, EPOLL_CTL_DEL, it->second.fd.get(), nullptr);
  listeners_.erase(it);
  for (auto a = arrivals_.begin(); a != arrivals_.end();) {
    if (a->second.listener != id) {
      ++a;
      continue;
    }
    if (auto s = per_source_.find(a->second.peer_ipv4); s != per_source_.end() && !--s->second)
      per_source_.erase(s);
    a = arrivals_.erase(a);  // closes it (epoll forgets a closed descriptor)
  }
}

void DirectPort::dial(UniqueFd sock, uint32_t dst_ipv4, uint16_t port,
                      const wire::DirectHello& hello, int64_t deadline_ns, Dialed done) {
  int one = 1;
  ::setsockopt(sock.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  sa.sin_addr.s_addr = dst_ipv4;
  if (::connect(sock.get(), reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) < 0 &&
      errno != EINPROGRESS)
    return done(errno == ETIMEDOUT ? ETIMEDOUT : ECONNREFUSED, UniqueFd());
  const uint32_t id = next_id_++;
  Conn c;
  wire::Header h{};
  h.type = static_cast<uint8_t>(wire::Type::kDirectHello);
  memcpy(c.buf, &h, sizeof(h));
  memcpy(c.buf + sizeof(h), &hello, sizeof(hello));
  c.deadline = deadline_ns;
  c.done = std::move(done);
  watch(sock.get(), id, EPOLLOUT, true);
  c.fd = std::move(sock);
  dials_.emplace(id, std::move(c));
}

void DirectPort::on_event(uint64_t tag, uint32_t events, int64_t now) {
  const auto id = static_cast<uint32_t>(tag);
  if (auto l = listeners_.find(id); l != listeners_.end()) return accept_all(id, l->second, now);
  if (arrivals_.count(id)) return read_hello(id, now);
  if (dials_.count(id)) return step_dial(id, events, now);
}

void DirectPort::make_room(uint32_t peer_ipv4) {
  // The oldest arrival of the same source first: a source flooding the port with connections
  // that never say hello pushes out only its own.
  auto oldest = [&](bool same_source) {
    auto found = arrivals_.end();
    for (auto it = arrivals_.begin(); it != arrivals_.end(); ++it)
      if ((!same_source || it->second.peer_ipv4 == peer_ipv4) &&
          (found == arrivals_.end() || it->second.seq < found->second.seq))
        found = it;
    return found;
  };
  auto evict = [&](std::map<uint32_t, Conn>::iterator it) {
    if (auto s = per_source_.find(it->second.peer_ipv4); s != per_source_.end() && !--s->second)
      per_source_.erase(s);
    arrivals_.erase(it);
    ++evicted_;
  };
  auto s = per_source_.find(peer_ipv4);
  if (s != per_source_.end() && s->second >= lim_.arrivals_per_source)
    if (auto it = oldest(true); it != arrivals_.end()) evict(it);
  if (arrivals_.size() >= lim_.arrivals_total)
    if (auto it = oldest(false); it != arrivals_.end()) evict(it);
}

void DirectPort::accept_all(uint32_t listener_id, const Listener& l, int64_t now) {
  for (int i = 0; i < kAcceptsPerEvent; ++i) {
    sockaddr_in peer{};
    socklen_t len = sizeof(peer);
    int fd = ::accept4(l.fd.get(), reinterpret_cast<sockaddr*>(&peer), &len,
                       SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return;  // EAGAIN, or out of descriptors: the rest wait in the backlog
    }
    UniqueFd sock(fd);
    if (peer.sin_family != AF_INET) continue;
    make_room(peer.sin_addr.s_addr);
    const uint32_t id = next_id_++;
    Conn c;
    c.deadline = now + lim_.hello_ns;
    c.peer_ipv4 = peer.sin_addr.s_addr;
    c.listener = listener_id;
    c.seq = next_seq_++;
    watch(sock.get(), id, EPOLLIN | EPOLLRDHUP, true);
    c.fd = std::move(sock);
    ++per_source_[c.peer_ipv4];
    arrivals_.emplace(id, std::move(c));
  }
}

void DirectPort::read_hello(uint32_t id, int64_t /*now*/) {
  auto it = arrivals_.find(id);
  Conn& c = it->second;
  auto close_it = [&] {
    if (auto s = per_source_.find(c.peer_ipv4); s != per_source_.end() && !--s->second)
      per_source_.erase(s);
    arrivals_.erase(it);
  };
  // Exactly the hello: what follows it is the destination process's to read.
  ssize_t n = ::recv(c.fd.get(), c.buf + c.have, kHelloBytes - c.have, MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
  if (n <= 0) return close_it();
  c.have += static_cast<size_t>(n);
  if (c.have < kHelloBytes) return;
  const auto h = wire::read<wire::Header>(c.buf);
  const char* why = nullptr;
  if (h.type != static_cast<uint8_t>(wire::Type::kDirectHello) || h.payload != 0 ||
      !wire::check_frame(wire::Type::kDirectHello, c.buf + sizeof(h), 0, &why))
    return close_it();
  Arrival a;
  a.hello = wire::read<wire::DirectHello>(c.buf + sizeof(h));
  a.peer_ipv4 = c.peer_ipv4;
  if (auto l = listeners_.find(c.listener); l != listeners_.end()) a.listener_ipv4 = l->second.ipv4;
  ::epoll_ctl(epoll_, EPOLL_CTL_DEL, c.fd.get(), nullptr);
  a.fd = std::move(c.fd);
  close_it();
  on_arrival_(a);
}

void DirectPort::step_dial(uint32_t id, uint32_t events, int64_t now) {
  Conn& c = dials_.find(id)->second;
  if (!c.connected) {
    int err = 0;
    socklen_t len = sizeof(err);
    if (::getsockopt(c.fd.get(), SOL_SOCKET, SO_ERROR, &err, &len) < 0) err = errno;
    if (err == EINPROGRESS || (!err && !(events & (EPOLLOUT | EPOLLERR | EPOLLHUP)))) return;
    if (err) return end_dial(id, err == ETIMEDOUT ? ETIMEDOUT : ECONNREFUSED);
    c.connected = true;
    if (c.deadline < now + lim_.answer_ns) c.deadline = now + lim_.answer_ns;
  }
  if (c.have < kHelloBytes) {
    ssize_t n = ::send(c.fd.get(), c.buf + c.have, kHelloBytes - c.have,
                       MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
    if (n < 0) return end_dial(id, ECONNREFUSED);
    c.have += static_cast<size_t>(n);
    if (c.have < kHelloBytes) return;
    watch(c.fd.get(), id, EPOLLIN | EPOLLRDHUP, false);
    return;
  }
  // The answer: one byte, 0 when the far end's vrdmad took the hello.
  uint8_t answer = 1;
  ssize_t n = ::recv(c.fd.get(), &answer, 1, MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
  end_dial(id, n == 1 && answer == 0 ? 0 : ECONNREFUSED);
}

void DirectPort::end_dial(uint32_t id, int status) {
  auto it = dials_.find(id);
  ::epoll_ctl(epoll_, EPOLL_CTL_DEL, it->second.fd.get(), nullptr);
  UniqueFd fd = std::move(it->second.fd);
  Dialed done = std::move(it->second.done);
  dials_.erase(it);
  done(status, status ? UniqueFd() : std::move(fd));
}

int64_t DirectPort::expire(int64_t now) {
  int64_t next = -1;
  auto note = [&](int64_t t) {
    if (next < 0 || t < next) next = t;
  };
  for (auto it = arrivals_.begin(); it != arrivals_.end();) {
    if (it->second.deadline > now) {
      note(it->second.deadline);
      ++it;
      continue;
    }
    if (auto s = per_source_.find(it->second.peer_ipv4); s != per_source_.end() && !--s->second)
      per_source_.erase(s);
    it = arrivals_.erase(it);
  }
  std::vector<uint32_t> late;
  for (auto& [id, d] : dials_) {
    if (d.deadline <= now)
      late.push_back(id);
    else
      note(d.deadline);
  }
  for (uint32_t id : late) end_dial(id, ETIMEDOUT);
  return next;
}

}  // namespace vrdma::daemon
