// The requests of the control protocol, one handler per op.
#include <arpa/inet.h>
#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "daemon/daemon.h"
#include "daemon/log.h"
#include "daemon/status.h"
#include "engine/shm_layout.h"

namespace vrdma::daemon {

namespace {

using proto::Op;

const char* op_name(Op op) {
  switch (op) {
    case Op::kHello:
      return "Hello";
    case Op::kPutFd:
      return "PutFd";
    case Op::kGetFd:
      return "GetFd";
    case Op::kAllocQpn:
      return "AllocQpn";
    case Op::kFreeQpn:
      return "FreeQpn";
    case Op::kConnectQp:
      return "ConnectQp";
    case Op::kAllocKey:
      return "AllocKey";
    case Op::kFreeKey:
      return "FreeKey";
    case Op::kStatus:
      return "Status";
    case Op::kDropFd:
      return "DropFd";
    case Op::kQpFatal:
      return "QpFatal";
    case Op::kCmListen:
      return "CmListen";
    case Op::kCmUnlisten:
      return "CmUnlisten";
    case Op::kCmResolve:
      return "CmResolve";
    case Op::kCmConnect:
      return "CmConnect";
    case Op::kCmAccept:
      return "CmAccept";
    case Op::kCmReject:
      return "CmReject";
    case Op::kCmRtu:
      return "CmRtu";
    case Op::kCmDisconnect:
      return "CmDisconnect";
    case Op::kCmRequest:
      return "CmRequest";
    case Op::kCmReply:
      return "CmReply";
    case Op::kCmRejected:
      return "CmRejected";
    case Op::kCmEstablished:
      return "CmEstablished";
    case Op::kCmDisconnected:
      return "CmDisconnected";
  }
  return "unknown";
}

template <size_t N>
void copy_name(char (&dst)[N], const std::string& src) {
  std::memset(dst, 0, N);
  std::memcpy(dst, src.data(), std::min(src.size(), N - 1));
}

bool is_eventfd(int fd) {
  char path[64], target[64] = {};
  std::snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
  ssize_t n = ::readlink(path, target, sizeof(target) - 1);
  return n > 0 && std::strcmp(target, "anon_inode:[eventfd]") == 0;
}

// ::ffff:a.b.c.d -> a.b.c.d in network byte order.
bool gid_ipv4(const uint8_t (&gid)[16], uint32_t* ipv4) {
  static const uint8_t kPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  if (std::memcmp(gid, kPrefix, sizeof(kPrefix)) != 0) return false;
  std::memcpy(ipv4, gid + 12, 4);
  return true;
}

bool gid_zero(const uint8_t (&gid)[16]) {
  return std::all_of(gid, gid + 16, [](uint8_t b) { return b == 0; });
}

}  // namespace

void Daemon::handle_packet(Client& c, Packet& p, int payload_len) {
  // Every descriptor that came with the packet is closed unless a handler takes it.
  UniqueFd fds[proto::kMaxFdsPerMessage];
  const int nfds = p.nfds;
  for (int i = 0; i < nfds; ++i) fds[i].reset(p.fds[i]);
  p.nfds = 0;

  size_t received =
      std::min<size_t>(static_cast<size_t>(std::max(payload_len, 0)), sizeof(p.payload));
  Decoded d =
      decode_request(p.header, std::span<const uint8_t>(p.payload, received), nfds, p.truncated);
  if (d.verdict == Verdict::kDrop) {
    LOG_WARN("client %u: malformed packet (%s)", c.id, d.reason);
    fail(c, std::string("dropped: malformed packet (") + d.reason + ")");
    return;
  }
  if (!c.hello && d.op != Op::kHello) {
    LOG_WARN("client %u: %s before Hello", c.id, op_name(d.op));
    reply_error(c, d, EPROTO);
    fail(c, "dropped: request before Hello");
    return;
  }
  if (d.verdict == Verdict::kMalformed) {
    ++c.protocol_errors;
    LOG_WARN("client %u: protocol error %d/%d: op %u: %s", c.id, c.protocol_errors,
             cfg_.max_protocol_errors, static_cast<unsigned>(p.header.op), d.reason);
    reply_error(c, d, d.error);
    if (c.protocol_errors >= cfg_.max_protocol_errors) fail(c, "dropped: too many protocol errors");
    return;
  }
  if (d.verdict == Verdict::kInvalid) {
    LOG_DEBUG("client %u: %s rejected: %s", c.id, op_name(d.op), d.reason);
    reply_error(c, d, d.error);
    return;
  }

  if (auto* r = std::get_if<proto::HelloReq>(&d.body))
    op_hello(c, d, *r);
  else if (auto* r = std::get_if<proto::PutFdReq>(&d.body))
    op_put_fd(c, d, *r, std::move(fds[0]));
  else if (auto* r = std::get_if<proto::GetFdReq>(&d.body))
    op_get_fd(c, d, *r);
  else if (auto* r = std::get_if<proto::AllocQpnReq>(&d.body))
    op_alloc_qpn(c, d, *r);
  else if (auto* r = std::get_if<proto::FreeQpnReq>(&d.body))
    op_free_qpn(c, d, *r);
  else if (auto* r = std::get_if<proto::ConnectQpReq>(&d.body))
    op_connect_qp(c, d, *r);
  else if (auto* r = std::get_if<proto::AllocKeyReq>(&d.body))
    op_alloc_key(c, d, *r);
  else if (auto* r = std::get_if<proto::FreeKeyReq>(&d.body))
    op_free_key(c, d, *r);
  else if (auto* r = std::get_if<proto::DropFdReq>(&d.body))
    op_drop_fd(c, d, *r);
  else if (std::holds_alternative<StatusReq>(d.body))
    op_status(c, d);
  else
    handle_cm(c, d);  // cm.cc
}

void Daemon::op_hello(Client& c, const Decoded& d, const proto::HelloReq& r) {
  if (!c.identified) {
    LOG_WARN("client %u: refused: %s", c.id, c.identify_error.c_str());
    reply_error(c, d, EACCES);
    fail(c, "dropped: cannot be identified");
    return;
  }
  if (c.hello) {
    reply_error(c, d, EALREADY);
    return;
  }
  c.hello = true;
  c.kind = r.kind;
  if (r.kind == static_cast<uint32_t>(proto::ClientKind::kVerbs) &&
      seen_ipv4_.insert(c.ident.ipv4).second && c.ident.ipv4 && !c.ident.host)
    directory_->publish_container(c.ident.ipv4, c.ident.container);
  proto::HelloRep rep{};
  rep.version = proto::kVersion;
  rep.client_id = c.id;
  rep.ipv4 = c.ident.ipv4;
  rep.host_id = cfg_.host_id;
  rep.node_guid = node_guid_for(c.ident.ipv4);
  rep.daemon_boot = boot_;
  copy_name(rep.device_name, "vrdma0");
  copy_name(rep.container, c.ident.container);
  LOG_DEBUG("client %u: hello kind=%s", c.id,
            r.kind == static_cast<uint32_t>(proto::ClientKind::kCli) ? "cli" : "verbs");
  send(c, Op::kHello, d.seq, 0, &rep, sizeof(rep));
}

void Daemon::op_put_fd(Client& c, const Decoded& d, const proto::PutFdReq& r, UniqueFd fd) {
  if (c.fds.count(r.fd_id)) return void(reply_error(c, d, EEXIST));
  if (c.fds.size() >= cfg_.max_fds_per_client) return void(reply_error(c, d, EMFILE));
  auto kind = static_cast<proto::FdKind>(r.kind);
  switch (kind) {
    case proto::FdKind::kArena:
      if (int err = c.arena.map(fd.get(), r.size); err != 0) {
        LOG_WARN("client %u: arena refused: %s", c.id, strerror(err));
        return void(reply_error(c, d, err));
      }
      break;
    case proto::FdKind::kMemory: {
      // Peers map it: it has to be a file (a memfd) at least as large as announced.
      struct stat st {};
      if (::fstat(fd.get(), &st) < 0 || !S_ISREG(st.st_mode) ||
          static_cast<uint64_t>(st.st_size) < r.size)
        return void(reply_error(c, d, EINVAL));
      break;
    }
    case proto::FdKind::kEvent:
      if (!is_eventfd(fd.get())) return void(reply_error(c, d, EINVAL));
      break;
  }
  FdEntry e;
  e.fd = std::move(fd);
  e.kind = kind;
  e.size = r.size;
  c.fds.emplace(r.fd_id, std::move(e));
  LOG_DEBUG("client %u: fd %u stored (kind %u, %llu bytes)", c.id, r.fd_id, r.kind,
            static_cast<unsigned long long>(r.size));
  send(c, Op::kPutFd, d.seq, 0, nullptr, 0);
}

void Daemon::op_drop_fd(Client& c, const Decoded& d, const proto::DropFdReq& r) {
  // The arena stays for the client's lifetime: the daemon's mapping of it and every QP's
  // shared state depend on it.
  if (r.fd_id == 0) return void(reply_error(c, d, EBUSY));
  int err = c.fds.erase(r.fd_id) ? 0 : ENOENT;
  send(c, Op::kDropFd, d.seq, err, nullptr, 0);
}

void Daemon::op_get_fd(Client& c, const Decoded& d, const proto::GetFdReq& r) {
  Client* owner = find_live(r.owner_client);
  if (!owner) return void(reply_error(c, d, ENOENT));
  bool allowed =
      owner == &c || (owner->tenant == c.tenant && registry_.has_link_to(c.id, owner->id));
  if (!allowed) {
    LOG_DEBUG("client %u: GetFd of client %u fd %u denied", c.id, owner->id, r.fd_id);
    return void(reply_error(c, d, EACCES));
  }
  auto it = owner->fds.find(r.fd_id);
  if (it == owner->fds.end()) return void(reply_error(c, d, ENOENT));
  int fd = it->second.fd.get();
  send(c, Op::kGetFd, d.seq, 0, nullptr, 0, std::span<const int>(&fd, 1));
}

void Daemon::op_alloc_qpn(Client& c, const Decoded& d, const proto::AllocQpnReq& r) {
  if (!c.arena.qp_offset_ok(r.arena_offset)) return void(reply_error(c, d, EINVAL));
  proto::AllocQpnRep rep{};
  if (int err =
          registry_.alloc_qpn(c.id, r.qp_type, r.arena_offset, cfg_.max_qps_per_client, &rep.qpn);
      err != 0)
    return void(reply_error(c, d, err));
  LOG_DEBUG("client %u: QP 0x%x (%s) at arena offset %u", c.id, rep.qpn, qp_type_name(r.qp_type),
            r.arena_offset);
  send(c, Op::kAllocQpn, d.seq, 0, &rep, sizeof(rep));
}

void Daemon::op_free_qpn(Client& c, const Decoded& d, const proto::FreeQpnReq& r) {
  int err = registry_.free_qpn(c.id, r.qpn);
  if (err == 0 && router_) router_->qp_freed(r.qpn);
  send(c, Op::kFreeQpn, d.seq, err, nullptr, 0);
}

void Daemon::route_remote(Client& c, const Decoded& d, const proto::ConnectQpReq& r,
                          uint32_t dest_ipv4) {
  if (!router_) return void(reply_error(c, d, EHOSTUNREACH));
  const QpRecord* local = registry_.find_qp(r.local_qpn);
  LocalQp q;
  q.owner = c.id;
  q.arena_offset = local->arena_offset;
  q.type = local->type;
  q.ipv4 = c.ident.ipv4;
  q.tenant = c.tenant;
  router_->connect_qp(
      r.local_qpn, q, dest_ipv4, r.dest_qpn,
      [this, id = c.id, seq = d.seq, op = d.op, qpn = r.local_qpn](int status, uint32_t type) {
        Client* cl = find_live(id);
        if (!cl) return;
        if (status) {
          LOG_DEBUG("client %u: routed connect of QP 0x%x failed: %s", id, qpn, strerror(status));
          send(*cl, op, seq, status, nullptr, 0);
          return;
        }
        proto::ConnectQpRep rep{};
        rep.peer_qp_type = type;
        rep.routed = 1;
        int fd = router_->doorbell_fd();
        send(*cl, op, seq, 0, &rep, sizeof(rep), std::span<const int>(&fd, 1));
      });
}

void Daemon::op_connect_qp(Client& c, const Decoded& d, const proto::ConnectQpReq& r) {
  const QpRecord* local = registry_.find_qp(r.local_qpn);
  if (!local || local->owner != c.id) return void(reply_error(c, d, EPERM));

  bool by_gid = !gid_zero(r.dest_gid);
  uint32_t gid_ip = 0;
  if (by_gid) {
    if (!gid_ipv4(r.dest_gid, &gid_ip)) return void(reply_error(c, d, ENOENT));
    bool ours = std::any_of(clients_.begin(), clients_.end(), [&](const auto& kv) {
      return !kv.second->doomed && kv.second->identified && kv.second->ident.ipv4 == gid_ip;
    });
    if (!ours) return route_remote(c, d, r, gid_ip);
  }
  // QPNs are unique per host: without a GID the QPN alone names a local QP. (A cross-host
  // router may later also resolve QPNs it knows from elsewhere; unknown ones are ENOENT.)
  const QpRecord* dest = registry_.find_qp(r.dest_qpn);
  Client* owner = dest ? find_live(dest->owner) : nullptr;
  if (!dest || !owner) return void(reply_error(c, d, ENOENT));
  if (by_gid && owner->ident.ipv4 != gid_ip) return void(reply_error(c, d, ENOENT));
  if (owner->tenant != c.tenant) {
    LOG_INFO("client %u: connect QP 0x%x -> 0x%x refused: tenant %s -> %s", c.id, r.local_qpn,
             r.dest_qpn, c.tenant.c_str(), owner->tenant.c_str());
    return void(reply_error(c, d, EACCES));
  }
  if (dest->type != local->type) return void(reply_error(c, d, EINVAL));
  registry_.link(r.local_qpn, r.dest_qpn);
  proto::ConnectQpRep rep{};
  rep.peer_client = owner->id;
  rep.peer_arena_offset = dest->arena_offset;
  rep.peer_qp_type = dest->type;
  LOG_DEBUG("client %u: QP 0x%x linked to client %u QP 0x%x", c.id, r.local_qpn, owner->id,
            r.dest_qpn);
  send(c, Op::kConnectQp, d.seq, 0, &rep, sizeof(rep));
}

void Daemon::op_alloc_key(Client& c, const Decoded& d, const proto::AllocKeyReq& r) {
  proto::AllocKeyRep rep{};
  if (int err = registry_.alloc_key(c.id, r.index, r.access, r.length, cfg_.max_keys_per_client,
                                    &rep.key);
      err != 0)
    return void(reply_error(c, d, err));
  send(c, Op::kAllocKey, d.seq, 0, &rep, sizeof(rep));
}

void Daemon::op_free_key(Client& c, const Decoded& d, const proto::FreeKeyReq& r) {
  int err = registry_.free_key(c.id, r.key);
  send(c, Op::kFreeKey, d.seq, err, nullptr, 0);
}

void Daemon::op_status(Client& c, const Decoded& d) {
  std::string text = status_text(c);
  send(c, Op::kStatus, d.seq, 0, text.data(), text.size());
}

bool Daemon::sees_everything(const Client& viewer) const {
  // The host's administrator: a client in the daemon's own network namespace running as
  // root or as the daemon's user. Everyone else sees only its own tenant.
  return viewer.ident.host && (viewer.ident.uid == 0 || viewer.ident.uid == ::geteuid());
}

std::string Daemon::status_text(const Client& viewer) {
  StatusInput in;
  in.pid = ::getpid();
  in.socket = cfg_.socket_path;
  in.host_id = cfg_.host_id;
  in.uptime_s = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::seconds>(
                                          std::chrono::steady_clock::now() - started_at_)
                                          .count());
  bool all = sees_everything(viewer);
  in.directory = directory_->describe();
  in.directory_available = directory_->available();
  in.directory_hosts = directory_->hosts_known();
  if (router_) {
    in.router = true;
    in.routed_qps = router_->routed_qps();
    if (all)
      for (const auto& l : router_->links())
        in.links.push_back({l.host_id, l.outbound, l.connected, l.addr, l.bytes_in, l.bytes_out});
  }
  in.scope = all ? "all" : "tenant:" + viewer.tenant;
  for (const auto& [id, cp] : clients_) {
    const Client& c = *cp;
    if (c.doomed || !c.identified) continue;
    ++in.clients_connected;
    if (!all && c.tenant != viewer.tenant) continue;
    StatusClient sc;
    sc.id = c.id;
    sc.pid = c.ident.pid;
    sc.uid = c.ident.uid;
    sc.container = c.ident.container;
    sc.ipv4 = c.ident.ipv4;
    sc.tenant = c.tenant;
    sc.kind = !c.hello                                                   ? "none"
              : c.kind == static_cast<uint32_t>(proto::ClientKind::kCli) ? "cli"
                                                                         : "verbs";
    sc.fds = c.fds.size();
    for (uint32_t qpn : registry_.qpns_of(c.id)) {
      const QpRecord* rec = registry_.find_qp(qpn);
      StatusQp q;
      q.qpn = qpn;
      q.type = rec->type;
      QpSnapshot snap;
      if (c.arena.read_qp(rec->arena_offset, &snap)) {
        q.have_state = true;
        q.state = snap.state;
        q.tx_ops = snap.tx_ops;
        q.tx_bytes = snap.tx_bytes;
        q.rx_ops = snap.rx_ops;
        q.rx_bytes = snap.rx_bytes;
        q.errors = snap.errors;
      }
      sc.qps.push_back(q);
    }
    for (uint32_t key : registry_.keys_of(c.id)) {
      const KeyRecord* k = registry_.find_key(key);
      sc.mrs.push_back({key, k->length, k->access});
    }
    in.clients.push_back(std::move(sc));
  }
  return render_status(in, proto::kMaxStatusText);
}

}  // namespace vrdma::daemon
