// The verbs requests of the control protocol: who the client is, the descriptors it hands
// over and asks for, QP numbers and connections between QPs, memory keys.
#include <arpa/inet.h>
#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>

#include "common/address.h"
#include "common/log.h"
#include "daemon/core/daemon.h"
#include "daemon/core/status.h"
#include "shm/layout.h"

namespace vrdma::daemon {

namespace {

using proto::Op;

template <size_t N>
void copy_name(char (&dst)[N], const std::string& src) {
  std::memset(dst, 0, N);
  std::memcpy(dst, src.data(), std::min(src.size(), N - 1));
}

}  // namespace

void Daemon::handle(Client& c, const Decoded& d, const proto::HelloReq& r) {
  if (!c.identified) {
    LOG_WARN("client %u: refused: %s", c.id, c.identify_error.c_str());
    reply_error(c, d, EACCES);
    schedule_drop(c, "dropped: cannot be identified");
    return;
  }
  if (c.hello) {
    reply_error(c, d, EALREADY);
    return;
  }
  const bool verbs = r.kind == static_cast<uint32_t>(proto::ClientKind::kVerbs);
  // A status-only client needs no device; a verbs client does.
  if (int err = c.refused ? c.refused : verbs ? admit_device(c) : 0) {
    reply_error(c, d, err);
    schedule_drop(c, std::string("dropped: refused (") + strerror(err) + ")");
    return;
  }
  c.hello = true;
  c.kind = r.kind;
  if (verbs) direct_port_open(c);
  if (verbs) idle_addresses_.erase(c.ident.ipv4);
  if (verbs) cm_->add_address(c.ident.ipv4);
  // Again for every program: the platform may have moved the container to another tenant
  // (publishing what is already published costs nothing).
  if (verbs && c.ident.ipv4 && !c.ident.host)
    directory_->publish_container(c.ident.ipv4, container_info(c));
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

void Daemon::handle(Client& c, const Decoded& d, const proto::PutFdReq& r) {
  UniqueFd fd = std::move(received_fds_[0]);
  if (c.fds.count(r.fd_id)) return void(reply_error(c, d, EEXIST));
  // Files anyone will map must be sealed memfds, mapped at their own size (grants.cc).
  ClientFd e;
  if (int err = accept_fd(c, r, fd, e); err != 0) {
    LOG_WARN("client %u: fd %u (kind %u) refused: %s", c.id, r.fd_id, r.kind, strerror(err));
    return void(reply_error(c, d, err));
  }
  if (int err = charge(c, Resource::kFds)) return void(reply_error(c, d, err));
  e.fd = std::move(fd);
  c.fds.emplace(r.fd_id, std::move(e));
  LOG_DEBUG("client %u: fd %u stored (kind %u, %llu bytes)", c.id, r.fd_id, r.kind,
            static_cast<unsigned long long>(r.size));
  send(c, Op::kPutFd, d.seq, 0, nullptr, 0);
}

void Daemon::handle(Client& c, const Decoded& d, const proto::DropFdReq& r) {
  // The arena stays for the client's lifetime: the daemon's mapping of it and every QP's
  // shared state depend on it.
  if (r.fd_id == 0) return void(reply_error(c, d, EBUSY));
  int err = c.fds.erase(r.fd_id) ? 0 : ENOENT;
  if (err == 0) release(c, Resource::kFds);
  send(c, Op::kDropFd, d.seq, err, nullptr, 0);
}

void Daemon::handle(Client& c, const Decoded& d, const proto::AllocQpnReq& r) {
  if (!c.arena.qp_offset_ok(r.arena_offset) ||
      !objects_ok(c, r.object_fd_id, r.srq_fd_id, r.notify_fd_id))
    return void(reply_error(c, d, EINVAL));
  proto::AllocQpnRep rep{};
  if (int err = charge(c, Resource::kQps)) return void(reply_error(c, d, err));
  if (int err = registry_.alloc_qpn(c.id, r.qp_type, r.arena_offset, SIZE_MAX, &rep.qpn)) {
    release(c, Resource::kQps);
    return void(reply_error(c, d, err));
  }
  registry_.set_objects(rep.qpn, r.object_fd_id, r.srq_fd_id, r.notify_fd_id, r.pd);
  LOG_DEBUG("client %u: QP 0x%x (%s) at arena offset %u", c.id, rep.qpn, qp_type_name(r.qp_type),
            r.arena_offset);
  send(c, Op::kAllocQpn, d.seq, 0, &rep, sizeof(rep));
}

void Daemon::handle(Client& c, const Decoded& d, const proto::FreeQpnReq& r) {
  if (metrics_ && registry_.find_qp(r.qpn) && registry_.qpns_of(c.id).count(r.qpn))
    metrics_retire(c, r.qpn);
  int err = registry_.free_qpn(c.id, r.qpn);
  if (err == 0) release(c, Resource::kQps);
  if (err == 0) direct_qp_freed(r.qpn);
  if (err == 0) xrc_qp_freed(r.qpn);
  if (err == 0) {
    auto changed = mcast_.qp_gone(r.qpn);
    if (!changed.empty()) publish_groups(c);
    mcast_changed(changed);
  }
  if (err == 0 && router_) {
    // The answer waits for the router: it first sends what the QP posted and it has not taken
    // yet (a UD QP's last datagrams), while the queue and the memory they name are still there.
    router_->qp_freed(r.qpn, [this, id = c.id, seq = d.seq] {
      if (Client* cl = find_live(id)) send(*cl, Op::kFreeQpn, seq, 0, nullptr, 0);
    });
    return;
  }
  send(c, Op::kFreeQpn, d.seq, err, nullptr, 0);
}

void Daemon::connect_routed(Client& c, const Decoded& d, const proto::ConnectQpReq& r,
                            uint32_t dest_ipv4, bool mediated) {
  RouterPool* router = mediated ? mediation_router() : router_.get();
  if (!router) return void(reply_error(c, d, EHOSTUNREACH));
  const QpRecord* local = registry_.find_qp(r.local_qpn);
  if (local->type != static_cast<uint32_t>(proto::QpType::kUd))
    registry_.set_peer(r.local_qpn, dest_ipv4, r.dest_qpn);
  if (mediated)
    registry_.set_path(r.local_qpn, ConnectPath::kMediated,
                       "another tenant that a rule lets it reach: vrdmad carries and checks it");
  LocalQp q;
  q.owner = c.id;
  q.arena_offset = local->arena_offset;
  q.type = local->type;
  q.ipv4 = c.ident.ipv4;
  q.tenant = c.tenant;
  router->connect_qp(mediated, r.local_qpn, q, dest_ipv4, r.dest_qpn,
                      [this, id = c.id, seq = d.seq, op = d.op, qpn = r.local_qpn](
                          int status, uint32_t type, int fd) {
                        Client* cl = find_live(id);
                        if (!cl) return;
                        if (status) {
                          LOG_DEBUG("client %u: routed connect of QP 0x%x failed: %s", id, qpn,
                                    strerror(status));
                          send(*cl, op, seq, status, nullptr, 0);
                          return;
                        }
                        // Each client its own doorbell: what one client does with its eventfd (read
                        // it, never ring it) concerns its own QPs alone. The router thread keeps it
                        // open while the client lives, and the client is alive here (its death
                        // reaches the router after this).
                        if (fd < 0) {
                          send(*cl, op, seq, EMFILE, nullptr, 0);
                          return;
                        }
                        proto::ConnectQpRep rep{};
                        rep.peer_qp_type = type;
                        rep.routed = 1;
                        send(*cl, op, seq, 0, &rep, sizeof(rep), std::span<const int>(&fd, 1));
                      });
}

void Daemon::handle(Client& c, const Decoded& d, const proto::ConnectQpReq& r) {
  const QpRecord* local = registry_.find_qp(r.local_qpn);
  if (!local || (local->owner != c.id && !holds_xrc_qp(c.id, r.local_qpn)))
    return void(reply_error(c, d, EPERM));

  bool by_gid = !gid_is_zero(r.dest_gid);
  uint32_t gid_ip = 0;
  if (by_gid) {
    if (!gid_to_ipv4(r.dest_gid, &gid_ip)) return void(reply_error(c, d, ENOENT));
    bool ours = std::any_of(clients_.begin(), clients_.end(), [&](const auto& kv) {
      return !kv.second->doomed && kv.second->identified && kv.second->ident.ipv4 == gid_ip;
    });
    // An XRC_RECV QP sends nothing: its RTR naming a sender on another host is its consent
    // (the router there carries that sender's requests, and this host's checks them).
    if (!ours && local->type == static_cast<uint32_t>(proto::QpType::kXrcRecv)) {
      registry_.set_peer(r.local_qpn, gid_ip, r.dest_qpn);
      return void(reply_error(c, d, EAGAIN));
    }
    if (!ours) {
      if (const char* why = routed_why(c, *local, gid_ip)) {
        registry_.set_path(r.local_qpn, ConnectPath::kRouted, why);
        return connect_routed(c, d, r, gid_ip);
      }
      return connect_direct(c, d, r, gid_ip);
    }
  }
  // QPNs are unique per host: without a GID the QPN alone names a local QP. (A cross-host
  // router may later also resolve QPNs it knows from elsewhere; unknown ones are ENOENT.)
  const QpRecord* dest = registry_.find_qp(r.dest_qpn);
  if (dest && dest->type == static_cast<uint32_t>(proto::QpType::kXrcSrq) &&
      local->type == static_cast<uint32_t>(proto::QpType::kXrcSend))
    return connect_xrc_srq(c, d, r, *local, *dest);
  Client* owner = dest ? find_live(dest->owner) : nullptr;
  if (!dest || !owner) return void(reply_error(c, d, ENOENT));
  if (by_gid && owner->ident.ipv4 != gid_ip) return void(reply_error(c, d, ENOENT));
  if (owner->tenant != c.tenant && allow_.may_pair(c.tenant, owner->tenant)) {
    // Tenants that policy lets pair share no memory: through the router (mediated.cc).
    LOG_DEBUG("client %u: QP 0x%x -> 0x%x: mediated (tenant %s -> %s)", c.id, r.local_qpn,
              r.dest_qpn, c.tenant.c_str(), owner->tenant.c_str());
    return connect_routed(c, d, r, owner->ident.ipv4, true);
  }
  if (owner->tenant != c.tenant) {
    // As unknown as a QPN that does not exist: ConnectQp tells no one which QPNs are live in
    // other tenants.
    LOG_INFO("client %u: connect QP 0x%x -> 0x%x refused: tenant %s -> %s", c.id, r.local_qpn,
             r.dest_qpn, c.tenant.c_str(), owner->tenant.c_str());
    return void(reply_error(c, d, ENOENT));
  }
  if (!connectable_types(local->type, dest->type)) return void(reply_error(c, d, EINVAL));
  // Over the pod network first, as across hosts: a rule between the two containers decides.
  if (!probe_local(c, d, r, *local, *owner)) return;
  registry_.link(r.local_qpn, r.dest_qpn);
  registry_.set_path(r.local_qpn, ConnectPath::kSharedMemory,
                     "same tenant on this host: through shared memory");
  if (local->type != static_cast<uint32_t>(proto::QpType::kUd)) {
    registry_.set_peer(r.local_qpn, owner->ident.ipv4, r.dest_qpn);
    // Consent: the destination's RTR must name this QP. Until it does, the destination is not
    // ready, as on a fabric (the QP retries until its timeout).
    if (!registry_.names_peer(r.dest_qpn, c.ident.ipv4, r.local_qpn)) {
      LOG_DEBUG("client %u: QP 0x%x -> 0x%x: not ready (its RTR does not name this QP)", c.id,
                r.local_qpn, r.dest_qpn);
      return void(reply_error(c, d, EAGAIN));
    }
  }
  proto::ConnectQpRep rep{};
  rep.peer_client = owner->id;
  rep.peer_object_fd_id = dest->object_fd_id;
  rep.peer_qp_type = dest->type;
  LOG_DEBUG("client %u: QP 0x%x linked to client %u QP 0x%x", c.id, r.local_qpn, owner->id,
            r.dest_qpn);
  send(c, Op::kConnectQp, d.seq, 0, &rep, sizeof(rep));
}

void Daemon::handle(Client& c, const Decoded& d, const proto::AllocKeyReq& r) {
  proto::AllocKeyRep rep{};
  if (r.replaces) {
    // A re-registration: the same key, its bytes counted anew.
    const KeyRecord* k = registry_.find_key(r.replaces);
    if (!k || k->owner != c.id) return void(reply_error(c, d, ENOENT));
    const uint64_t old_length = k->length;
    release(c, Resource::kRegisteredBytes, old_length);
    if (int err = charge(c, Resource::kRegisteredBytes, r.length)) {
      charge(c, Resource::kRegisteredBytes, old_length);
      return void(reply_error(c, d, err));
    }
    if (int err = registry_.replace_key(c.id, r.replaces, r.index, r.access, r.length, r.pd)) {
      release(c, Resource::kRegisteredBytes, r.length);
      charge(c, Resource::kRegisteredBytes, old_length);
      return void(reply_error(c, d, err));
    }
    rep.key = r.replaces;
    return void(send(c, Op::kAllocKey, d.seq, 0, &rep, sizeof(rep)));
  }
  if (r.access & proto::kKeyImplicit) return alloc_implicit_key(c, d, r);  // implicit_odp.cc
  if (int err = charge(c, Resource::kMrs)) return void(reply_error(c, d, err));
  if (r.access & proto::kKeyWindow) {
    // A memory window: counted as an MR, no bytes of its own (they are its MR's).
    if (r.access != proto::kKeyWindow || r.length != 0 || r.replaces) {
      release(c, Resource::kMrs);
      return void(reply_error(c, d, EINVAL));
    }
    if (int err = registry_.alloc_window_key(c.id, r.index, r.pd, SIZE_MAX, &rep.key)) {
      release(c, Resource::kMrs);
      return void(reply_error(c, d, err));
    }
    return void(send(c, Op::kAllocKey, d.seq, 0, &rep, sizeof(rep)));
  }
  if (int err = charge(c, Resource::kRegisteredBytes, r.length)) {
    release(c, Resource::kMrs);
    return void(reply_error(c, d, err));
  }
  if (int err = registry_.alloc_key(c.id, r.index, r.access, r.length, SIZE_MAX, &rep.key, r.pd)) {
    release(c, Resource::kMrs);
    release(c, Resource::kRegisteredBytes, r.length);
    return void(reply_error(c, d, err));
  }
  send(c, Op::kAllocKey, d.seq, 0, &rep, sizeof(rep));
}

void Daemon::handle(Client& c, const Decoded& d, const proto::FreeKeyReq& r) {
  const KeyRecord* k = registry_.find_key(r.key);
  const uint64_t length = k && k->owner == c.id ? k->length : 0;
  int err = registry_.free_key(c.id, r.key);
  if (err == 0) {
    release(c, Resource::kMrs);
    release(c, Resource::kRegisteredBytes, length);
  }
  send(c, Op::kFreeKey, d.seq, err, nullptr, 0);
}

}  // namespace vrdma::daemon
