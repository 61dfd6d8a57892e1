// rdma_cm ids: creation and destruction, addresses (bind, resolve), listening, options,
// and the process's shared device context.
#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include <atomic>
#include <new>

#include "internal.h"

namespace vrdma::cm {

namespace {

std::mutex g_shared_mu;
std::atomic<Shared*> g_shared{nullptr};

bool is_loopback(uint32_t ipv4) { return (ntohl(ipv4) >> 24) == 127; }

// The id's local address becomes (ip, port); the id is then bound to the device.
void set_src(Id* id, uint32_t ip, uint16_t port) {
  sockaddr_in& s = id->id.route.addr.src_sin;
  memset(&id->id.route.addr.src_storage, 0, sizeof(id->id.route.addr.src_storage));
  s.sin_family = AF_INET;
  s.sin_addr.s_addr = ip;
  s.sin_port = htons(port);
  Shared* sh = shared_if_open();
  fill_gid(id->id.route.addr.addr.ibaddr.sgid, ip ? ip : sh->ipv4);
  id->id.route.addr.addr.ibaddr.pkey = 0xffff;
  id->id.verbs = sh->ctx;
  id->id.pd = sh->pd;
  id->id.port_num = 1;
  id->bound = true;
}

}  // namespace

Shared* shared_if_open() {
  Shared* s = g_shared.load(std::memory_order_acquire);
  return s && s->pid == ::getpid() ? s : nullptr;
}

Shared* shared() {
  if (Shared* s = shared_if_open()) return s;
  std::lock_guard lock(g_shared_mu);
  if (Shared* s = shared_if_open()) return s;
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (!list) return nullptr;
  if (n < 1) {
    ibv_free_device_list(list);
    errno = ENODEV;
    return nullptr;
  }
  auto* s = new (std::nothrow) Shared();
  if (!s) {
    ibv_free_device_list(list);
    errno = ENOMEM;
    return nullptr;
  }
  s->ctx = ibv_open_device(list[0]);
  ibv_free_device_list(list);
  if (!s->ctx) {
    delete s;
    return nullptr;
  }
  s->pd = ibv_alloc_pd(s->ctx);
  ibv_gid gid;
  if (!s->pd || ibv_query_gid(s->ctx, 1, 0, &gid) != 0) {
    int e = errno ? errno : ENODEV;
    if (s->pd) ibv_dealloc_pd(s->pd);
    ibv_close_device(s->ctx);
    delete s;
    errno = e;
    return nullptr;
  }
  memcpy(&s->ipv4, gid.raw + 12, 4);
  s->pid = ::getpid();
  // The context lives as long as the process (ids and applications keep pointers to it).
  g_shared.store(s, std::memory_order_release);
  vrdma_cm_set_handler(on_daemon_event);
  return s;
}

int fail(int err) {
  errno = err;
  return -1;
}

int call(proto::Op op, const void* req, size_t len, void* reply, size_t reply_len) {
  size_t got = reply_len;
  int rc = vrdma_cm_call(static_cast<uint16_t>(op), req, len, reply, reply ? &got : nullptr);
  if (rc == 0 && reply && got != reply_len) return EPROTO;
  return rc;
}

uint16_t pick_port() {
  // Ephemeral ports, as the kernel picks them (ip_local_port_range's default).
  static std::atomic<uint32_t> next{[] {
    uint32_t r = 0;
    if (getrandom(&r, sizeof(r), 0) != sizeof(r)) r = static_cast<uint32_t>(time(nullptr));
    return r;
  }()};
  return static_cast<uint16_t>(32768 + next.fetch_add(1) % (61000 - 32768));
}

void fill_gid(ibv_gid& gid, uint32_t ipv4) {
  memset(&gid, 0, sizeof(gid));
  gid.raw[10] = 0xff;
  gid.raw[11] = 0xff;
  memcpy(gid.raw + 12, &ipv4, 4);
}

void fill_ah(ibv_ah_attr& ah, uint32_t ipv4) {
  memset(&ah, 0, sizeof(ah));
  ah.is_global = 1;
  fill_gid(ah.grh.dgid, ipv4);
  ah.grh.sgid_index = 0;
  ah.grh.hop_limit = 64;
  ah.port_num = 1;
}

uint32_t sin_ip(const sockaddr* sa) {
  return reinterpret_cast<const sockaddr_in*>(sa)->sin_addr.s_addr;
}

uint8_t clamp_rd(uint8_t v) { return v > kMaxRdAtomic ? kMaxRdAtomic : v; }

}  // namespace vrdma::cm

using namespace vrdma::cm;
using vrdma::proto::Op;

namespace {

int create_id(rdma_event_channel* channel, rdma_cm_id** out, void* context,
              rdma_port_space ps, ibv_qp_type qp_type) {
  if (!out) return fail(EINVAL);
  if (!shared()) return -1;
  auto* id = new (std::nothrow) Id();
  if (!id) return fail(ENOMEM);
  if (!channel) {
    id->own_channel = new_channel();
    if (!id->own_channel) {
      delete id;
      return -1;
    }
    id->sync = true;
    channel = &id->own_channel->ch;
  }
  id->id.channel = channel;
  id->id.context = context;
  id->id.ps = ps;
  id->id.qp_type = qp_type;
  {
    std::lock_guard lock(table_mu());
    register_id(id);
  }
  *out = &id->id;
  return 0;
}

// Binds to (ip, port) of an AF_INET address: the wildcard or the container's own address
// (loopback means the container itself).
int bind_in(Id* id, const sockaddr* addr) {
  if (id->bound) return fail(EINVAL);
  if (!addr) return fail(EINVAL);
  if (addr->sa_family != AF_INET) return fail(EAFNOSUPPORT);
  Shared* sh = shared();
  if (!sh) return -1;
  uint32_t ip = sin_ip(addr);
  if (ip && is_loopback(ip)) ip = sh->ipv4;
  if (ip && ip != sh->ipv4) return fail(EADDRNOTAVAIL);
  uint16_t port = ntohs(reinterpret_cast<const sockaddr_in*>(addr)->sin_port);
  set_src(id, ip, port ? port : pick_port());
  id->state = State::kBound;
  return 0;
}

}  // namespace

extern "C" {

VRDMA_EXPORT int rdma_create_id(struct rdma_event_channel* channel, struct rdma_cm_id** id,
                                void* context, enum rdma_port_space ps) {
  ibv_qp_type t = (ps == RDMA_PS_UDP || ps == RDMA_PS_IPOIB) ? IBV_QPT_UD : IBV_QPT_RC;
  return create_id(channel, id, context, ps, t);
}

VRDMA_EXPORT int rdma_destroy_id(struct rdma_cm_id* cid) {
  if (!cid) return fail(EINVAL);
  Id* id = impl(cid);
  if (id->state == State::kListening) {
    vrdma::proto::CmUnlistenReq u{id->listen_ip, ntohs(cid->route.addr.src_sin.sin_port), 0};
    call(Op::kCmUnlisten, u);
  }
  send_disconnect(id);
  forget_multicast(id);
  {
    std::lock_guard lock(table_mu());
    unregister_id(id);
  }
  // Requests queued for a listener that goes away are refused.
  for (Id* orphan : purge_events(impl(cid->channel), id)) rdma_destroy_id(&orphan->id);
  if (cid->event) rdma_ack_cm_event(cid->event);
  if (id->ep_attr && !id->passive) free(id->ep_attr);
  if (cid->route.path_rec == &id->path) cid->route.path_rec = nullptr;
  if (id->own_channel) delete_channel(id->own_channel);
  delete id;
  return 0;
}

VRDMA_EXPORT int rdma_bind_addr(struct rdma_cm_id* cid, struct sockaddr* addr) {
  if (!cid) return fail(EINVAL);
  return bind_in(impl(cid), addr);
}

VRDMA_EXPORT int rdma_resolve_addr(struct rdma_cm_id* cid, struct sockaddr* src_addr,
                                   struct sockaddr* dst_addr, int /*timeout_ms*/) {
  if (!cid || !dst_addr) return fail(EINVAL);
  Id* id = impl(cid);
  if (dst_addr->sa_family != AF_INET) return fail(EAFNOSUPPORT);
  Shared* sh = shared();
  if (!sh) return -1;
  if (!id->bound) {
    sockaddr_in any{};
    any.sin_family = AF_INET;
    if (bind_in(id, src_addr ? src_addr : reinterpret_cast<sockaddr*>(&any))) return -1;
  }
  sockaddr_in dst = *reinterpret_cast<const sockaddr_in*>(dst_addr);
  if (is_loopback(dst.sin_addr.s_addr)) dst.sin_addr.s_addr = sh->ipv4;
  memset(&cid->route.addr.dst_storage, 0, sizeof(cid->route.addr.dst_storage));
  cid->route.addr.dst_sin = dst;
  fill_gid(cid->route.addr.addr.ibaddr.dgid, dst.sin_addr.s_addr);
  vrdma::proto::CmResolveReq req{dst.sin_addr.s_addr};
  vrdma::proto::CmResolveRep rep{};
  // A multicast group needs no owner: the source is the container's address.
  const bool group = IN_MULTICAST(ntohl(dst.sin_addr.s_addr));
  if (group) rep.src_ipv4 = sh->ipv4;
  int err = group ? 0 : call(Op::kCmResolve, req, &rep, sizeof(rep));
  Event* e;
  {
    std::lock_guard lock(table_mu());
    if (err == 0) {
      // The source is the container's address (a wildcard bind becomes it).
      cid->route.addr.src_sin.sin_addr.s_addr = rep.src_ipv4;
      fill_gid(cid->route.addr.addr.ibaddr.sgid, rep.src_ipv4);
      id->state = State::kAddrResolved;
      e = new_event(id, RDMA_CM_EVENT_ADDR_RESOLVED);
    } else {
      e = new_event(id, RDMA_CM_EVENT_ADDR_ERROR, -err);
    }
    queue_event(id, e);
  }
  if (id->sync) return wait_event(id, RDMA_CM_EVENT_ADDR_RESOLVED);
  return 0;
}

VRDMA_EXPORT int rdma_resolve_route(struct rdma_cm_id* cid, int /*timeout_ms*/) {
  if (!cid) return fail(EINVAL);
  Id* id = impl(cid);
  {
    std::lock_guard lock(table_mu());
    if (id->state != State::kAddrResolved) return fail(EINVAL);
    id->state = State::kRouteResolved;
    ibv_sa_path_rec& p = id->path;
    memset(&p, 0, sizeof(p));
    p.sgid = cid->route.addr.addr.ibaddr.sgid;
    p.dgid = cid->route.addr.addr.ibaddr.dgid;
    p.pkey = htons(0xffff);
    p.mtu = IBV_MTU_4096;
    p.hop_limit = 64;
    p.reversible = 1;
    cid->route.path_rec = &p;
    cid->route.num_paths = 1;
    queue_event(id, new_event(id, RDMA_CM_EVENT_ROUTE_RESOLVED));
  }
  if (id->sync) return wait_event(id, RDMA_CM_EVENT_ROUTE_RESOLVED);
  return 0;
}

VRDMA_EXPORT int rdma_listen(struct rdma_cm_id* cid, int /*backlog*/) {
  if (!cid) return fail(EINVAL);
  Id* id = impl(cid);
  if (!id->bound) {
    sockaddr_in any{};
    any.sin_family = AF_INET;
    if (bind_in(id, reinterpret_cast<sockaddr*>(&any))) return -1;
  }
  if (id->state != State::kBound) return fail(EINVAL);
  vrdma::proto::CmListenReq req{};
  req.ipv4 = cid->route.addr.src_sin.sin_addr.s_addr;
  req.port = ntohs(cid->route.addr.src_sin.sin_port);
  req.cookie = id->cookie;
  vrdma::proto::CmListenRep rep{};
  // The state changes first: a request may arrive before the reply is read.
  {
    std::lock_guard lock(table_mu());
    id->state = State::kListening;
  }
  if (int err = call(Op::kCmListen, req, &rep, sizeof(rep))) {
    std::lock_guard lock(table_mu());
    id->state = State::kBound;
    return fail(err);
  }
  id->listen_ip = rep.ipv4;
  return 0;
}

VRDMA_EXPORT int rdma_migrate_id(struct rdma_cm_id* cid, struct rdma_event_channel* channel) {
  if (!cid) return fail(EINVAL);
  Id* id = impl(cid);
  Channel* own = nullptr;
  if (!channel) {
    if (id->own_channel) return 0;
    own = new_channel();
    if (!own) return -1;
    channel = &own->ch;
  }
  Channel* old_own = nullptr;
  {
    std::lock_guard lock(table_mu());
    Channel* from = impl(cid->channel);
    cid->channel = channel;
    move_events(from, impl(channel), id);
    if (own) {
      id->own_channel = own;
      id->sync = true;
    } else {
      old_own = id->own_channel;
      id->own_channel = nullptr;
      id->sync = false;
    }
  }
  if (old_own) delete_channel(old_own);
  return 0;
}

VRDMA_EXPORT int rdma_set_option(struct rdma_cm_id* cid, int level, int optname, void* optval,
                                 size_t optlen) {
  if (!cid || !optval) return fail(EINVAL);
  // The ACK timeout is the RC QP's (local ACK timeout exponent, 5 bits), set at RTS.
  if (level == RDMA_OPTION_ID && optname == RDMA_OPTION_ID_ACK_TIMEOUT) {
    if (optlen != sizeof(uint8_t)) return fail(EINVAL);
    uint8_t t = *static_cast<const uint8_t*>(optval);
    if (t > 31) return fail(EINVAL);
    reinterpret_cast<Id*>(cid)->ack_timeout = t;
    return 0;
  }
  // Type of service, address reuse, IPv6-only and path records mean nothing for a virtual
  // device: accepted and ignored.
  if (level == RDMA_OPTION_ID &&
      (optname == RDMA_OPTION_ID_TOS || optname == RDMA_OPTION_ID_REUSEADDR ||
       optname == RDMA_OPTION_ID_AFONLY) &&
      optlen > 0)
    return 0;
  if (level == RDMA_OPTION_IB && optname == RDMA_OPTION_IB_PATH) return 0;
  return fail(ENOSYS);
}

// Ports are returned in network byte order; 0 means "unknown".
VRDMA_EXPORT __be16 rdma_get_src_port(struct rdma_cm_id* cid) {
  return cid ? cid->route.addr.src_sin.sin_port : 0;
}

VRDMA_EXPORT __be16 rdma_get_dst_port(struct rdma_cm_id* cid) {
  return cid ? cid->route.addr.dst_sin.sin_port : 0;
}

VRDMA_EXPORT struct ibv_context** rdma_get_devices(int* num_devices) {
  if (num_devices) *num_devices = 0;
  Shared* sh = shared();
  auto** list = static_cast<ibv_context**>(calloc(2, sizeof(ibv_context*)));
  if (!list) {
    errno = ENOMEM;
    return nullptr;
  }
  if (sh) {
    list[0] = sh->ctx;
    if (num_devices) *num_devices = 1;
  }
  return list;
}

VRDMA_EXPORT void rdma_free_devices(struct ibv_context** list) { free(list); }

}  // extern "C"
