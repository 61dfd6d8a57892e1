#include "daemon/direct/socket_stats.h"

#include <arpa/inet.h>
#include <errno.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/sock_diag.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <stddef.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>

namespace vrdma::daemon {

namespace {

constexpr uint32_t kTcpListen = 10;  // TCP_LISTEN in the kernel's state numbering
constexpr uint32_t kAllStates = 0xfff;

// The tcp_info of one answer, when the kernel sent one long enough to hold the byte counts.
bool tcp_bytes(const nlmsghdr* h, const inet_diag_msg* m, SocketBytes& out) {
  int len = static_cast<int>(h->nlmsg_len) - static_cast<int>(NLMSG_LENGTH(sizeof(*m)));
  for (auto* a = reinterpret_cast<const rtattr*>(m + 1); RTA_OK(a, len); a = RTA_NEXT(a, len)) {
    if (a->rta_type != INET_DIAG_INFO) continue;
    if (RTA_PAYLOAD(a) < offsetof(tcp_info, tcpi_bytes_received) + sizeof(uint64_t)) return false;
    tcp_info ti{};
    std::memcpy(&ti, RTA_DATA(a), std::min<size_t>(RTA_PAYLOAD(a), sizeof(ti)));
    out.sent = ti.tcpi_bytes_acked;
    out.received = ti.tcpi_bytes_received;
    return true;
  }
  return false;
}

// Parses one batch of sock_diag answers into `out` (connections to or from `port`). 1 at the
// dump's end, -errno for an error answer, else 0.
int parse(const char* buf, ssize_t n, uint16_t port, std::map<uint64_t, SocketBytes>& out) {
  int left = static_cast<int>(n);
  for (auto* h = reinterpret_cast<const nlmsghdr*>(buf); NLMSG_OK(h, left);
       h = NLMSG_NEXT(h, left)) {
    if (h->nlmsg_type == NLMSG_DONE) return 1;
    if (h->nlmsg_type == NLMSG_ERROR) {
      const auto* e = static_cast<const nlmsgerr*>(NLMSG_DATA(h));
      return e->error ? e->error : -EPROTO;
    }
    if (h->nlmsg_type != SOCK_DIAG_BY_FAMILY || h->nlmsg_len < NLMSG_LENGTH(sizeof(inet_diag_msg)))
      continue;
    const auto* m = static_cast<const inet_diag_msg*>(NLMSG_DATA(h));
    if (m->idiag_family != AF_INET) continue;
    if (ntohs(m->id.idiag_sport) != port && ntohs(m->id.idiag_dport) != port) continue;
    SocketBytes b;
    if (!tcp_bytes(h, m, b)) continue;
    out[m->id.idiag_cookie[0] | uint64_t{m->id.idiag_cookie[1]} << 32] = b;
  }
  return 0;
}

}  // namespace

int read_port_sockets(int diag_fd, uint16_t port, std::map<uint64_t, SocketBytes>& out) {
  out.clear();
  struct {
    nlmsghdr h;
    inet_diag_req_v2 r;
  } req{};
  req.h.nlmsg_len = sizeof(req);
  req.h.nlmsg_type = SOCK_DIAG_BY_FAMILY;
  req.h.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
  req.h.nlmsg_seq = 1;
  req.r.sdiag_family = AF_INET;
  req.r.sdiag_protocol = IPPROTO_TCP;
  req.r.idiag_states = kAllStates & ~(1u << kTcpListen);
  req.r.idiag_ext = 1 << (INET_DIAG_INFO - 1);
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  if (::sendto(diag_fd, &req, sizeof(req), 0, reinterpret_cast<sockaddr*>(&kernel),
               sizeof(kernel)) < 0)
    return errno;
  alignas(nlmsghdr) char buf[32768];
  for (;;) {
    ssize_t n = ::recv(diag_fd, buf, sizeof(buf), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    if (n == 0) return EPROTO;
    const int r = parse(buf, n, port, out);
    if (r == 1) return 0;
    if (r < 0) return -r;
  }
}

int subscribe_destroyed(int fd) {
  const int group = SKNLGRP_INET_TCP_DESTROY;
  if (::setsockopt(fd, SOL_NETLINK, NETLINK_ADD_MEMBERSHIP, &group, sizeof(group)) != 0)
    return errno;
  const int size = 1 << 20;  // a second's worth of closed connections, and more
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof(size));
  return 0;
}

void read_destroyed(int fd, uint16_t port, std::map<uint64_t, SocketBytes>& out) {
  out.clear();
  alignas(nlmsghdr) char buf[32768];
  for (int batch = 0; batch < 1024; ++batch) {
    ssize_t n = ::recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n < 0 && (errno == EINTR || errno == ENOBUFS)) continue;  // ENOBUFS: some were lost
    if (n <= 0) return;
    parse(buf, n, port, out);
  }
}

void DirectTraffic::update(const std::map<uint64_t, SocketBytes>& destroyed,
                           const std::map<uint64_t, SocketBytes>& live) {
  auto add = [this](const SocketBytes& b, const SocketBytes& less) {
    gone_.sent += b.sent > less.sent ? b.sent - less.sent : 0;
    gone_.received += b.received > less.received ? b.received - less.received : 0;
  };
  for (const auto& [cookie, final_bytes] : destroyed) {
    if (auto it = live_.find(cookie); it != live_.end()) {
      add(final_bytes, {});
      live_.erase(it);
    } else if (auto r = recent_.find(cookie); r != recent_.end()) {
      add(final_bytes, r->second);  // its last reading is counted already
      recent_.erase(r);
    } else {
      add(final_bytes, {});  // opened and closed between two readings
    }
  }
  for (const auto& [cookie, last] : live_) {
    if (live.count(cookie)) continue;
    add(last, {});
    if (recent_.size() >= kMaxRecent) recent_.clear();
    recent_[cookie] = last;
  }
  live_ = live;
}

SocketBytes DirectTraffic::totals() const {
  SocketBytes t = gone_;
  for (const auto& [cookie, b] : live_) {
    t.sent += b.sent;
    t.received += b.received;
  }
  return t;
}

}  // namespace vrdma::daemon
