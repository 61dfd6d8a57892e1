// The router's links and control path; the data path is in router_requester.cc and
// router_responder.cc.
#include "daemon/router/router.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

#include "common/address.h"
#include "common/clock.h"
#include "common/log.h"
#include "daemon/router/router_state.h"

namespace vrdma::daemon {

namespace {

constexpr int64_t kConnectTimeoutNs = 2'000'000'000;
constexpr size_t kReceiveBudget = 128 * 1024;  // < kRoomToReceive of the smallest frames
constexpr uint32_t kRoomToReceive = 2048;      // every frame received may need a reply slot
constexpr uint64_t kTagListen = 0;
constexpr uint64_t kTagDoorbell = 1;
constexpr uint64_t kTagLinks = 2;

// "a.b.c.d:port" as a socket address.
bool parse_addr(const std::string& text, sockaddr_in* out) {
  uint32_t ip;
  uint16_t port;
  if (!parse_ipv4_port(text, &ip, &port)) return false;
  *out = sockaddr_in{};
  out->sin_family = AF_INET;
  out->sin_port = htons(port);
  out->sin_addr.s_addr = ip;
  return true;
}

void tune_socket(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  int size = 4 << 20;
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof(size));
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof(size));
}

}  // namespace

Router::Router(const RouterConfig& cfg, Directory& dir, Hooks hooks, uint64_t boot)
    : cfg_(cfg),
      dir_(dir),
      hooks_(std::move(hooks)),
      boot_(boot),
      fd_source_(std::make_unique<ClientFds>(*this)) {}

Router::~Router() = default;

int Router::start(int epoll_fd) {
  epoll_ = epoll_fd;
  doorbell_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!doorbell_) return errno;
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kTagBase | kTagDoorbell;
  if (::epoll_ctl(epoll_, EPOLL_CTL_ADD, doorbell_.get(), &ev) < 0) return errno;
  if (cfg_.listen.empty()) return 0;
  sockaddr_in sa;
  if (!parse_addr(cfg_.listen, &sa)) {
    LOG_ERROR("router: bad listen address %s (want a.b.c.d:port)", cfg_.listen.c_str());
    return EINVAL;
  }
  listen_.reset(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!listen_) return errno;
  int one = 1;
  setsockopt(listen_.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(listen_.get(), reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) < 0 ||
      ::listen(listen_.get(), 64) < 0) {
    int err = errno;
    LOG_ERROR("router: cannot listen on %s: %s", cfg_.listen.c_str(), strerror(err));
    return err;
  }
  ev.data.u64 = kTagBase | kTagListen;
  if (::epoll_ctl(epoll_, EPOLL_CTL_ADD, listen_.get(), &ev) < 0) return errno;
  LOG_INFO("router: listening on %s", cfg_.listen.c_str());
  return 0;
}

void Router::on_event(uint64_t tag, int64_t now) {
  uint64_t sub = tag & 0xffffffffu;
  if (sub == kTagListen) return accept_links();
  if (sub == kTagDoorbell) {
    uint64_t v;
    [[maybe_unused]] ssize_t n = ::read(doorbell_.get(), &v, sizeof(v));
    return;
  }
  (void)now;  // link readability: poll() reads every link
}

std::shared_ptr<shm::Peer> Router::peer(uint32_t client) {
  auto it = peers_.find(client);
  if (it != peers_.end() && !it->second->dead()) return it->second;
  auto p = std::make_shared<shm::Peer>(*fd_source_, client);
  if (p->attach_arena() != 0) return nullptr;
  peers_[client] = p;
  return p;
}

Link* Router::find_link(uint32_t id) {
  auto it = links_.find(id);
  return it == links_.end() ? nullptr : it->second.get();
}

void Router::accept_links() {
  for (int i = 0; i < 16; ++i) {
    int fd = ::accept4(listen_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;
    tune_socket(fd);
    uint32_t id = next_link_id_++;
    auto link = std::make_unique<Link>(id, UniqueFd(fd), false);
    link->set_connected();
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.u64 = kTagBase | (kTagLinks + id);
    ::epoll_ctl(epoll_, EPOLL_CTL_ADD, fd, &ev);
    links_.emplace(id, std::move(link));
  }
}

Link* Router::outbound_link(uint32_t host_id, int* err) {
  if (auto it = host_links_.find(host_id); it != host_links_.end())
    if (Link* l = find_link(it->second)) return l;
  HostEntry h;
  Lookup r = dir_.host_by_id(host_id, &h);
  if (r != Lookup::kFound || h.router.empty()) {
    *err = r == Lookup::kUnavailable ? EAGAIN : EHOSTUNREACH;
    return nullptr;
  }
  sockaddr_in sa;
  if (!parse_addr(h.router, &sa)) {
    *err = EHOSTUNREACH;
    return nullptr;
  }
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
  link->host_id = host_id;
  link->peer_addr = h.router;
  link->connect_deadline_ns = 0;  // set by the caller's clock in check_connecting
  wire::Hello hello{wire::kMagic, wire::kVersion, cfg_.host_id, 0, boot_};
  link->send(wire::Type::kHello, &hello, sizeof(hello));
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP;
  ev.data.u64 = kTagBase | (kTagLinks + id);
  ::epoll_ctl(epoll_, EPOLL_CTL_ADD, fd, &ev);
  Link* l = link.get();
  links_.emplace(id, std::move(link));
  host_links_[host_id] = id;
  LOG_INFO("router: link %u to host %u at %s: connecting", id, host_id, h.router.c_str());
  return l;
}

void Router::check_connecting(Link& link, int64_t now) {
  if (!link.connect_deadline_ns) link.connect_deadline_ns = now + kConnectTimeoutNs;
  pollfd p{link.fd(), POLLOUT, 0};
  if (::poll(&p, 1, 0) == 1) {
    int err = 0;
    socklen_t len = sizeof(err);
    getsockopt(link.fd(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (err) return close_link(link, strerror(err));
    link.set_connected();
    link.last_rx_ns = now;
    LOG_INFO("router: link %u to host %u connected", link.id(), link.host_id);
    return;
  }
  if (now > link.connect_deadline_ns) close_link(link, "connection timed out");
}

void Router::close_link(Link& link, const char* why) {
  const uint32_t id = link.id();
  LOG_WARN("router: link %u (host %u, %s) closed: %s", id, link.host_id,
           link.outbound() ? "outbound" : "inbound", why);
  // Our QPs that send on it: outstanding work ends with RETRY_EXC_ERR, idle ones are told.
  for (auto& [qpn, o] : outbound_) {
    bool uses = o->link_id == id;
    for (auto& [ip, lid] : o->ud_links) uses |= lid == id;
    if (!uses || o->failed) continue;
    if (o->info.type == IBV_QPT_UD) {
      for (auto it = o->ud_links.begin(); it != o->ud_links.end();)
        it = it->second == id ? o->ud_links.erase(it) : std::next(it);
      continue;
    }
    abort_qp(*o, o->done < o->sent ? IBV_WC_RETRY_EXC_ERR : IBV_WC_WR_FLUSH_ERR, true);
  }
  // Remote QPs that sent to ours: our QPs lost their peer.
  for (auto it = inbound_.begin(); it != inbound_.end();) {
    Inbound& in = *it->second;
    if (in.link_id != id) {
      ++it;
      continue;
    }
    held_count_ -= in.held.size();
    LocalQp q;
    if (hooks_.find_qp(in.dst_qpn, &q))
      hooks_.qp_fatal(q.owner, in.dst_qpn, proto::FatalReason::kPeerGone);
    it = inbound_.erase(it);
  }
  for (auto it = connects_.begin(); it != connects_.end();) {
    if (it->second.link_id != id) {
      ++it;
      continue;
    }
    auto done = std::move(it->second.done);
    it = connects_.erase(it);
    done(EHOSTUNREACH, 0);
  }
  rx_.erase(id);
  if (auto h = host_links_.find(link.host_id); h != host_links_.end() && h->second == id)
    host_links_.erase(h);
  ::epoll_ctl(epoll_, EPOLL_CTL_DEL, link.fd(), nullptr);
  links_.erase(id);
}

bool Router::poll(int64_t now) {
  now_ = now;
  bool work = false;
  // Requests from our QPs.
  for (auto& [qpn, o] : outbound_) work |= pump(*o, now);
  // Links: connect, write, read.
  std::vector<std::pair<uint32_t, const char*>> dead;
  for (auto& [id, l] : links_) {
    Link& link = *l;
    if (!link.connected()) {
      check_connecting(link, now);
      if (!find_link(id)) break;  // closed: the map changed
      if (!link.connected()) continue;
    }
    if (link.tx_pending()) {
      if (!link.flush()) {
        dead.push_back({id, "send failed"});
        continue;
      }
      work = true;
    }
    // Requests (on links other hosts opened) each need room for their response; what comes
    // back on our own links needs none, and is always read: otherwise two full rings, ours of
    // requests and theirs of responses, would wait for each other.
    if (!link.outbound() && !link.has_room(kRoomToReceive)) continue;
    uint64_t before = link.bytes_in;
    const char* why = nullptr;
    if (!link.receive(*this, kReceiveBudget, &why)) {
      dead.push_back({id, why ? why : "receive failed"});
      continue;
    }
    if (link.bytes_in != before) {
      link.last_rx_ns = now;
      work = true;
    }
    if (link.tx_pending() && !link.flush()) dead.push_back({id, "send failed"});
  }
  for (auto& [id, why] : dead)
    if (Link* l = find_link(id)) close_link(*l, why);
  if (held_count_) retry_held(now);
  if (!graveyard_.empty()) {
    bool idle = true;
    for (auto& [id, l] : links_) idle &= !l->tx_pending();
    if (idle) graveyard_.clear();
  }
  check_timeouts(now);
  // Connection attempts that got no answer.
  for (auto it = connects_.begin(); it != connects_.end();) {
    if (it->second.deadline > now) {
      ++it;
      continue;
    }
    auto done = std::move(it->second.done);
    it = connects_.erase(it);
    done(ETIMEDOUT, 0);
  }
  return work;
}

int64_t Router::next_deadline(int64_t now) const {
  // Outstanding work, held requests, connecting links and pending connects need the clock.
  bool busy = held_count_ || !connects_.empty();
  for (auto& [id, l] : links_) busy |= !l->connected() || l->tx_pending();
  for (auto& [qpn, o] : outbound_) busy |= o->done != o->sent;
  return busy ? now + 5'000'000 : -1;
}

bool Router::prepare_sleep() {
  for (auto& [qpn, o] : outbound_) o->sq->doorbell.store(1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  for (auto& [qpn, o] : outbound_)
    if (o->sq->tail.load(std::memory_order_relaxed) != o->sent) return false;
  for (auto& [id, l] : links_)
    if (l->tx_pending()) return false;
  return true;
}

void Router::connect_qp(uint32_t qpn, const LocalQp& qp, uint32_t dst_ipv4, uint32_t dst_qpn,
                        ConnectDone done) {
  HostEntry h;
  Lookup r = dir_.host_of(dst_ipv4, &h);
  if (r == Lookup::kUnavailable) {
    LOG_WARN("router: cannot connect QP 0x%x: the directory is unavailable (%s)", qpn,
             dir_.describe().c_str());
    return done(EAGAIN, 0);
  }
  if (r == Lookup::kNotFound || h.host_id == cfg_.host_id) return done(EHOSTUNREACH, 0);
  int err = 0;
  Link* link = outbound_link(h.host_id, &err);
  if (!link) {
    LOG_WARN("router: no link to host %u: %s", h.host_id, strerror(err));
    return done(err, 0);
  }
  uint64_t id = next_req_++;
  wire::Connect c{id, qp.ipv4, dst_ipv4, qpn, dst_qpn, qp.type, 0};
  if (!link->send(wire::Type::kConnect, &c, sizeof(c))) return done(EAGAIN, 0);
  int64_t now = now_ns();
  connects_[id] = PendingConnect{
      link->id(), dst_ipv4, qpn, qp, dst_qpn, now + 3 * kConnectTimeoutNs / 2, std::move(done)};
}

void Router::qp_freed(uint32_t qpn) {
  auto it = outbound_.find(qpn);
  if (it != outbound_.end()) {
    Outbound& o = *it->second;
    if (Link* l = find_link(o.link_id); l && l->routed_qps) --l->routed_qps;
    outbound_.erase(it);
  }
}

void Router::client_gone(uint32_t client) {
  // Its QPs that sent to other hosts: their peers there fail, as a same-host peer would.
  for (auto it = outbound_.begin(); it != outbound_.end();) {
    if (it->second->info.owner == client) {
      Link* l = find_link(it->second->link_id);
      if (l && it->second->info.type != IBV_QPT_UD) {
        wire::PeerGone g{it->second->qpn, 0};
        l->send(wire::Type::kPeerGone, &g, sizeof(g));
      }
      if (l && l->routed_qps) --l->routed_qps;
      it = outbound_.erase(it);
    } else {
      ++it;
    }
  }
  // Its QPs that other hosts sent to: the senders' QPs fail.
  for (auto it = inbound_.begin(); it != inbound_.end();) {
    Inbound& in = *it->second;
    bool gone = in.owner == client;
    if (!gone) {
      ++it;
      continue;
    }
    if (Link* l = find_link(in.link_id)) {
      wire::PeerGone g{in.src_qpn, 0};
      l->send(wire::Type::kPeerGone, &g, sizeof(g));
    }
    held_count_ -= in.held.size();
    it = inbound_.erase(it);
  }
  for (auto it = ud_targets_.begin(); it != ud_targets_.end();)
    it = it->second.peer->client_id() == client ? ud_targets_.erase(it) : std::next(it);
  if (auto it = peers_.find(client); it != peers_.end()) {
    graveyard_.push_back(std::move(it->second));
    peers_.erase(it);
  }
}

int Router::send_cm_to_ip(uint32_t dst_ipv4, const wire::Cm& m) {
  HostEntry h;
  Lookup r = dir_.host_of(dst_ipv4, &h);
  if (r == Lookup::kUnavailable) return EAGAIN;
  if (r == Lookup::kNotFound || h.host_id == cfg_.host_id) return EHOSTUNREACH;
  return send_cm_to_host(h.host_id, m);
}

int Router::send_cm_to_host(uint32_t host_id, const wire::Cm& m) {
  int err = 0;
  Link* link = outbound_link(host_id, &err);
  if (!link) return err;
  return link->send(wire::Type::kCm, &m, sizeof(m)) ? 0 : EAGAIN;
}

std::vector<Router::LinkInfo> Router::links() const {
  std::vector<LinkInfo> out;
  for (auto& [id, l] : links_)
    out.push_back(
        {l->host_id, l->outbound(), l->connected(), l->peer_addr, l->bytes_in, l->bytes_out});
  return out;
}

void Router::on_frame(Link& link, wire::Type type, const uint8_t* body, uint32_t payload,
                      PayloadDest& dest) {
  switch (type) {
    case wire::Type::kHello:
      return on_hello(link, wire::read<wire::Hello>(body));
    case wire::Type::kPing:
      link.send(wire::Type::kPong, body, sizeof(wire::Ping));
      return;
    case wire::Type::kPong:
      return;
    case wire::Type::kConnect:
      return on_connect(link, wire::read<wire::Connect>(body));
    case wire::Type::kConnectRep:
      return on_connect_rep(link, wire::read<wire::ConnectRep>(body));
    case wire::Type::kRequest:
      return on_request(link, wire::read<wire::Request>(body), payload, dest);
    case wire::Type::kResponse:
      return on_response(link, wire::read<wire::Response>(body), payload, dest);
    case wire::Type::kPeerGone:
      return on_peer_gone(link, wire::read<wire::PeerGone>(body));
    case wire::Type::kCm: {
      wire::Cm m = wire::read<wire::Cm>(body);
      if (m.len <= sizeof(m.body) && hooks_.on_cm) hooks_.on_cm(link.host_id, m);
      return;
    }
  }
}

void Router::on_hello(Link& link, const wire::Hello& h) {
  if (h.magic != wire::kMagic || h.version != wire::kVersion) return;
  link.host_id = h.host_id;
  link.peer_boot = h.boot;
  LOG_INFO("router: link %u from host %u", link.id(), h.host_id);
}

void Router::on_connect_rep(Link& link, const wire::ConnectRep& r) {
  auto it = connects_.find(r.req_id);
  if (it == connects_.end()) return;
  PendingConnect pc = std::move(it->second);
  connects_.erase(it);
  if (r.status != 0) return pc.done(r.status, r.qp_type);
  if (pc.qp.type == IBV_QPT_UD) {
    if (auto ex = outbound_.find(pc.qpn); ex != outbound_.end()) {
      // UD: one queue for every destination; this one is reached on this link.
      ex->second->ud_links[pc.dst_ipv4] = link.id();
      return pc.done(0, r.qp_type);
    }
  }
  // The QP's work goes to the router from now on.
  std::unique_ptr<Outbound> o;
  if (int err = attach_outbound(pc, &o)) return pc.done(err, 0);
  if (pc.qp.type != IBV_QPT_UD) {
    o->link_id = link.id();
    ++link.routed_qps;
  } else {
    o->ud_links[pc.dst_ipv4] = link.id();
  }
  outbound_[pc.qpn] = std::move(o);
  pc.done(0, r.qp_type);
}

int Router::attach_outbound(const PendingConnect& pc, std::unique_ptr<Outbound>* out) {
  auto o = std::make_unique<Outbound>();
  o->qpn = pc.qpn;
  o->info = pc.qp;
  o->dst_qpn = pc.dst_qpn;
  auto p = peer(pc.qp.owner);
  if (!p) return EIO;
  o->peer = p;
  uint8_t* base = p->base();
  uint64_t size = p->size();
  if (!shm::offset_ok(size, pc.qp.arena_offset, sizeof(shm::QpShared))) return EPROTO;
  o->qp = reinterpret_cast<shm::QpShared*>(base + pc.qp.arena_offset);
  uint32_t sq_off = o->qp->sq_offset, cq_off = o->qp->send_cq_offset;
  if (!shm::offset_ok(size, sq_off, sizeof(shm::SendQueue)) ||
      shm::attach_cq(p, cq_off, o->cq, o->cq_efd) != 0)
    return EPROTO;
  o->sq = reinterpret_cast<shm::SendQueue*>(base + sq_off);
  uint32_t cap = o->sq->capacity, esz = o->sq->entry_size;
  uint32_t max_sge = o->sq->max_sge, max_inline = o->sq->max_inline;
  if (cap == 0 || (cap & (cap - 1)) || max_sge > shm::kMaxSendSge || max_inline > 4096 ||
      esz != shm::route_wqe_size(max_sge, max_inline) ||
      !shm::offset_ok(size, sq_off, sizeof(shm::SendQueue) + uint64_t(cap) * esz))
    return EPROTO;
  o->sq_mask = cap - 1;
  o->esz = esz;
  o->max_sge = max_sge;
  o->max_inline = max_inline;
  // Continue where the QP is now: anything it posted before goes out in order.
  o->sent = o->done = o->sq->done.load(std::memory_order_acquire);
  *out = std::move(o);
  return 0;
}

void Router::on_peer_gone(Link& link, const wire::PeerGone& g) {
  if (link.outbound()) {
    // The destination of our QP died.
    auto it = outbound_.find(g.qpn);
    if (it != outbound_.end() && it->second->link_id == link.id()) {
      LOG_INFO("router: QP 0x%x: its peer on host %u is gone", g.qpn, link.host_id);
      abort_qp(*it->second, IBV_WC_WR_FLUSH_ERR, true);
    }
    return;
  }
  // A QP of the other host that sent to ours died.
  auto it = inbound_.find(inbound_key(link.id(), g.qpn));
  if (it == inbound_.end()) return;
  LocalQp q;
  if (hooks_.find_qp(it->second->dst_qpn, &q))
    hooks_.qp_fatal(q.owner, it->second->dst_qpn, proto::FatalReason::kPeerGone);
  held_count_ -= it->second->held.size();
  inbound_.erase(it);
}

}  // namespace vrdma::daemon
