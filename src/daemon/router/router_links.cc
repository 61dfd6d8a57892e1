// The router's links: who may open one (a host the directory knows, from its router address,
// with its certificate), how many, how long each step may take, and when a link ends.
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/address.h"
#include "common/clock.h"
#include "common/log.h"
#include "daemon/router/router_state.h"

namespace vrdma::daemon {

namespace {

constexpr int kAcceptsPerWakeup = 16;
constexpr int64_t kDirectoryCheckNs = 1'000'000'000;
constexpr int64_t kRefusalLogNs = 10'000'000'000;
// Unsent bytes a link's socket may hold. Enough to keep the link busy while the router thread
// waits for a core (its host's applications spin on their CQs: 256 KiB halved the throughput
// of a 2-core host), little enough that what waits beyond it waits in the QPs' queues.
constexpr int kUnsentLowat = 2 << 20;

void tune_socket(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  int size = 4 << 20;
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof(size));
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof(size));
  // Bounded unsent data in the kernel: what waits beyond it waits in the QPs' queues, where
  // the QoS scheduler still chooses what goes next (router_qos.cc).
  int lowat = kUnsentLowat;
  setsockopt(fd, IPPROTO_TCP, TCP_NOTSENT_LOWAT, &lowat, sizeof(lowat));
}

uint32_t router_ip(const HostEntry& h) {
  uint32_t ip = 0;
  uint16_t port;
  return parse_ipv4_port(h.router, &ip, &port) ? ip : 0;
}

// What epoll watches a link's socket for: reads unless paused, room while the socket is full.
epoll_event watch_event(const Link& link, uint64_t tag) {
  epoll_event ev{};
  ev.events = EPOLLRDHUP | (link.rx_paused ? 0u : uint32_t(EPOLLIN)) |
              (link.tx_blocked ? uint32_t(EPOLLOUT) : 0u);
  ev.data.u64 = tag;
  return ev;
}

}  // namespace

void Router::watch(Link& link) {
  link.rx_ready = true;  // whatever its socket holds already is read on the next pass
  epoll_event ev = watch_event(link, link_tag(link.id()));
  ::epoll_ctl(epoll_, EPOLL_CTL_ADD, link.fd(), &ev);
}

void Router::set_rx_paused(Link& link, bool paused) {
  // A link we do not read must not wake the loop for what waits in its socket.
  link.rx_paused = paused;
  if (!paused) link.rx_ready = true;
  update_watch(link);
}

void Router::update_watch(Link& link) {
  epoll_event ev = watch_event(link, link_tag(link.id()));
  ::epoll_ctl(epoll_, EPOLL_CTL_MOD, link.fd(), &ev);
}

bool Router::flush_link(Link& link, int64_t now) {
  const bool was_blocked = link.tx_blocked;
  if (!link.flush(now)) return false;
  if (link.tx_blocked && !was_blocked) update_watch(link);  // wake when it has room
  return true;
}

const char* Router::refuse_address(uint32_t ipv4) {
  HostEntry h;
  switch (dir_.host_by_router(ipv4, &h)) {
    case Lookup::kUnavailable:
      return "the directory is unavailable";
    case Lookup::kNotFound:
      return "not the router address of a host in the directory";
    case Lookup::kFound:
      break;
  }
  if (h.host_id == cfg_.host_id) return "this host's own address";
  // Only links that said Hello count against the host: connections that have not (a
  // hostNetwork pod shares its node's address) take the slots of none (make_room).
  if (authenticated_links_from(ipv4) >= lim_.max_links_per_host)
    return "too many links from that host";
  return nullptr;
}

Link* Router::oldest_pending(uint32_t ipv4) const {
  // Connections that have sent nothing go first: a peer's router speaks at once (its TLS
  // hello), a flood of open connections need not.
  Link* found = nullptr;
  bool found_heard = true;
  for (auto& [id, l] : links_) {
    if (l->outbound() || l->authenticated || (ipv4 && l->peer_ipv4 != ipv4)) continue;
    const bool heard = l->heard_from();
    if (!found || (found_heard && !heard) ||
        (heard == found_heard && (l->opened_ns < found->opened_ns ||
                                  (l->opened_ns == found->opened_ns && l->id() < found->id())))) {
      found = l.get();
      found_heard = heard;
    }
  }
  return found;
}

uint32_t Router::pending_links_from(uint32_t ipv4) const {
  uint32_t n = 0;
  for (auto& [id, l] : links_) n += !l->outbound() && !l->authenticated && l->peer_ipv4 == ipv4;
  return n;
}

bool Router::make_room(uint32_t ipv4) {
  // A source over its bound of connections without a Hello loses one (oldest_pending): a
  // flood pushes out only its own. All links full: one of any source goes.
  if (pending_links_from(ipv4) >= lim_.pending_links_per_host)
    if (Link* l = oldest_pending(ipv4)) {
      ++evicted_pending_;
      close_link(*l, "evicted: its address opened more connections without a Hello");
    }
  if (links_.size() >= lim_.max_links)
    if (Link* l = oldest_pending(0)) {
      ++evicted_pending_;
      close_link(*l, "evicted: all links are taken");
    }
  return links_.size() < lim_.max_links;
}

void Router::accept_links(int64_t now) {
  for (int i = 0; i < kAcceptsPerWakeup; ++i) {
    sockaddr_in sa{};
    socklen_t len = sizeof(sa);
    int fd = ::accept4(listen_.get(), reinterpret_cast<sockaddr*>(&sa), &len,
                       SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;
    const uint32_t ip = sa.sin_addr.s_addr;
    const char* why = sa.sin_family == AF_INET ? refuse_address(ip) : "not IPv4";
    if (!why && !make_room(ip)) why = "too many links";
    if (why) {
      // Closed before a byte is read.
      ::close(fd);
      ++refused_accepts_;
      LOG_DEBUG("router: connection from %s refused: %s", ipv4_text(ip).c_str(), why);
      if (now - refused_logged_ns_ > kRefusalLogNs) {
        LOG_WARN("router: refused %llu connection(s) so far (latest from %s: %s)",
                 static_cast<unsigned long long>(refused_accepts_), ipv4_text(ip).c_str(), why);
        refused_logged_ns_ = now;
      }
      continue;
    }
    tune_socket(fd);
    uint32_t id = next_link_id_++;
    auto link = std::make_unique<Link>(id, UniqueFd(fd), false);
    link->peer_ipv4 = ip;
    link->peer_addr = ip_port_text(ip, ntohs(sa.sin_port));
    link->opened_ns = now;
    link->last_used_ns = now;
    if (tls_) {
      std::string error;
      SSL* ssl = tls_->new_session(fd, false, 0, &error);
      if (!ssl) {
        LOG_WARN("router: link from %s: %s", link->peer_addr.c_str(), error.c_str());
        continue;
      }
      link->use_tls(ssl);
    }
    watch(*link);
    links_.emplace(id, std::move(link));
  }
}

Link* Router::outbound_link(uint32_t host_id, uint32_t lane, int* err) {
  if (auto it = host_links_.find(lane_key(host_id, lane)); it != host_links_.end())
    if (Link* l = find_link(it->second)) return l;
  if (lane >= wire::kLanes) {
    *err = EINVAL;
    return nullptr;
  }
  HostEntry h;
  Lookup r = dir_.host_by_id(host_id, &h);
  uint32_t ip = router_ip(h);
  if (r != Lookup::kFound || !ip) {
    *err = r == Lookup::kUnavailable ? EAGAIN : EHOSTUNREACH;
    return nullptr;
  }
  if (links_.size() >= lim_.max_links) {
    *err = EAGAIN;
    return nullptr;
  }
  uint32_t addr;
  uint16_t port;
  parse_ipv4_port(h.router, &addr, &port);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  sa.sin_addr.s_addr = ip;
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *err = errno;
    return nullptr;
  }
  tune_socket(fd);
  int rc = ::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa));
  if (rc < 0 && errno != EINPROGRESS) {
    *err = errno;
    ::close(fd);
    return nullptr;
  }
  uint32_t id = next_link_id_++;
  auto link = std::make_unique<Link>(id, UniqueFd(fd), true);
  if (tls_) {
    std::string error;
    SSL* ssl = tls_->new_session(fd, true, ip, &error);
    if (!ssl) {
      LOG_WARN("router: link to host %u: %s", host_id, error.c_str());
      *err = EPROTO;
      return nullptr;
    }
    link->use_tls(ssl);
  }
  link->host_id = host_id;
  link->lane = lane;
  link->peer_ipv4 = ip;
  link->peer_addr = h.router;
  link->peer_cidrs = h.cidrs;
  link->opened_ns = now_ns();
  link->last_used_ns = link->opened_ns;
  link->connect_deadline_ns = link->opened_ns + lim_.handshake_ns;
  wire::Hello hello{wire::kMagic, wire::kVersion, cfg_.host_id, lane, boot_};
  link->send(wire::Type::kHello, &hello, sizeof(hello));
  watch(*link);
  Link* l = link.get();
  links_.emplace(id, std::move(link));
  host_links_[lane_key(host_id, lane)] = id;
  LOG_INFO("router: link %u to host %u at %s (%s lane %u): connecting", id, host_id,
           h.router.c_str(), wire::lane_label(lane).c_str(), lane);
  return l;
}

bool Router::verify_server(Link& link, std::string* why) {
  // The certificate chained to the CA and names the address we connected to (checked in the
  // handshake); it must also be the host we meant to reach.
  uint32_t id;
  if (!tls_peer_host_id(link.ssl(), &id)) {
    *why = "the certificate names no host (CN vrdma-host-<id>)";
    return false;
  }
  if (id != link.host_id) {
    *why = "the certificate is host " + std::to_string(id) + "'s";
    return false;
  }
  return true;
}

void Router::progress_link(Link& link, int64_t now) {
  if (link.state() == Link::State::kConnecting) {
    pollfd p{link.fd(), POLLOUT, 0};
    if (::poll(&p, 1, 0) == 1) {
      int err = 0;
      socklen_t len = sizeof(err);
      getsockopt(link.fd(), SOL_SOCKET, SO_ERROR, &err, &len);
      if (err) return doom(link.id(), strerror(err));
      link.tcp_connected();
      link.last_rx_ns = now;
    } else if (now > link.connect_deadline_ns) {
      return doom(link.id(), "connection timed out");
    }
  }
  if (link.state() == Link::State::kHandshake) {
    std::string why;
    int rc = link.handshake(&why);
    if (rc < 0) return doom(link.id(), why);
    if (rc == 0) {
      int64_t deadline = link.outbound() ? link.connect_deadline_ns
                                         : link.opened_ns + lim_.handshake_ns;
      if (now > deadline) doom(link.id(), "TLS handshake timed out");
      return;
    }
    if (link.outbound() && !verify_server(link, &why)) return doom(link.id(), why);
  }
  if (link.open() && link.outbound()) {
    link.last_rx_ns = now;
    ++link_connects_[link.host_id];
    LOG_INFO("router: link %u to host %u connected (%s)", link.id(), link.host_id,
             !link.ssl() ? "plaintext" : link.ktls_send() ? "TLS, kernel" : "TLS");
  }
}

bool Router::on_hello(Link& link, const wire::Hello& h, const char** why) {
  static thread_local std::string reason;
  auto refuse = [&](std::string text) {
    reason = std::move(text);
    *why = reason.c_str();
    return false;
  };
  if (h.version != wire::kVersion)
    return refuse("router protocol version " + std::to_string(h.version) + ", this host speaks " +
                  std::to_string(wire::kVersion));
  if (link.ssl()) {
    uint32_t cert;
    if (!tls_peer_host_id(link.ssl(), &cert))
      return refuse("the certificate names no host (CN vrdma-host-<id>)");
    if (cert != h.host_id)
      return refuse("Hello says host " + std::to_string(h.host_id) + ", the certificate is host " +
                    std::to_string(cert) + "'s");
    if (!tls_peer_has_ip(link.ssl(), link.peer_ipv4))
      return refuse("the certificate does not name the address " + ipv4_text(link.peer_ipv4));
  }
  if (h.host_id == cfg_.host_id) return refuse("Hello says it is this host");
  HostEntry e;
  Lookup r = dir_.host_by_id(h.host_id, &e);
  if (r != Lookup::kFound)
    return refuse(r == Lookup::kUnavailable
                      ? "the directory is unavailable"
                      : "host " + std::to_string(h.host_id) + " is not in the directory");
  if (router_ip(e) != link.peer_ipv4)
    return refuse("host " + std::to_string(h.host_id) + "'s router is at " + e.router + ", not " +
                  ipv4_text(link.peer_ipv4));
  // Every lane's link passes the same checks; the lane only says which of that host's links
  // this is (which QPs' frames it carries), and grants nothing.
  if (h.lane >= wire::kLanes) return refuse("Hello names lane " + std::to_string(h.lane));
  if (authenticated_links_from(link.peer_ipv4) >= lim_.max_links_per_host)
    return refuse("too many links from that host");
  link.host_id = h.host_id;
  link.lane = h.lane;
  link.peer_boot = h.boot;
  link.peer_cidrs = e.cidrs;
  link.authenticated = true;
  link.last_rx_ns = now_;
  // Another thread's lane: nothing after the Hello was read (Link::receive), so the link goes
  // there whole at the end of this pass.
  if (hooks_.hand_over && cfg_.thread_of(h.lane) != cfg_.thread) handed_links_.push_back(link.id());
  LOG_INFO("router: link %u from host %u (%s, %s, %s lane %u)", link.id(), h.host_id,
           link.peer_addr.c_str(),
           !link.ssl() ? "plaintext" : link.ktls_recv() ? "TLS, kernel" : "TLS",
           wire::lane_label(h.lane).c_str(), h.lane);
  return true;
}

void Router::hand_over_links() {
  for (uint32_t id : handed_links_) {
    auto it = links_.find(id);
    if (it == links_.end()) continue;  // closed meanwhile
    std::unique_ptr<Link> link = std::move(it->second);
    links_.erase(it);
    responder_.forget_link(*link);
    requester_.forget_link(id);
    mcast_rx_.erase(id);
    ::epoll_ctl(epoll_, EPOLL_CTL_DEL, link->fd(), nullptr);
    LOG_DEBUG("router: link %u from host %u (%s lane) goes to router thread %u", id,
              link->host_id, wire::lane_label(link->lane).c_str(), cfg_.thread_of(link->lane));
    hooks_.hand_over(std::move(link));
  }
  handed_links_.clear();
}

uint32_t Router::authenticated_links_from(uint32_t ipv4) const {
  uint32_t n = 0;
  for (auto& [id, l] : links_) n += !l->outbound() && l->authenticated && l->peer_ipv4 == ipv4;
  return n;
}

void Router::take_link(std::unique_ptr<Link> link, int64_t now) {
  if (links_.size() >= lim_.max_links ||
      authenticated_links_from(link->peer_ipv4) >= lim_.max_links_per_host) {
    LOG_WARN("router: link from host %u (%s lane) refused: too many links", link->host_id,
             wire::lane_label(link->lane).c_str());
    return;  // closed here
  }
  const uint32_t id = next_link_id_++;
  link->renumber(id);
  link->last_rx_ns = now;
  watch(*link);
  links_.emplace(id, std::move(link));
}

bool Router::link_in_use(const Link& link) const {
  if (link.routed_qps || link.tx_pending() || link.held_bytes) return true;
  for (auto& [key, in] : responder_.conns())
    if (in->link_id == link.id()) return true;
  for (auto& [id, pc] : connects_)
    if (pc.link_id == link.id()) return true;
  for (auto& [id, pd] : directs_)
    if (pd.link_id == link.id()) return true;
  for (auto& [qpn, o] : outbound_)
    for (auto& [ip, lid] : o->ud_links)
      if (lid == link.id()) return true;
  // rdma_cm's messages go on the main links: those stay while it has connections with the host.
  return link.lane == wire::kMainLane && hooks_.cm_connections_with &&
         hooks_.cm_connections_with(link.host_id) > 0;
}

void Router::check_links(int64_t now) {
  const bool dir_check = now >= next_dir_check_ns_;
  if (dir_check) next_dir_check_ns_ = now + kDirectoryCheckNs;
  for (auto& [id, l] : links_) {
    Link& link = *l;
    if (!link.outbound() && !link.authenticated) {
      if (now - link.opened_ns > lim_.hello_ns) doom(id, "no Hello in time");
      continue;
    }
    if (!link.open()) continue;
    if (link.tx_stalled_ns && now - link.tx_stalled_ns > lim_.tx_stall_ns) {
      doom(id, "the peer reads nothing");
      continue;
    }
    if (now - link.last_used_ns > lim_.idle_ns && !link_in_use(link)) {
      doom(id, "idle");
      continue;
    }
    if (!dir_check || link.self) continue;
    HostEntry e;
    switch (dir_.host_by_id(link.host_id, &e)) {
      case Lookup::kUnavailable:
        break;  // keep what we know until the directory answers again
      case Lookup::kNotFound:
        doom(id, "the host left the directory");
        break;
      case Lookup::kFound:
        if (router_ip(e) != link.peer_ipv4) {
          doom(id, "the host's router moved");
          break;
        }
        link.peer_cidrs = e.cidrs;
        break;
    }
  }
}

bool Router::agreed_and_alone(const InConn& in) const {
  LocalQp q;
  if (!hooks_.find_qp(in.dst_qpn, &q) || q.owner != in.owner ||
      !hooks_.names_peer(in.dst_qpn, in.src_ipv4, in.src_qpn))
    return false;
  // The same source on another link (a second link of that host): that one carries on.
  for (const auto& [key, other] : responder_.conns())
    if (other.get() != &in && other->dst_qpn == in.dst_qpn && other->src_qpn == in.src_qpn &&
        other->src_ipv4 == in.src_ipv4 && !other->failed)
      return false;
  return true;
}

bool Router::owns_address(const Link& link, uint32_t ipv4) const {
  if (link.self) return hooks_.local_address && hooks_.local_address(ipv4);
  const uint32_t ip = ntohl(ipv4);
  for (const auto& c : link.peer_cidrs)
    if (c.contains(ip)) return true;
  return false;
}

void Router::doom(uint32_t link_id, std::string why) {
  for (auto& d : doomed_links_)
    if (d.first == link_id) return;
  doomed_links_.emplace_back(link_id, std::move(why));
}

void Router::close_doomed() {
  while (!doomed_links_.empty()) {
    auto [id, why] = std::move(doomed_links_.back());
    doomed_links_.pop_back();
    if (Link* l = find_link(id)) close_link(*l, why.c_str());
  }
}

void Router::close_link(Link& link, const char* why) {
  const uint32_t id = link.id();
  const uint32_t host = link.host_id;
  const bool known = link.outbound() || link.authenticated;
  const bool self = link.self;
  const uint32_t lane = link.lane;
  if (known) {
    LOG_WARN("router: link %u (host %u, %s) closed: %s", id, host,
             link.outbound() ? "outbound" : "inbound", why);
  } else {
    LOG_INFO("router: link %u from %s closed before its Hello: %s", id, link.peer_addr.c_str(),
             why);
  }
  // Our QPs that send on it: outstanding work ends with RETRY_EXC_ERR, idle ones are told.
  for (auto& [qpn, o] : outbound_) {
    bool uses = o->link_id == id;
    for (auto& [ip, lid] : o->ud_links) uses |= lid == id;
    if (!uses || o->failed) continue;
    if (o->type == IBV_QPT_UD) {
      for (auto it = o->ud_links.begin(); it != o->ud_links.end();)
        it = it->second == id ? o->ud_links.erase(it) : std::next(it);
      continue;
    }
    const bool outstanding = o->done < o->sent;
    requester_.abort(*o, outstanding ? IBV_WC_RETRY_EXC_ERR : IBV_WC_WR_FLUSH_ERR, true,
                     outstanding ? proto::FatalReason::kRouted : proto::FatalReason::kPeerGone);
  }
  // Remote QPs that sent to ours: our QPs that agreed to them lost their peer.
  for (auto& [key, in] : responder_.conns()) {
    if (in->link_id != id || !agreed_and_alone(*in)) continue;
    LocalQp q;
    if (hooks_.find_qp(in->dst_qpn, &q))
      hooks_.qp_fatal(q.owner, in->dst_qpn, proto::FatalReason::kPeerGone);
  }
  responder_.forget_link(link);
  for (auto it = connects_.begin(); it != connects_.end();) {
    if (it->second.link_id != id) {
      ++it;
      continue;
    }
    auto done = std::move(it->second.done);
    it = connects_.erase(it);
    done(EHOSTUNREACH, 0);
  }
  expire_directs(0, id);
  requester_.forget_link(id);
  mcast_rx_.erase(id);
  if (auto h = host_links_.find(lane_key(host, lane)); h != host_links_.end() && h->second == id)
    host_links_.erase(h);
  ::epoll_ctl(epoll_, EPOLL_CTL_DEL, link.fd(), nullptr);
  links_.erase(id);
  // What rdma_cm had with that host went with it (an idle link had nothing). Its messages go on
  // the main links: a latency lane's link takes only its own QPs with it (above).
  if (known && !self && lane == wire::kMainLane && hooks_.host_gone) hooks_.host_gone(host);
}

}  // namespace vrdma::daemon
