// The direct path's control side in vrdmad: each container's direct port, the tickets, the
// connections this daemon opens from its containers and hands over, and the probe that makes a
// connection between two containers of this host cross the pod network first.
//
// A connection between containers (on two hosts, or on one) is set up over the pod network,
// between their addresses, to the destination's direct port (--direct-port, 4791 by default):
// a firewall rule or NetworkPolicy that drops that traffic makes the connection fail as a fabric
// that drops packets would (the QP's requests end with RETRY_EXC_ERR), and its absence lets the
// next connection through. Across hosts the data then flows on that connection between the two
// processes; on one host it still moves through shared memory, once the probe got through.
//
// Who may connect: the source's host issues a ticket (16 random bytes) for exactly one source
// QP at its container's address, one destination QP at its address and one connection; the
// destination's host keeps it (router to router, over their authenticated links). The
// destination's vrdmad reads the connection's first frame (DirectHello) and hands the
// connection to the destination QP's process only when it presents a kept ticket, from the
// ticket's source address, for the ticket's QPs; the ticket is taken whatever follows. A pod
// that connects to another container's direct port with no ticket, a replayed or guessed one,
// or a forged source address, gets its connection closed and nothing else.
#include <arpa/inet.h>
#include <errno.h>
#include <string.h>
#include <linux/netlink.h>
#include <sys/socket.h>
#include <sys/time.h>

#include "common/address.h"
#include "common/clock.h"
#include "common/log.h"
#include "daemon/core/daemon.h"

namespace vrdma::daemon {

namespace {

constexpr int64_t kTicketNs = 30'000'000'000;  // a ticket nobody presented is forgotten
constexpr int64_t kDialNs = 500'000'000;       // a handshake that the far end does not answer
// After a dial failed, ConnectQp of that QP answers "not ready" at once for this long (the QP
// retries on its own timer; each retry does not wait for another dial).
constexpr int64_t kFailedNs = 500'000'000;
// How often the kernel's statistics of the direct path's sockets are read (a connection that
// closes loses what it moved since the last reading from the figures).
constexpr int64_t kDirectStatsNs = 1'000'000'000;

bool connected_type(uint32_t t) {
  return t == static_cast<uint32_t>(proto::QpType::kRc) ||
         t == static_cast<uint32_t>(proto::QpType::kUc);
}

void answer(int fd, uint8_t status) {
  [[maybe_unused]] ssize_t n = ::send(fd, &status, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
}

constexpr const char* kDirectWhy = "same tenant on another host: straight over the pod network";

// The reply that puts a QP on the direct path: the destination's QP type and process.
proto::ConnectQpRep direct_reply(uint32_t dst_type, uint64_t dst_key) {
  proto::ConnectQpRep rep{};
  rep.peer_qp_type = dst_type;
  rep.routed = 1;
  rep.direct = 1;
  rep.link_key = dst_key;
  return rep;
}

}  // namespace

// ---- each container's direct port ----------------------------------------------------------

void Daemon::direct_port_open(Client& c) {
  if (!direct_ || c.direct_port || !c.identified || c.ident.host || c.ident.anonymous ||
      !c.ident.ipv4 || c.ident.ipv4 == htonl(INADDR_LOOPBACK))
    return;
  c.direct_port = true;
  while (!c.direct_key) memcpy(&c.direct_key, new_ticket().data(), sizeof(c.direct_key));
  DirectListener& l = direct_ports_[c.ident.netns];
  if (l.clients++ > 0) return;
  int err = 0;
  l.diag = identity_.socket_in(c.ident.netns, AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, &err,
                               NETLINK_SOCK_DIAG);
  if (l.diag)
    l.destroyed = identity_.socket_in(c.ident.netns, AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, &err,
                                      NETLINK_SOCK_DIAG);
  if (l.destroyed && (err = subscribe_destroyed(l.destroyed.get())) != 0) l.destroyed.reset();
  if (l.diag) {
    const timeval wait{0, 200'000};  // a dump of a namespace's sockets takes microseconds
    ::setsockopt(l.diag.get(), SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof(wait));
  }
  if (!l.diag || !l.destroyed)
    LOG_WARN("container %s: %s for its direct path: %s", c.ident.container.c_str(),
             l.diag ? "no final figures of closed connections" : "no socket statistics",
             strerror(err));
  if (auto carried = direct_carried_.find(c.ident.netns); carried != direct_carried_.end()) {
    l.traffic.carry(carried->second);
    direct_carried_.erase(carried);
  }
  err = 0;
  UniqueFd s = identity_.socket_in(c.ident.netns, AF_INET,
                                   SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, &err);
  if (s) l.id = direct_->listen(std::move(s), c.ident.ipv4, cfg_.direct_port, &err);
  if (!l.id)
    LOG_WARN("container %s (%s): no direct port %u: %s; its connections go through the routers "
             "and are not checked against the pod network's rules",
             c.ident.container.c_str(), ipv4_text(c.ident.ipv4).c_str(), cfg_.direct_port,
             strerror(err));
}

void Daemon::direct_port_release(Client& c) {
  if (!c.direct_port) return;
  c.direct_port = false;
  auto it = direct_ports_.find(c.ident.netns);
  if (it == direct_ports_.end()) return;
  // A reading as the process goes: its connections, closing now, are mostly still there.
  if (it->second.diag) sample_direct_traffic(it->second);
  if (--it->second.clients > 0) return;
  if (it->second.id) direct_->unlisten(it->second.id);
  if (it->second.diag) {
    constexpr size_t kMaxCarried = 4096;
    if (direct_carried_.size() >= kMaxCarried) direct_carried_.erase(direct_carried_.begin());
    direct_carried_[c.ident.netns] = it->second.traffic.totals();
  }
  direct_ports_.erase(it);
}

void Daemon::sample_direct_traffic(int64_t now, bool force) {
  if (direct_ports_.empty() || (!force && now < next_direct_stats_ns_)) return;
  next_direct_stats_ns_ = now + kDirectStatsNs;
  for (auto& [ns, l] : direct_ports_)
    if (l.diag) sample_direct_traffic(l);
}

void Daemon::sample_direct_traffic(DirectListener& l) {
  std::map<uint64_t, SocketBytes> destroyed, live;
  if (l.destroyed) read_destroyed(l.destroyed.get(), cfg_.direct_port, destroyed);
  if (int e = read_port_sockets(l.diag.get(), cfg_.direct_port, live)) {
    LOG_DEBUG("direct path statistics: %s", strerror(e));
    return;
  }
  l.traffic.update(destroyed, live);
}

bool Daemon::direct_traffic_of(const NetnsId& ns, SocketBytes* totals,
                               size_t* connections) const {
  auto it = direct_ports_.find(ns);
  if (it == direct_ports_.end() || !it->second.diag) return false;
  *totals = it->second.traffic.totals();
  *connections = it->second.traffic.connections();
  return true;
}

bool Daemon::has_direct_port(const NetnsId& ns) const {
  auto it = direct_ports_.find(ns);
  return it != direct_ports_.end() && it->second.id != 0;
}

// ---- connections to other hosts ------------------------------------------------------------

const char* Daemon::routed_why(const Client& c, const QpRecord& local, uint32_t dst_ipv4) {
  if (!cfg_.direct_path) return "the direct path is off on this host (--no-direct-path)";
  if (!router_) return "no router";
  if (!connected_type(local.type)) return "UD and XRC QPs go through the routers";
  if (!has_direct_port(c.ident.netns)) return "the container has no direct port";
  if (tenant_of_address(dst_ipv4) != c.tenant) return "another tenant: mediated by the routers";
  if (cfg_.qos.container(c.ident.ipv4) != qos::Rule{} || cfg_.qos.tenant(c.tenant) != qos::Rule{})
    return "a QoS rule of vrdmad applies: the routers enforce it";
  return nullptr;
}

void Daemon::connect_direct(Client& c, const Decoded& d, const proto::ConnectQpReq& r,
                            uint32_t dst_ipv4) {
  const QpRecord* local = registry_.find_qp(r.local_qpn);
  if (auto f = direct_failed_.find(r.local_qpn); f != direct_failed_.end()) {
    if (now_ns() < f->second) return void(reply_error(c, d, EAGAIN));
    direct_failed_.erase(f);
  }
  registry_.set_peer(r.local_qpn, dst_ipv4, r.dest_qpn);
  LocalQp q;
  q.owner = c.id;
  q.arena_offset = local->arena_offset;
  q.type = local->type;
  q.ipv4 = c.ident.ipv4;
  q.tenant = c.tenant;
  const TicketId ticket = new_ticket();
  router_->connect_direct(
      r.local_qpn, q, dst_ipv4, r.dest_qpn, ticket,
      [this, id = c.id, d, r, dst_ipv4, ticket](int status, uint32_t type, uint16_t port,
                                                uint64_t key) {
        Client* cl = find_live(id);
        if (!cl || !registry_.find_qp(r.local_qpn)) return;
        if (status == wire::kNoDirect) {
          registry_.set_path(r.local_qpn, ConnectPath::kRouted,
                             "the destination's host takes no direct connection for it");
          return connect_routed(*cl, d, r, dst_ipv4);
        }
        if (status) {
          LOG_DEBUG("client %u: direct connect of QP 0x%x failed: %s", id, r.local_qpn,
                    strerror(status));
          return void(send(*cl, d.op, d.seq, status, nullptr, 0));
        }
        if (!(r.flags & proto::kConnectNewLink) && cl->direct_links.count(key)) {
          // The client has a connection to that process: the QP joins it with the ticket.
          registry_.set_path(r.local_qpn, ConnectPath::kDirect, kDirectWhy);
          proto::ConnectQpRep rep = direct_reply(type, key);
          memcpy(rep.ticket, ticket.data(), sizeof(rep.ticket));
          return void(send(*cl, d.op, d.seq, 0, &rep, sizeof(rep)));
        }
        dial_direct(*cl, d, r, dst_ipv4, port, ticket, type, key);
      });
}

void Daemon::dial_direct(Client& c, const Decoded& d, const proto::ConnectQpReq& r,
                         uint32_t dst_ipv4, uint16_t port, const TicketId& ticket,
                         uint32_t dst_type, uint64_t dst_key) {
  const QpRecord* local = registry_.find_qp(r.local_qpn);
  int err = 0;
  UniqueFd s = identity_.socket_in(c.ident.netns, AF_INET,
                                   SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, &err);
  if (!s) {
    LOG_WARN("client %u: no socket in its container for a direct connection: %s", c.id,
             strerror(err));
    return void(reply_error(c, d, EAGAIN));
  }
  wire::DirectHello h{wire::kDirectMagic, wire::kVersion, {},          c.ident.ipv4, dst_ipv4,
                      r.local_qpn,        r.dest_qpn,     local->type, 0};
  memcpy(h.ticket, ticket.data(), sizeof(h.ticket));
  direct_->dial(std::move(s), dst_ipv4, port, h, now_ns() + kDialNs,
                [this, id = c.id, d, qpn = r.local_qpn, dst_ipv4, port, dst_type, dst_key](
                    int status, UniqueFd fd) {
                  Client* cl = find_live(id);
                  if (!cl || !registry_.find_qp(qpn)) return;
                  if (status) {
                    // As a fabric that drops packets: the QP finds its destination not ready
                    // and fails with RETRY_EXC_ERR once its timeout and retries are spent.
                    LOG_INFO("client %u: QP 0x%x: no direct connection to %s:%u: %s", id, qpn,
                             ipv4_text(dst_ipv4).c_str(), port, strerror(status));
                    direct_failed_[qpn] = now_ns() + kFailedNs;
                    return void(send(*cl, d.op, d.seq, EAGAIN, nullptr, 0));
                  }
                  registry_.set_path(qpn, ConnectPath::kDirect, kDirectWhy);
                  proto::ConnectQpRep rep = direct_reply(dst_type, dst_key);
                  cl->direct_links.insert(dst_key);
                  const int f = fd.get();
                  send(*cl, d.op, d.seq, 0, &rep, sizeof(rep), std::span<const int>(&f, 1));
                });
}

int Daemon::keep_remote_ticket(const wire::Direct& d, const LocalQp* dst, uint16_t* port,
                               uint64_t* key) {
  const bool probe = (d.flags & wire::kDirectProbe) != 0;
  // A probe is the pod network's say on rdma_cm's connections, whatever path they take after.
  if (!cfg_.direct_path && !probe) return wire::kNoDirect;
  Client* owner = dst ? find_live(dst->owner) : container_at(d.dst_ipv4);
  if (!owner || !has_direct_port(owner->ident.netns)) return wire::kNoDirect;
  if (probe && !allow_.may_pair(tenant_of_address(d.src_ipv4), owner->tenant) &&
      tenant_of_address(d.src_ipv4) != owner->tenant)
    return ECONNREFUSED;
  Ticket t;
  t.src_ipv4 = d.src_ipv4;
  t.src_qpn = d.src_qpn;
  t.dst_ipv4 = d.dst_ipv4;
  t.dst_qpn = d.dst_qpn;
  t.qp_type = d.qp_type;
  t.dst_owner = owner->id;
  t.probe = probe;
  const int64_t now = now_ns();
  t.expires_ns = now + kTicketNs;
  TicketId id;
  memcpy(id.data(), d.ticket, id.size());
  if (int err = tickets_.keep(id, t, now)) return err;
  *port = cfg_.direct_port;
  *key = owner->direct_key;
  return 0;
}

void Daemon::handle(Client& c, const Decoded& d, const proto::DirectTakeReq& r) {
  // A QP pair joins a direct connection the client has: its ticket, for a QP of the client,
  // from the address the connection comes from.
  wire::DirectHello h{wire::kDirectMagic, wire::kVersion, {},      r.peer_ipv4, c.ident.ipv4,
                      r.src_qpn,          r.dst_qpn,      r.qp_type, 0};
  memcpy(h.ticket, r.ticket, sizeof(h.ticket));
  const char* why = nullptr;
  auto t = tickets_.take(h, r.peer_ipv4, c.ident.ipv4, now_ns(), &why);
  if (t && (t->probe || t->dst_owner != c.id)) why = "a ticket for another process's QP";
  if (!t || why) {
    LOG_INFO("client %u: a QP of %s joining a direct connection refused: %s", c.id,
             ipv4_text(r.peer_ipv4).c_str(), why ? why : "");
    return void(reply_error(c, d, EACCES));
  }
  send(c, d.op, d.seq, 0, nullptr, 0);
}

// ---- connections that arrive at a direct port ----------------------------------------------

void Daemon::direct_arrival(DirectPort::Arrival& a) {
  const char* why = nullptr;
  auto t = tickets_.take(a.hello, a.peer_ipv4, a.listener_ipv4, now_ns(), &why);
  if (!t) {
    LOG_INFO("direct port of %s: a connection from %s refused: %s",
             ipv4_text(a.listener_ipv4).c_str(), ipv4_text(a.peer_ipv4).c_str(), why);
    return;  // closed
  }
  if (t->probe) return answer(a.fd.get(), 0);
  const QpRecord* q = registry_.find_qp(t->dst_qpn);
  Client* owner = q ? find_live(q->owner) : nullptr;
  if (!owner || owner->id != t->dst_owner || owner->ident.ipv4 != t->dst_ipv4) {
    LOG_INFO("direct port of %s: QP 0x%x is gone: the connection from %s is closed",
             ipv4_text(a.listener_ipv4).c_str(), t->dst_qpn, ipv4_text(a.peer_ipv4).c_str());
    return;
  }
  proto::DirectAcceptedEvent ev{t->dst_qpn, t->src_ipv4, t->src_qpn, q->type};
  const int fd = a.fd.get();
  if (!send(*owner, proto::Op::kDirectAccepted, 0, 0, &ev, sizeof(ev),
            std::span<const int>(&fd, 1)))
    return;
  LOG_DEBUG("direct port of %s: QP 0x%x of %s connected to QP 0x%x",
            ipv4_text(a.listener_ipv4).c_str(), t->src_qpn, ipv4_text(t->src_ipv4).c_str(),
            t->dst_qpn);
  answer(fd, 0);
}

void Daemon::direct_qp_freed(uint32_t qpn) {
  direct_failed_.erase(qpn);
  for (auto it = probes_.begin(); it != probes_.end();)
    it = it->first.first == qpn || it->first.second == qpn ? probes_.erase(it) : std::next(it);
}

// ---- connections on this host: the pod network's say ----------------------------------------

Client* Daemon::container_at(uint32_t ipv4) {
  for (auto& [id, cp] : clients_)
    if (!cp->doomed && cp->hello && cp->direct_port && cp->ident.ipv4 == ipv4) return cp.get();
  return nullptr;
}

void Daemon::probe(Client& c, uint32_t src_qpn, uint32_t dst_ipv4, uint32_t dst_qpn,
                   uint32_t qp_type, std::function<void(int status)> done) {
  const int64_t now = now_ns();
  auto dial = [this, id = c.id, src_qpn, dst_ipv4, dst_qpn, qp_type, done](
                  const TicketId& ticket, uint16_t port) {
    Client* cl = find_live(id);
    if (!cl) return;
    int err = 0;
    UniqueFd s = identity_.socket_in(cl->ident.netns, AF_INET,
                                     SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, &err);
    if (!s) return done(EAGAIN);
    wire::DirectHello h{wire::kDirectMagic, wire::kVersion, {}, cl->ident.ipv4, dst_ipv4,
                        src_qpn,           dst_qpn,        qp_type, 0};
    memcpy(h.ticket, ticket.data(), sizeof(h.ticket));
    direct_->dial(std::move(s), dst_ipv4, port, h, now_ns() + kDialNs,
                  [done](int status, UniqueFd) { done(status); });
  };
  const TicketId id = new_ticket();
  if (Client* owner = container_at(dst_ipv4)) {
    // A container of this host: this daemon keeps the ticket its own dial presents.
    if (!has_direct_port(owner->ident.netns)) return done(0);  // nothing to ask
    Ticket t;
    t.src_ipv4 = c.ident.ipv4;
    t.src_qpn = src_qpn;
    t.dst_ipv4 = dst_ipv4;
    t.dst_qpn = dst_qpn;
    t.qp_type = qp_type;
    t.dst_owner = owner->id;
    t.probe = true;
    t.expires_ns = now + kTicketNs;
    if (tickets_.keep(id, t, now) != 0) return done(EAGAIN);
    return dial(id, cfg_.direct_port);
  }
  if (!router_) return done(0);
  // Another host's: it keeps the ticket (the router's kDirect, as a probe).
  LocalQp q;
  q.owner = c.id;
  q.type = qp_type;
  q.ipv4 = c.ident.ipv4;
  q.tenant = c.tenant;
  router_->connect_direct(
      src_qpn, q, dst_ipv4, dst_qpn, id,
      [this, id, dial, done](int status, uint32_t, uint16_t port, uint64_t) {
        if (status == wire::kNoDirect) return done(0);  // no direct port there to ask
        if (status) return done(status);
        dial(id, port);
      },
      wire::kDirectProbe);
}

void Daemon::connect_cm(Client& c, const Decoded& d, const proto::CmConnectReq& r) {
  if (!direct_ || !has_direct_port(c.ident.netns))
    return cm_->on_request(cm_caller(c, d), r);
  probe(c, r.local_qpn, r.dst_ipv4, 0, r.qp_type, [this, id = c.id, d, r](int status) {
    Client* cl = find_live(id);
    if (!cl) return;
    if (status) {
      // As a fabric that drops the request: the connector hears RDMA_CM_EVENT_UNREACHABLE.
      LOG_INFO("client %u: rdma_cm connect to %s: the pod network does not let it through "
               "(port %u): %s",
               id, ipv4_text(r.dst_ipv4).c_str(), cfg_.direct_port, strerror(status));
      return void(reply_error(*cl, d, EHOSTUNREACH));
    }
    cm_->on_request(cm_caller(*cl, d), r);
  });
}

bool Daemon::probe_local(Client& c, const Decoded& d, const proto::ConnectQpReq& r,
                         const QpRecord& local, const Client& owner) {
  if (!direct_ || !connected_type(local.type) || !has_direct_port(c.ident.netns) ||
      !has_direct_port(owner.ident.netns) || c.ident.ipv4 == owner.ident.ipv4)
    return true;
  const auto key = std::make_pair(r.local_qpn, r.dest_qpn);
  if (auto it = probes_.find(key); it != probes_.end()) {
    if (it->second == 0) return true;  // got through
    if (now_ns() < it->second) {
      reply_error(c, d, EAGAIN);  // did not, lately
      return false;
    }
    probes_.erase(it);
  }
  if (probing_.count(key)) {
    reply_error(c, d, EAGAIN);
    return false;
  }
  probing_.insert(key);
  probe(c, r.local_qpn, owner.ident.ipv4, r.dest_qpn, local.type,
        [this, id = c.id, d, r, key, dst = owner.ident.ipv4](int status) {
          probing_.erase(key);
          probes_[key] = status ? now_ns() + kFailedNs : 0;
          if (status)
            LOG_INFO("client %u: QP 0x%x cannot reach %s over the pod network (port %u): %s", id,
                     r.local_qpn, ipv4_text(dst).c_str(), cfg_.direct_port, strerror(status));
          Client* cl = find_live(id);
          if (!cl) return;
          if (status) return void(reply_error(*cl, d, EAGAIN));
          handle(*cl, d, r);  // again, with the probe answered
        });
  return false;
}

}  // namespace vrdma::daemon
