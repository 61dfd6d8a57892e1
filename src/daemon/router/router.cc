// The router's control path and its loop; links are in router_links.cc, the data path in
// router_requester.cc and router_responder.cc.
#include "daemon/router/router.h"

#include <arpa/inet.h>
#include <errno.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "common/address.h"
#include "common/clock.h"
#include "common/log.h"
#include "daemon/router/router_state.h"

namespace vrdma::daemon {

namespace {

constexpr int64_t kConnectReplyNs = 3'000'000'000;  // a Connect without an answer fails
constexpr size_t kReceiveBudget = 128 * 1024;       // < kRoomToReceive of the smallest frames
constexpr uint32_t kRoomToReceive = 2048;           // every frame received may need a reply slot
constexpr uint64_t kTagListen = 0;
constexpr uint64_t kTagDoorbells = 1ull << 31;  // | client id

}  // namespace

Router::Router(const RouterConfig& cfg, Directory& dir, Hooks hooks, uint64_t boot,
               RouterShared shared)
    : cfg_(cfg),
      lim_(cfg_.limits),
      dir_(dir),
      hooks_(std::move(hooks)),
      boot_(boot),
      bells_(shared.bells ? std::move(shared.bells) : std::make_shared<DoorbellTable>()),
      limits_(shared.limits ? std::move(shared.limits) : std::make_shared<qos::LimitTable>()),
      fd_source_(std::make_unique<ClientFds>(*this)),
      req_env_(std::make_unique<ReqEnv>(*this)),
      resp_env_(std::make_unique<RespEnv>(*this)),
      requester_(*req_env_, lim_.wqes_per_pump),
      responder_(*resp_env_,
                 transport::ResponderLimits{lim_.max_connections_per_link,
                                            lim_.held_requests_per_connection,
                                            lim_.held_bytes_per_connection,
                                            lim_.held_requests_per_link,
                                            lim_.held_bytes_per_link}) {}

Router::~Router() {
  for (auto& [client, fd] : doorbells_) bells_->release(client);
}

int Router::start(int epoll_fd) {
  epoll_ = epoll_fd;
  if (cfg_.local_only) {
    LOG_INFO("router: for this host's mediated connections only (no links to other hosts)");
    return 0;
  }
  if (cfg_.plaintext) {
    LOG_WARN("router: --router-plaintext: links between hosts are neither authenticated nor "
             "encrypted (anyone who reaches the router port can pose as a host)");
  } else {
    if (cfg_.tls.ca.empty() || cfg_.tls.cert.empty() || cfg_.tls.key.empty()) {
      LOG_ERROR("router: TLS between routers needs --tls-ca, --tls-cert and --tls-key (or "
                "--router-plaintext to run without authentication and encryption)");
      return EINVAL;
    }
    std::string error;
    tls_ = TlsContext::load(cfg_.tls, &error);
    if (!tls_) {
      LOG_ERROR("router: TLS: %s", error.c_str());
      return EINVAL;
    }
    uint32_t id = 0;
    if (tls_->own_host_id(&id) && id != cfg_.host_id) {
      LOG_ERROR("router: certificate %s is host %u's, this is host %u", cfg_.tls.cert.c_str(), id,
                cfg_.host_id);
      return EINVAL;
    }
  }
  if (cfg_.listen.empty()) return 0;
  uint32_t ip;
  uint16_t port;
  if (!parse_ipv4_port(cfg_.listen, &ip, &port)) {
    LOG_ERROR("router: bad listen address %s (want a.b.c.d:port)", cfg_.listen.c_str());
    return EINVAL;
  }
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  sa.sin_addr.s_addr = ip;
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
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kTagBase | kTagListen;
  if (::epoll_ctl(epoll_, EPOLL_CTL_ADD, listen_.get(), &ev) < 0) return errno;
  LOG_INFO("router: listening on %s (%s)", cfg_.listen.c_str(),
           tls_ ? "mutual TLS 1.3" : "PLAINTEXT");
  return 0;
}

void Router::on_event(uint64_t tag, uint32_t events, int64_t now) {
  uint64_t sub = tag & 0xffffffffu;
  if (sub == kTagListen) return accept_links(now);
  if (sub & kTagDoorbells) {
    // Edge-triggered and never read: other router threads may watch it too (doorbells.h).
    auto it = doorbells_.find(static_cast<uint32_t>(sub & ~kTagDoorbells));
    if (it != doorbells_.end()) work_ring(it->first);
    return;
  }
  // A link's socket has bytes (or its end or an error): the next pass reads it. Room in a
  // full one: the next pass writes to it again.
  if (sub >= kTagLinks)
    if (Link* l = find_link(static_cast<uint32_t>(sub - kTagLinks))) {
      if (events & ~uint32_t(EPOLLOUT)) l->rx_ready = true;
      if ((events & (EPOLLOUT | EPOLLERR | EPOLLHUP)) && l->tx_blocked) {
        l->tx_blocked = false;
        update_watch(*l);
      }
    }
}

int Router::doorbell_for(uint32_t client) {
  if (client & kTagDoorbells) return -1;
  auto it = doorbells_.find(client);
  if (it != doorbells_.end()) return it->second;
  int fd = bells_->acquire(client);
  if (fd < 0) return -1;
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLET;
  ev.data.u64 = kTagBase | kTagDoorbells | client;
  if (::epoll_ctl(epoll_, EPOLL_CTL_ADD, fd, &ev) < 0) {
    bells_->release(client);
    return -1;
  }
  doorbells_.emplace(client, fd);
  return fd;
}

std::shared_ptr<shm::Peer> Router::peer(uint32_t client) {
  auto it = peers_.find(client);
  if (it != peers_.end() && !it->second->dead()) return it->second;
  auto p = std::make_shared<shm::Peer>(*fd_source_, client);
  // Frames in flight keep using what they translated; reclaim_mappings() frees it between.
  p->defer_retire();
  // An implicit ODP MR's range the owner is registering: this thread serves every QP of the
  // host, so it waits for it briefly only.
  p->set_odp_wait_us(50000);
  if (p->attach_arena() != 0) return nullptr;
  peers_[client] = p;
  return p;
}

Link* Router::find_link(uint32_t id) {
  auto it = links_.find(id);
  return it == links_.end() ? nullptr : it->second.get();
}

void Router::reclaim_mappings() {
  if (!graveyard_.empty()) return;
  for (auto& [id, l] : links_)
    if (l->tx_pending()) return;  // frames may send from clients' memory
  if (requester_.placing() || responder_.placing()) return;
  for (auto& [client, p] : peers_) p->reclaim();
  if (hooks_.reclaimed) hooks_.reclaimed();
}

bool Router::poll(int64_t now) {
  now_ = now;
  bool work = false;
  // Requests from our QPs.
  work |= pump_all(now);
  // Links: connect, handshake, write, read. The latency lane's first, so that what the
  // scheduler just let go ahead leaves at once, and what arrived on them is not left waiting
  // behind the bulk links' reads and writes (router_lanes.cc).
  for (auto& [id, l] : links_)
    if (l->lane == wire::kLatencyLane) work |= serve_link(*l, now);
  for (auto& [id, l] : links_)
    if (l->lane != wire::kLatencyLane) work |= serve_link(*l, now);
  close_doomed();
  if (!handed_links_.empty()) hand_over_links();
  responder_.retry_held(now, [this](uint32_t id) { return find_link(id); });
  if (!graveyard_.empty()) {
    bool idle = true;
    for (auto& [id, l] : links_) idle &= !l->tx_pending();
    if (idle) graveyard_.clear();
  }
  check_timeouts(now);
  work_pass_done();
  if (now >= next_check_ns_) {
    work_sweep();
    qos_prune(now);
    check_links(now);
    reclaim_mappings();
    next_check_ns_ = now + 100'000'000;
  }
  close_doomed();
  // Connection attempts that got no answer.
  expire_directs(now);
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

bool Router::serve_link(Link& link, int64_t now) {
  const uint32_t id = link.id();
  bool work = false;
  if (!link.open()) {
    progress_link(link, now);
    if (!link.open()) return false;
    work = true;
  }
  if (link.tx_pending() && !link.tx_blocked) {
    if (!flush_link(link, now)) {
      doom(id, "send failed");
      return work;
    }
    work = true;
  }
  // Requests (on links other hosts opened) each need room for their response; what comes
  // back on our own links needs none, and is always read: otherwise two full rings, ours of
  // requests and theirs of responses, would wait for each other.
  bool room = link.outbound() || link.has_room(kRoomToReceive);
  if (room != !link.rx_paused) set_rx_paused(link, !room);
  if (!room) return work;
  // Nothing arrived since its socket was last found empty (Link::rx_ready).
  if (!link.rx_ready && !link.rx_pending()) return work;
  uint64_t before = link.bytes_in;
  const char* why = nullptr;
  if (!link.receive(*this, kReceiveBudget, &why)) {
    doom(id, why ? why : "receive failed");
    return work;
  }
  if (link.bytes_in != before) {
    link.last_rx_ns = now;
    work = true;
  }
  if (link.tx_pending() && !link.tx_blocked && !flush_link(link, now)) doom(id, "send failed");
  return work;
}

int64_t Router::next_deadline(int64_t now) const {
  // Outstanding work, held requests, links being set up and pending connects need the clock;
  // open links need it now and then (idle links, hosts that left the directory).
  bool busy = responder_.held_count() || !connects_.empty() || !directs_.empty();
  for (auto& [id, l] : links_)
    busy |= !l->open() || (!l->outbound() && !l->authenticated) || l->tx_pending();
  for (const Outbound* o = work_head_; o; o = o->work_next) busy |= o->done != o->sent;
  // A flow held by its rate limit needs the clock when it may send again.
  if (qos_ready_ns_ >= 0) return std::clamp<int64_t>(qos_ready_ns_, now, now + 5'000'000);
  if (busy) return now + 5'000'000;
  return links_.empty() ? -1 : now + 1'000'000'000;
}

bool Router::prepare_sleep() {
  // QPs off the work list are armed already (router_worklist.cc). Those whose requests wait
  // for room in a full link are not: the room wakes this thread, which serves them then (and
  // their owners, seeing the router at work, need not ring, and may nap: poll_backoff.h).
  for (Outbound* o = work_head_; o; o = o->work_next) {
    o->waits_room = o->has_posted(o->sq->tail.load(std::memory_order_relaxed)) &&
                    waits_for_room(*o);
    if (!o->waits_room) o->sq->doorbell.store(1, std::memory_order_relaxed);
  }
  std::atomic_thread_fence(std::memory_order_seq_cst);
  for (Outbound* o = work_head_; o; o = o->work_next) {
    // Work posted (within what the queue can hold: a nonsense tail is not work).
    if (o->has_posted(o->sq->tail.load(std::memory_order_relaxed)) && !o->qos_held &&
        !o->waits_room)
      return false;
  }
  for (auto& [id, l] : links_)
    if ((l->tx_pending() && !l->tx_blocked) || (l->rx_pending() && !l->rx_paused)) return false;
  // Armed: those with nothing to do leave the list; a ring brings them back.
  for (Outbound* o = work_head_; o;) {
    Outbound* next = o->work_next;
    if (!has_work(*o)) work_remove(*o);
    o = next;
  }
  return true;
}

void Router::connect_qp(uint32_t qpn, const LocalQp& qp, uint32_t dst_ipv4, uint32_t dst_qpn,
                        ConnectDone done, int lane) {
  HostEntry h;
  Lookup r = dir_.host_of(dst_ipv4, &h);
  if (r == Lookup::kUnavailable) {
    LOG_WARN("router: cannot connect QP 0x%x: the directory is unavailable (%s)", qpn,
             dir_.describe().c_str());
    return done(EAGAIN, 0);
  }
  if (r == Lookup::kNotFound || h.host_id == cfg_.host_id) return done(EHOSTUNREACH, 0);
  int err = 0;
  const int cls = connect_class(qpn, qp);
  const uint32_t l = lane >= 0 ? static_cast<uint32_t>(lane) : connect_lane(qpn, qp, cls);
  Link* link = outbound_link(h.host_id, l, &err);
  if (!link) {
    LOG_WARN("router: no link to host %u: %s", h.host_id, strerror(err));
    return done(err, 0);
  }
  send_connect(*link, qpn, qp, cls, dst_ipv4, dst_qpn, std::move(done));
}

void Router::send_connect(Link& link, uint32_t qpn, const LocalQp& qp, int cls,
                          uint32_t dst_ipv4, uint32_t dst_qpn, ConnectDone done) {
  uint64_t id = next_req_++;
  wire::Connect c{id, qp.ipv4, dst_ipv4, qpn, dst_qpn, qp.type, 0};
  if (!link.send(wire::Type::kConnect, &c, sizeof(c))) return done(EAGAIN, 0);
  link.last_used_ns = now_ns();
  connects_[id] = PendingConnect{link.id(),      dst_ipv4, qpn,       qp, dst_qpn,
                                 now_ns() + kConnectReplyNs, std::move(done), cls, link.lane};
}

void Router::qp_freed(uint32_t qpn) {
  auto it = outbound_.find(qpn);
  if (it != outbound_.end()) {
    Outbound& o = *it->second;
    send_posted(o);
    if (Link* l = find_link(o.link_id); l && l->routed_qps) --l->routed_qps;
    erase_outbound(it);
  }
}

void Router::client_gone(uint32_t client) {
  // Its QPs that sent to other hosts: their peers there fail, as a same-host peer would.
  for (auto it = outbound_.begin(); it != outbound_.end();) {
    if (it->second->owner == client) {
      Link* l = find_link(it->second->link_id);
      if (l && it->second->type != IBV_QPT_UD) {
        wire::PeerGone g{it->second->qpn, 0};
        l->send(wire::Type::kPeerGone, &g, sizeof(g));
      }
      if (l && l->routed_qps) --l->routed_qps;
      it = erase_outbound(it);
    } else {
      ++it;
    }
  }
  // Its QPs that other hosts sent to: the senders' QPs fail.
  auto& inbound = responder_.conns();
  for (auto it = inbound.begin(); it != inbound.end();) {
    InConn& in = *it->second;
    if (in.owner != client) {
      ++it;
      continue;
    }
    Link* l = find_link(in.link_id);
    if (l) {
      wire::PeerGone g{in.src_qpn, 0};
      l->send(wire::Type::kPeerGone, &g, sizeof(g));
    }
    responder_.release_held(in, l);
    it = inbound.erase(it);
  }
  for (auto it = ud_targets_.begin(); it != ud_targets_.end();)
    it = it->second.peer->client_id() == client ? ud_targets_.erase(it) : std::next(it);
  if (auto it = peers_.find(client); it != peers_.end()) {
    graveyard_.push_back(std::move(it->second));
    peers_.erase(it);
  }
  if (auto it = doorbells_.find(client); it != doorbells_.end()) {
    ::epoll_ctl(epoll_, EPOLL_CTL_DEL, it->second, nullptr);
    bells_->release(client);
    doorbells_.erase(it);
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
  link->last_used_ns = now_ns();
  return link->send(wire::Type::kCm, &m, sizeof(m)) ? 0 : EAGAIN;
}

std::vector<Router::LinkInfo> Router::links() const {
  std::vector<LinkInfo> out;
  for (auto& [id, l] : links_) {
    LinkInfo i{l->host_id,          l->outbound(), l->open() && (l->outbound() || l->authenticated),
               l->peer_addr,        l->bytes_in,   l->bytes_out,
               l->ssl() != nullptr, l->ktls_send()};
    i.frames_in = l->frames_in();
    i.frames_out = l->frames_out();
    i.rtt_ns = l->rtt_ns;
    i.held_requests = l->held_requests;
    i.held_bytes = l->held_bytes;
    i.lane = l->lane;
    out.push_back(std::move(i));
  }
  return out;
}

std::map<uint32_t, std::pair<uint64_t, uint64_t>> Router::held_by_owner() const {
  std::map<uint32_t, std::pair<uint64_t, uint64_t>> out;
  for (const auto& [key, in] : responder_.conns()) {
    if (in->held.empty()) continue;
    auto& [n, bytes] = out[in->owner];
    n += in->held.size();
    bytes += in->held_bytes;
  }
  return out;
}

bool Router::on_frame(Link& link, wire::Type type, const uint8_t* body, uint32_t payload,
                      PayloadDest& dest, const char** why) {
  if (!link.outbound() && !link.authenticated) {
    // Nothing but a Hello from a link that has not said who it is.
    if (type != wire::Type::kHello) {
      *why = "a frame before Hello";
      return false;
    }
    return on_hello(link, wire::read<wire::Hello>(body), why);
  }
  // Requests, connects and rdma_cm messages come on the links other hosts opened; responses
  // and connect replies on ours.
  const bool in = !link.outbound();
  bool expected = true;
  switch (type) {
    case wire::Type::kHello:
      expected = false;
      break;
    case wire::Type::kConnect:
    case wire::Type::kRequest:
    case wire::Type::kCm:
      expected = in;
      break;
    case wire::Type::kDirect:
      expected = in && !link.self;
      break;
    case wire::Type::kConnectRep:
    case wire::Type::kResponse:
      expected = !in;
      break;
    case wire::Type::kDirectRep:
      expected = !in && !link.self;
      break;
    case wire::Type::kDirectHello:  // the direct path's own connections, never a router's
    case wire::Type::kClose:
    case wire::Type::kDirectAdd:
      expected = false;
      break;
    default:
      break;
  }
  if (!expected) {
    *why = "a frame of a type this side of the link does not take";
    return false;
  }
  if (type != wire::Type::kPing && type != wire::Type::kPong) link.last_used_ns = now_;
  switch (type) {
    case wire::Type::kHello:
    case wire::Type::kDirectHello:
    case wire::Type::kClose:
    case wire::Type::kDirectAdd:
      return false;
    case wire::Type::kDirect:
      on_direct(link, wire::read<wire::Direct>(body));
      return true;
    case wire::Type::kDirectRep:
      on_direct_rep(link, wire::read<wire::DirectRep>(body));
      return true;
    case wire::Type::kPing:
      link.send(wire::Type::kPong, body, sizeof(wire::Ping));
      return true;
    case wire::Type::kPong: {
      // The token of our pings is the time they were sent (router_requester.cc).
      int64_t sent = static_cast<int64_t>(wire::read<wire::Ping>(body).token);
      if (sent > 0 && sent <= now_ && sent == link.last_ping_ns) link.rtt_ns = now_ - sent;
      return true;
    }
    case wire::Type::kConnect:
      on_connect(link, wire::read<wire::Connect>(body));
      return true;
    case wire::Type::kConnectRep:
      on_connect_rep(link, wire::read<wire::ConnectRep>(body));
      return true;
    case wire::Type::kRequest: {
      const auto r = wire::read<wire::Request>(body);
      if (r.qp_type == IBV_QPT_UD && is_multicast_request(r))
        on_mcast_datagram(link, r, payload, dest);
      else
        responder_.on_request(link, r, payload, dest, now_);
      return true;
    }
    case wire::Type::kResponse:
      requester_.on_response(link, wire::read<wire::Response>(body), payload, dest, now_);
      return true;
    case wire::Type::kPeerGone:
      on_peer_gone(link, wire::read<wire::PeerGone>(body));
      return true;
    case wire::Type::kCm:
      if (hooks_.on_cm) hooks_.on_cm(link.host_id, wire::read<wire::Cm>(body));
      return true;
  }
  return true;
}

void Router::on_connect_rep(Link& link, const wire::ConnectRep& r) {
  auto it = connects_.find(r.req_id);
  // Only the host we asked answers.
  if (it == connects_.end() || it->second.link_id != link.id()) return;
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
  if (auto ex = outbound_.find(pc.qpn); ex != outbound_.end()) {
    // Connected again (after a reset): the earlier connection's link loses a user.
    if (Link* l = find_link(ex->second->link_id); l && l->routed_qps) --l->routed_qps;
  }
  qos_attach(*o);
  put_outbound(std::move(o));
  pc.done(0, r.qp_type);
}

void Router::on_peer_gone(Link& link, const wire::PeerGone& g) {
  if (link.outbound()) {
    // The destination of our QP died.
    auto it = outbound_.find(g.qpn);
    if (it != outbound_.end() && it->second->link_id == link.id()) {
      LOG_INFO("router: QP 0x%x: its peer on host %u is gone", g.qpn, link.host_id);
      requester_.abort(*it->second, IBV_WC_WR_FLUSH_ERR, true, proto::FatalReason::kPeerGone);
    }
    return;
  }
  // A QP of the other host that sent to ours died.
  auto& inbound = responder_.conns();
  auto it = inbound.find(inbound_key(link.id(), g.qpn));
  if (it == inbound.end()) return;
  // Its QP, if it agreed to that source (and no other link of that host carries it), failed.
  if (agreed_and_alone(*it->second)) {
    LocalQp q;
    if (hooks_.find_qp(it->second->dst_qpn, &q))
      hooks_.qp_fatal(q.owner, it->second->dst_qpn, proto::FatalReason::kPeerGone);
  }
  responder_.release_held(*it->second, &link);
  inbound.erase(it);
}

void Router::on_payload_data(Link& link, const uint8_t* data, size_t len) {
  responder_.on_payload_data(link, data, len);
}

void Router::on_payload(Link& link) {
  if (responder_.on_payload(link) || requester_.on_payload(link, now_)) return;
  auto it = mcast_rx_.find(link.id());
  if (it == mcast_rx_.end() || !it->second->active) return;
  it->second->active = false;
  deliver_multicast(it->second->req, it->second->data.data());
}

}  // namespace vrdma::daemon
