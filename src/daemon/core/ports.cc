// What the daemon's services ask of it: the router (Router::Hooks) and the rdma_cm service
// (CmPort). Each answer comes from the daemon's own tables, never from what a client said.
#include <errno.h>
#include <fcntl.h>
#include <string.h>

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <tuple>
#include <unordered_map>

#include "common/address.h"
#include "common/log.h"
#include "daemon/core/daemon.h"

namespace vrdma::daemon {

void Daemon::notify_qp_fatal(uint32_t client, uint32_t qpn, proto::FatalReason why) {
  Client* c = find_live(client);
  if (!c) return;
  proto::QpFatalEvent ev{qpn, static_cast<uint32_t>(why)};
  send(*c, proto::Op::kQpFatal, 0, 0, &ev, sizeof(ev));
}

namespace {

// What the router thread learnt of the daemon's state, valid while the state's generation
// (Daemon::state_gen_) stays the even value it was learnt at: the data path asks whether a
// QP still names its peer for every request, and must not wait for the control thread to
// answer it. Used by the router thread alone.
struct StateCache {
  uint64_t gen = 1;  // odd: nothing cached
  std::map<std::tuple<uint32_t, uint32_t, uint32_t>, bool> names_peer;
  std::unordered_map<uint32_t, std::optional<LocalQp>> qps;
  // Whether what is cached may be used at generation `g`; else it is forgotten.
  bool valid(uint64_t g) {
    if (g == gen) return true;
    names_peer.clear();
    qps.clear();
    gen = g;
    return false;
  }
};

}  // namespace

Router::Hooks Daemon::router_hooks() {
  Router::Hooks h;
  auto cache = std::make_shared<StateCache>();
  // Every hook that reads the state runs on the router thread under state_mu_, the cached
  // ones only when the cache has no answer; what the router tells the daemon runs on the
  // control thread.
  h.fetch_fd = [this](uint32_t client, uint32_t fd_id, int& fd) {
    std::lock_guard<std::mutex> g(state_mu_);
    Client* c = find_live(client);
    if (!c) return ENOENT;
    auto it = c->fds.find(fd_id);
    if (it == c->fds.end()) return ENOENT;
    fd = ::fcntl(it->second.fd.get(), F_DUPFD_CLOEXEC, 0);
    return fd < 0 ? errno : 0;
  };
  h.grant_mr = [this](uint32_t client, uint32_t key, uint64_t addr, uint64_t length,
                      shm::MrGrant& out) {
    std::lock_guard<std::mutex> g(state_mu_);
    return router_grant(client, key, addr, length, out);
  };
  h.kept_mapping = [this](uint32_t client, uint32_t fd_id, uint64_t& size) {
    std::lock_guard<std::mutex> g(state_mu_);
    return router_kept_mapping(client, fd_id, size);
  };
  h.qp_fatal = [this](uint32_t client, uint32_t qpn, proto::FatalReason why) {
    router_->post_to_control([this, client, qpn, why] { notify_qp_fatal(client, qpn, why); });
  };
  h.find_qp = [this, cache](uint32_t qpn, LocalQp* out) {
    const uint64_t gen = state_gen_.load(std::memory_order_acquire);
    if (!(gen & 1) && cache->valid(gen))
      if (auto it = cache->qps.find(qpn); it != cache->qps.end()) {
        if (it->second) *out = *it->second;
        return it->second.has_value();
      }
    // Under the lock the generation is even and stays so: answers found now may be cached.
    std::lock_guard<std::mutex> g(state_mu_);
    cache->valid(state_gen_.load(std::memory_order_acquire));
    const QpRecord* rec = registry_.find_qp(qpn);
    Client* owner = rec ? find_live(rec->owner) : nullptr;
    if (!owner) {
      cache->qps[qpn] = std::nullopt;
      return false;
    }
    out->owner = owner->id;
    out->arena_offset = rec->arena_offset;
    out->object_fd_id = rec->object_fd_id;
    out->type = rec->type;
    out->ipv4 = owner->ident.ipv4;
    out->tenant = owner->tenant;
    out->xrcd = rec->xrcd;
    cache->qps[qpn] = *out;
    return true;
  };
  h.names_peer = [this, cache](uint32_t qpn, uint32_t ipv4, uint32_t peer_qpn) {
    const auto key = std::make_tuple(qpn, ipv4, peer_qpn);
    const uint64_t gen = state_gen_.load(std::memory_order_acquire);
    if (!(gen & 1) && cache->valid(gen))
      if (auto it = cache->names_peer.find(key); it != cache->names_peer.end()) return it->second;
    std::lock_guard<std::mutex> g(state_mu_);
    cache->valid(state_gen_.load(std::memory_order_acquire));
    return cache->names_peer[key] = registry_.names_peer(qpn, ipv4, peer_qpn);
  };
  h.direct_ticket = [this](const wire::Direct& d, const LocalQp* dst, uint16_t* port,
                           uint64_t* key) {
    std::lock_guard<std::mutex> g(state_mu_);
    return keep_remote_ticket(d, dst, port, key);
  };
  h.tenant_of = [this](uint32_t ipv4) {
    std::lock_guard<std::mutex> g(state_mu_);
    return tenant_of_address(ipv4);
  };
  h.on_cm = [this](uint32_t host, const wire::Cm& m) {
    router_->post_to_control([this, host, m] { cm_->on_remote(host, m); });
  };
  h.tenants_pair = [this](const std::string& a, const std::string& b) {
    if (a == b) return true;
    std::lock_guard<std::mutex> g(state_mu_);
    return allow_.may_pair(a, b);
  };
  h.local_address = [this](uint32_t ipv4) {
    std::lock_guard<std::mutex> g(state_mu_);
    return std::any_of(clients_.begin(), clients_.end(), [&](const auto& kv) {
      return !kv.second->doomed && kv.second->identified && !kv.second->ident.host &&
             kv.second->ident.ipv4 == ipv4;
    });
  };
  h.cm_connections_with = [this](uint32_t host) {
    std::lock_guard<std::mutex> g(state_mu_);
    return cm_->table().connections_with(host).size();
  };
  h.host_gone = [this](uint32_t host) {
    router_->post_to_control([this, host] { cm_->host_gone(host); });
  };
  h.mcast_members = [this](const std::string& tenant, const uint8_t* gid) {
    McastGid g;
    memcpy(g.data(), gid, 16);
    std::lock_guard<std::mutex> lk(state_mu_);
    const std::vector<uint32_t>* m = mcast_.members(tenant, g);
    return m ? *m : std::vector<uint32_t>{};
  };
  return h;
}

bool Daemon::cm_reply(const CmCaller& to, int status, const void* payload, size_t len) {
  Client* c = find_live(to.client);
  return c && send(*c, to.op, to.seq, status, payload, len);
}

void Daemon::cm_event(uint32_t client, proto::Op op, const void* payload, size_t len) {
  if (Client* c = find_live(client)) send(*c, op, 0, 0, payload, len);
}

bool Daemon::cm_client_tenant(uint32_t client, std::string* tenant) {
  Client* c = find_live(client);
  if (!c) return false;
  *tenant = c->tenant;
  return true;
}

std::string Daemon::cm_tenant_of(uint32_t ipv4) {
  return remote_tenant_of(ipv4);
}

std::string Daemon::remote_tenant_of(uint32_t ipv4) {
  if (cfg_.platform_tenants.empty()) return tenant_for(cfg_.tenants, ipv4);
  // Tenants from the platform: each host names its own pods' tenants in their directory
  // entries (only it may write them); an address without one, or with a tenant of its own
  // ("@a.b.c.d", which no platform gives), is in no tenant a local client shares.
  std::string tenant;
  if (directory_->tenant_of(ipv4, &tenant) != Lookup::kFound || tenant.starts_with('@')) return {};
  return tenant;
}

bool Daemon::cm_qp_of(uint32_t client, uint32_t qpn, uint32_t* type) {
  const QpRecord* qp = registry_.find_qp(qpn);
  if (!qp || qp->owner != client) return false;
  *type = qp->type;
  return true;
}

int Daemon::cm_remote_host(uint32_t ipv4, uint32_t* host) {
  if (!router_) return EHOSTUNREACH;
  HostEntry h;
  switch (directory_->host_of(ipv4, &h)) {
    case Lookup::kUnavailable:
      LOG_WARN("cm: cannot resolve %s: the directory is unavailable (%s)", ipv4_text(ipv4).c_str(),
               directory_->describe().c_str());
      return EAGAIN;
    case Lookup::kNotFound:
      return EHOSTUNREACH;
    case Lookup::kFound:
      break;
  }
  if (h.host_id == cfg_.host_id) return EHOSTUNREACH;  // ours, but nobody there
  *host = h.host_id;
  return 0;
}

int Daemon::cm_send_to_host(uint32_t host, const wire::Cm& m) {
  if (!router_) return EHOSTUNREACH;
  // Queued for the router thread; when no link to the host can be had, what rdma_cm has with
  // it ends as if the host had gone.
  router_->send_cm_to_host(host, m, [this, host](int err) {
    LOG_WARN("cm: cannot reach host %u: %s", host, strerror(err));
    cm_->host_gone(host);
  });
  return 0;
}

}  // namespace vrdma::daemon
