#include "router_fake.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <random>

#include "common/address.h"
#include "common/clock.h"
#include "common/log.h"
#include "shm/shared_file.h"

namespace vrdma::daemon::testing {

namespace {

uint64_t align_up(uint64_t v, uint64_t a) {
  return (v + a - 1) & ~(a - 1);
}

int sealed_file(const char* name, uint64_t size) {
  int fd = -1;
  EXPECT_EQ(shm::create_sealed(name, size, false, fd), 0);
  return fd;
}

void* map_shared(int fd, uint64_t size) {
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  EXPECT_NE(p, MAP_FAILED);
  return p;
}

}  // namespace

uint32_t ip(const char* text) {
  uint32_t v = 0;
  EXPECT_EQ(inet_pton(AF_INET, text, &v), 1) << text;
  return v;
}

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(g());
  return v;
}

ibv_send_wr make_wr(uint64_t wr_id, ibv_wr_opcode op, ibv_sge* sge, int nsge, uint32_t flags) {
  ibv_send_wr wr{};
  wr.wr_id = wr_id;
  wr.opcode = op;
  wr.sg_list = sge;
  wr.num_sge = nsge;
  wr.send_flags = flags;
  return wr;
}

// ---- the directory ---------------------------------------------------------------------

void FakeDirectory::add_host(uint32_t id, const std::string& router, const std::string& cidr) {
  HostEntry h;
  h.host_id = id;
  h.router = router;
  Ipv4Cidr c;
  std::string why;
  EXPECT_TRUE(parse_cidr(cidr, &c, &why)) << why;
  h.cidrs.push_back(c);
  hosts_.push_back(h);
}

void FakeDirectory::remove_host(uint32_t id) {
  std::erase_if(hosts_, [&](const HostEntry& h) { return h.host_id == id; });
}

Lookup FakeDirectory::host_of(uint32_t ipv4_net, HostEntry* out) {
  int best = -1;
  for (const auto& h : hosts_)
    for (const auto& c : h.cidrs)
      if (c.contains(ntohl(ipv4_net)) && c.prefix_len() > best) {
        best = c.prefix_len();
        *out = h;
      }
  return best < 0 ? Lookup::kNotFound : Lookup::kFound;
}

Lookup FakeDirectory::host_by_id(uint32_t host_id, HostEntry* out) {
  for (const auto& h : hosts_)
    if (h.host_id == host_id) {
      *out = h;
      return Lookup::kFound;
    }
  return Lookup::kNotFound;
}

Lookup FakeDirectory::host_by_router(uint32_t ipv4_net, HostEntry* out) {
  for (const auto& h : hosts_) {
    uint32_t a = 0;
    uint16_t port = 0;
    if (parse_ipv4_port(h.router, &a, &port) && a == ipv4_net) {
      *out = h;
      return Lookup::kFound;
    }
  }
  return Lookup::kNotFound;
}

void FakeDirectory::group_members(uint32_t group_net,
                                  std::vector<std::pair<uint32_t, uint32_t>>* out) {
  if (auto it = groups.find(group_net); it != groups.end())
    out->insert(out->end(), it->second.begin(), it->second.end());
}

Lookup FakeDirectory::tenant_of(uint32_t ipv4_net, std::string* tenant) {
  auto it = tenants.find(ipv4_net);
  if (it == tenants.end()) return Lookup::kNotFound;
  *tenant = it->second;
  return Lookup::kFound;
}

// ---- clients -----------------------------------------------------------------------------

FakeClient::FakeClient(uint32_t id_, uint32_t ipv4_, std::string tenant_)
    : id(id_), ipv4(ipv4_), tenant(std::move(tenant_)) {
  EXPECT_EQ(arena.create(id), 0);
  fds_[shm::kArenaFdId] = ::fcntl(arena.fd(), F_DUPFD_CLOEXEC, 0);
  keys_size_ = align_up(sizeof(shm::KeyTable), shm::kPage);
  int kfd = sealed_file("fake-keys", keys_size_);
  keys_ = static_cast<shm::KeyTable*>(map_shared(kfd, keys_size_));
  keys_->magic = shm::kKeyTableMagic;
  keys_->version = shm::kArenaVersion;
  keys_->slots = shm::kMrSlots;
  fds_[shm::kKeyTableFdId] = kfd;
}

FakeClient::~FakeClient() {
  for (auto& [p, len] : maps_) ::munmap(p, len);
  ::munmap(keys_, keys_size_);
  for (auto& [id, fd] : fds_) ::close(fd);
}

uint32_t FakeClient::add_fd(int fd) {
  uint32_t id = next_fd_id_++;
  fds_[id] = fd;
  return id;
}

FakeMr& FakeClient::reg_mr(uint64_t len, uint32_t access, uint32_t pd) {
  auto mr = std::make_unique<FakeMr>();
  mr->map_len = align_up(len ? len : 1, shm::kPage);
  int fd = sealed_file("fake-mr", mr->map_len);
  mr->ptr = static_cast<uint8_t*>(map_shared(fd, mr->map_len));
  maps_.emplace_back(mr->ptr, mr->map_len);
  mr->len = len;
  mr->access = access;
  mr->pd = pd;
  mr->slot = next_slot_++;
  mr->key = 0x5a000000u ^ (id << 16) ^ (mr->slot * 2654435761u);
  if (!mr->key) mr->key = 1;
  mr->fd_id = add_fd(fd);
  keys_->gen[mr->slot].fetch_add(1);
  mrs_.push_back(std::move(mr));
  return *mrs_.back();
}

void FakeClient::dereg_mr(FakeMr& mr) {
  keys_->gen[mr.slot].fetch_add(1);
  mr.key = 0;
}

int FakeClient::fetch_fd(uint32_t, uint32_t fd_id, uint32_t, int& fd) {
  auto it = fds_.find(fd_id);
  if (it == fds_.end()) return ENOENT;
  fd = ::fcntl(it->second, F_DUPFD_CLOEXEC, 0);
  return fd < 0 ? errno : 0;
}

int FakeClient::grant_mr(uint32_t, uint32_t, uint32_t key, uint32_t, shm::MrGrant& out) {
  for (auto& mr : mrs_) {
    if (!key || mr->key != key) continue;
    out.slot = mr->slot;
    out.gen = keys_->gen[mr->slot].load();
    out.access = mr->access;
    out.pd = mr->pd;
    out.nseg = 1;
    out.writable = true;
    out.iova = mr->addr();
    out.length = mr->len;
    out.va_offset = 0;
    out.map_length = mr->map_len;
    out.seg[0] = shm::MrGrant::Seg{mr->fd_id, 0, mr->map_len};
    return fetch_fd(id, mr->fd_id, 0, out.fds[0]);
  }
  return ENOENT;
}

// ---- QPs -----------------------------------------------------------------------------------

LocalQp FakeQp::info() const {
  return LocalQp{client->id, shared_off, obj_fd_id, type, client->ipv4, client->tenant, xrcd};
}

void FakeQp::set_state(ibv_qp_state st) {
  shared->state.store(st, std::memory_order_release);
  obj->attrs.state.store(st, std::memory_order_release);
}

void FakeQp::post_send(const ibv_send_wr& wr, uint32_t ud_dst_ipv4) {
  uint64_t tail = sq->tail.load(std::memory_order_relaxed);
  ASSERT_LT(tail - sq->done.load(), sq->capacity) << "send queue full";
  auto* e = reinterpret_cast<shm::RouteWqe*>(sq->entries + (tail & (sq->capacity - 1)) *
                                                               uint64_t(sq->entry_size));
  memset(e, 0, sq->entry_size);
  e->wr_id = wr.wr_id;
  e->opcode = wr.opcode;
  e->send_flags = wr.send_flags;
  e->imm_data = wr.imm_data;
  e->status = IBV_WC_SUCCESS;
  if (wr.opcode == IBV_WR_ATOMIC_CMP_AND_SWP || wr.opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
    e->rkey = wr.wr.atomic.rkey;
    e->remote_addr = wr.wr.atomic.remote_addr;
    e->compare_add = wr.wr.atomic.compare_add;
    e->swap = wr.wr.atomic.swap;
  } else if (type == IBV_QPT_UD) {
    e->ud_qpn = wr.wr.ud.remote_qpn;
    e->ud_qkey = wr.wr.ud.remote_qkey;
    ipv4_to_gid(ud_dst_ipv4, e->dgid);
  } else {
    e->rkey = wr.wr.rdma.rkey;
    e->remote_addr = wr.wr.rdma.remote_addr;
  }
  if (type != IBV_QPT_UD) e->ud_qpn = peer_qpn;
  if (type == IBV_QPT_XRC_SEND) e->xrc_srqn = wr.qp_type.xrc.remote_srqn;
  if (wr.send_flags & IBV_SEND_INLINE) {
    auto* data = reinterpret_cast<uint8_t*>(e->sge + sq->max_sge);
    uint32_t len = 0;
    for (int i = 0; i < wr.num_sge; ++i) {
      memcpy(data + len, reinterpret_cast<void*>(wr.sg_list[i].addr), wr.sg_list[i].length);
      len += wr.sg_list[i].length;
    }
    ASSERT_LE(len, sq->max_inline);
    e->inline_len = len;
  } else {
    ASSERT_LE(static_cast<uint32_t>(wr.num_sge), sq->max_sge);
    e->num_sge = static_cast<uint32_t>(wr.num_sge);
    memcpy(e->sge, wr.sg_list, sizeof(ibv_sge) * wr.num_sge);
  }
  sq->tail.store(tail + 1, std::memory_order_release);
  // As the library does: the router's doorbell when it armed it.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (sq->doorbell.load(std::memory_order_relaxed) &&
      sq->doorbell.exchange(0, std::memory_order_relaxed) && client->doorbell >= 0) {
    uint64_t one = 1;
    ASSERT_EQ(::write(client->doorbell, &one, sizeof(one)), ssize_t(sizeof(one)));
  }
}

void FakeSrq::post_recv(uint64_t wr_id, std::vector<ibv_sge> sges) {
  wr_ids[tail] = wr_id;
  ASSERT_TRUE(shm::rq_push(rq, tail, sges.data(), static_cast<uint32_t>(sges.size())));
}

void FakeQp::post_recv(uint64_t wr_id, std::vector<ibv_sge> sges) {
  if (opt.srq) return opt.srq->post_recv(wr_id, std::move(sges));
  wr_ids[rq_tail] = wr_id;
  ASSERT_TRUE(shm::rq_push(rq, rq_tail, sges.data(), static_cast<uint32_t>(sges.size())));
}

std::vector<ibv_wc> FakeQp::poll_send() {
  std::vector<ibv_wc> out(64);
  int n = shm::cq_poll(scq, scq_head, 64, out.data());
  out.resize(n > 0 ? n : 0);
  return out;
}

std::vector<RecvCompletion> FakeQp::poll_recv() {
  std::vector<RecvCompletion> out;
  shm::RecvReport r;
  auto& ids = opt.srq ? opt.srq->wr_ids : wr_ids;
  while (shm::ring_take(ring, ring_head, r)) {
    RecvCompletion c;
    auto it = ids.find(r.index);
    EXPECT_NE(it, ids.end()) << "a completion for a receive never posted: " << r.index;
    if (it != ids.end()) {
      c.wr_id = it->second;
      ids.erase(it);
    }
    c.byte_len = r.byte_len;
    c.imm_data = r.imm_data;
    c.src_qp = r.src_qp;
    c.opcode = r.opcode;
    c.status = r.status;
    c.flags = r.flags;
    out.push_back(c);
  }
  return out;
}

// ---- a host --------------------------------------------------------------------------------

FakeHost::FakeHost(uint32_t host_id, FakeDirectory& dir, const RouterLimits& lim,
                   uint32_t bulk_links)
    : host_id_(host_id), dir_(dir) {
  epoll_ = ::epoll_create1(EPOLL_CLOEXEC);
  RouterConfig cfg;
  cfg.host_id = host_id;
  cfg.plaintext = true;
  cfg.limits = lim;
  cfg.bulk_links = bulk_links;
  Router::Hooks h;
  auto owner = [this](uint32_t client) -> FakeClient* {
    for (auto& c : clients_)
      if (c->id == client) return c.get();
    return nullptr;
  };
  h.fetch_fd = [owner](uint32_t client, uint32_t fd_id, int& fd) {
    FakeClient* c = owner(client);
    return c ? c->fetch_fd(client, fd_id, 0, fd) : ENOENT;
  };
  h.grant_mr = [owner](uint32_t client, uint32_t key, uint64_t, uint64_t, shm::MrGrant& out) {
    FakeClient* c = owner(client);
    return c ? c->grant_mr(client, 0, key, 0, out) : ENOENT;
  };
  h.qp_fatal = [this](uint32_t client, uint32_t qpn, proto::FatalReason why) {
    fatals.push_back(Fatal{client, qpn, why});
  };
  h.find_qp = [this](uint32_t qpn, LocalQp* out) {
    auto it = by_qpn_.find(qpn);
    if (it == by_qpn_.end()) return false;
    *out = it->second->info();
    return true;
  };
  h.names_peer = [this](uint32_t qpn, uint32_t ipv4, uint32_t peer_qpn) {
    auto it = by_qpn_.find(qpn);
    return it != by_qpn_.end() && it->second->peer_ipv4 == ipv4 && it->second->peer_qpn == peer_qpn;
  };
  h.tenant_of = [this](uint32_t ipv4) {
    std::string t;
    return dir_.tenant_of(ipv4, &t) == Lookup::kFound ? t : std::string();
  };
  h.mcast_members = [this](const std::string& tenant, const uint8_t* gid) {
    uint32_t group = 0;
    gid_to_ipv4(gid, &group);
    auto it = mcast_.find({tenant, group});
    return it == mcast_.end() ? std::vector<uint32_t>{} : it->second;
  };
  h.on_cm = [](uint32_t, const wire::Cm&) {};
  h.cm_connections_with = [](uint32_t) { return size_t(0); };
  h.host_gone = [this](uint32_t host) { hosts_gone.push_back(host); };
  router_ = std::make_unique<Router>(cfg, dir, std::move(h), 1000 + host_id);
  EXPECT_EQ(router_->start(epoll_), 0);
}

FakeHost::~FakeHost() {
  router_.reset();
  qps_.clear();
  srqs_.clear();
  clients_.clear();
  ::close(epoll_);
}

void FakeHost::join(FakeQp& q, uint32_t group_net) {
  mcast_[{q.client->tenant, group_net}].push_back(q.qpn);
  dir_.groups[group_net].emplace_back(host_id_, q.client->ipv4);
}

FakeClient& FakeHost::client(const char* ipv4, const std::string& tenant) {
  clients_.push_back(std::make_unique<FakeClient>(next_client_++, ip(ipv4), tenant));
  clients_.back()->doorbell = router_->doorbell_for(clients_.back()->id);
  dir_.tenants[ip(ipv4)] = tenant;
  return *clients_.back();
}

FakeSrq& FakeHost::srq(FakeClient& c, uint32_t cap, uint32_t max_sge) {
  auto s = std::make_unique<FakeSrq>();
  s->client = &c;
  uint64_t rq_off = sizeof(shm::QpObject);
  s->size = align_up(rq_off + shm::rq_bytes(cap, max_sge), shm::kPage);
  int fd = sealed_file("fake-srq", s->size);
  s->base = static_cast<uint8_t*>(map_shared(fd, s->size));
  auto* o = reinterpret_cast<shm::QpObject*>(s->base);
  o->hdr.magic = shm::kObjectMagic;
  o->hdr.version = shm::kArenaVersion;
  o->hdr.kind = static_cast<uint32_t>(shm::ObjectKind::kSrq);
  o->hdr.owner_client = c.id;
  o->hdr.size = s->size;
  o->hdr.rq_offset = static_cast<uint32_t>(rq_off);
  auto* rq = reinterpret_cast<shm::RecvQueue*>(s->base + rq_off);
  shm::rq_init(rq, cap, max_sge);
  s->rq = shm::RqView{rq, cap - 1, max_sge, rq->entry_size};
  s->fd_id = c.add_fd(fd);
  srqs_.push_back(std::move(s));
  return *srqs_.back();
}

std::unique_ptr<FakeQp> make_fake_qp(FakeClient& c, uint32_t qpn, uint32_t type,
                                     FakeQp::Options opt) {
  auto q = std::make_unique<FakeQp>();
  q->client = &c;
  q->type = type;
  q->opt = opt;
  q->qpn = qpn;
  // The arena side: the QP's shared state, its send queue for the router, its send CQ.
  q->shared_off = c.arena.alloc(sizeof(shm::QpShared));
  q->shared = c.arena.at<shm::QpShared>(q->shared_off);
  uint32_t sq_cap = shm::pow2_at_least(opt.sq_cap);
  uint32_t esz = shm::route_wqe_size(opt.max_sge, opt.max_inline);
  uint32_t sq_off = c.arena.alloc(sizeof(shm::SendQueue) + size_t(sq_cap) * esz);
  q->sq = c.arena.at<shm::SendQueue>(sq_off);
  q->sq->capacity = sq_cap;
  q->sq->entry_size = esz;
  q->sq->max_sge = opt.max_sge;
  q->sq->max_inline = opt.max_inline;
  uint32_t cq_cap = shm::pow2_at_least(opt.cq_cap);
  uint32_t cq_off = c.arena.alloc(shm::cq_bytes(cq_cap));
  auto* cq = c.arena.at<shm::CqShared>(cq_off);
  shm::cq_init(cq, cq_cap, 0);
  q->scq = shm::CqView{cq, cq_cap - 1};
  shm::QpShared* s = q->shared;
  s->qpn = q->qpn;
  s->qp_type = type;
  s->access.store(opt.access);
  s->qkey.store(opt.qkey);
  s->send_cq_offset = cq_off;
  s->recv_cq_offset = cq_off;
  s->sq_offset = sq_off;
  s->min_rnr_timer.store(opt.min_rnr_timer);
  s->timeout.store(opt.timeout);
  s->retry_cnt.store(opt.retry_cnt);
  s->rnr_retry.store(opt.rnr_retry);
  s->sq_sig_all = opt.sq_sig_all;
  s->traffic_class.store(opt.traffic_class);
  // The QP object: attributes, the ring of receive completions, its receive queue.
  uint64_t off = sizeof(shm::QpObject);
  uint32_t ring_cap = shm::pow2_at_least(opt.cq_cap);
  uint32_t ring_off = static_cast<uint32_t>(off);
  off = align_up(off + shm::ring_bytes(ring_cap), shm::kCacheLine);
  uint32_t rq_off = 0, rq_cap = shm::pow2_at_least(opt.rq_cap);
  if (!opt.srq) {
    rq_off = static_cast<uint32_t>(off);
    off = align_up(off + shm::rq_bytes(rq_cap, opt.max_sge), shm::kCacheLine);
  }
  q->obj_size = align_up(off, shm::kPage);
  int fd = sealed_file("fake-qp", q->obj_size);
  q->obj_base = static_cast<uint8_t*>(map_shared(fd, q->obj_size));
  q->obj = reinterpret_cast<shm::QpObject*>(q->obj_base);
  shm::QpObject* o = q->obj;
  o->hdr.magic = shm::kObjectMagic;
  o->hdr.version = shm::kArenaVersion;
  o->hdr.kind = static_cast<uint32_t>(shm::ObjectKind::kQp);
  o->hdr.owner_client = c.id;
  o->hdr.size = q->obj_size;
  o->hdr.rq_offset = rq_off;
  o->hdr.srq_fd_id = opt.srq ? opt.srq->fd_id : 0;
  o->hdr.ring_offset = ring_off;
  auto* ring = reinterpret_cast<shm::RecvRing*>(q->obj_base + ring_off);
  shm::ring_init(ring, ring_cap);
  q->ring = shm::RingView{ring, ring_cap - 1};
  if (rq_off) {
    auto* rq = reinterpret_cast<shm::RecvQueue*>(q->obj_base + rq_off);
    shm::rq_init(rq, rq_cap, opt.max_sge);
    q->rq = shm::RqView{rq, rq_cap - 1, opt.max_sge, rq->entry_size};
  }
  o->attrs.qpn = q->qpn;
  o->attrs.qp_type = type;
  o->attrs.access.store(opt.access);
  o->attrs.qkey.store(opt.qkey);
  o->attrs.min_rnr_timer.store(opt.min_rnr_timer);
  o->attrs.pd = opt.pd;
  q->obj_fd_id = c.add_fd(fd);
  q->set_state(IBV_QPS_INIT);
  return q;
}

FakeQp& FakeHost::qp(FakeClient& c, uint32_t type, FakeQp::Options opt) {
  auto q = make_fake_qp(c, host_id_ << 16 | next_qpn_++, type, opt);
  by_qpn_[q->qpn] = q.get();
  qps_.push_back(std::move(q));
  return *qps_.back();
}

void FakeHost::client_gone(FakeClient& c) {
  c.arena.header()->dead.store(1);
  for (auto& q : qps_)
    if (q->client == &c) {
      q->shared->gone.store(1);
      q->obj->attrs.gone.store(1);
      by_qpn_.erase(q->qpn);
    }
  router_->client_gone(c.id);
  c.doorbell = -1;  // the router closed it
}

// ---- two hosts -----------------------------------------------------------------------------

RouterPair::RouterPair() {
  // Every failure a test provokes would log a warning; VRDMA_TEST_LOG=1 shows them.
  set_log_level(getenv("VRDMA_TEST_LOG") ? LogLevel::kDebug : LogLevel::kError);
  dir.add_host(1, "10.0.0.1:7000", "10.1.0.0/16");
  dir.add_host(2, "10.0.0.2:7000", "10.2.0.0/16");
  now = now_ns();
}

RouterPair::~RouterPair() {
  h1.reset();
  h2.reset();
}

void RouterPair::start() {
  h1 = std::make_unique<FakeHost>(1, dir, limits, bulk_links);
  h2 = std::make_unique<FakeHost>(2, dir, limits, bulk_links);
  // One pair per direction: host 1's outbound link is host 2's inbound one, and back.
  for (int dir12 = 0; dir12 < 2; ++dir12) {
    int sv[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
    link_fds_.push_back(sv[0]);
    FakeHost& out = dir12 == 0 ? *h1 : *h2;
    FakeHost& in = dir12 == 0 ? *h2 : *h1;
    ASSERT_EQ(out.router().adopt_link(UniqueFd(sv[0]), in.id(), true, now), 0);
    ASSERT_EQ(in.router().adopt_link(UniqueFd(sv[1]), out.id(), false, now), 0);
  }
  // The other bulk links, a pair each way per lane.
  for (uint32_t k = 1; k < bulk_links; ++k)
    for (int dir12 = 0; dir12 < 2; ++dir12) {
      int sv[2];
      ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
      FakeHost& out = dir12 == 0 ? *h1 : *h2;
      FakeHost& in = dir12 == 0 ? *h2 : *h1;
      const uint32_t lane = wire::bulk_lane(k);
      bulk_fds_.push_back(sv[0]);
      ASSERT_EQ(out.router().adopt_link(UniqueFd(sv[0]), in.id(), true, now, lane), 0);
      ASSERT_EQ(in.router().adopt_link(UniqueFd(sv[1]), out.id(), false, now, lane), 0);
    }
  for (int dir12 = 0; latency_lane && dir12 < 2; ++dir12) {
    int sv[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
    latency_fds_.push_back(sv[0]);
    FakeHost& out = dir12 == 0 ? *h1 : *h2;
    FakeHost& in = dir12 == 0 ? *h2 : *h1;
    ASSERT_EQ(out.router().adopt_link(UniqueFd(sv[0]), in.id(), true, now, wire::kLatencyLane), 0);
    ASSERT_EQ(in.router().adopt_link(UniqueFd(sv[1]), out.id(), false, now, wire::kLatencyLane),
              0);
  }
}

void FakeHost::events(int64_t now) {
  epoll_event ev[16];
  int n = ::epoll_wait(epoll_, ev, 16, 0);
  for (int i = 0; i < n; ++i) router_->on_event(ev[i].data.u64, ev[i].events, now);
}

bool RouterPair::run_until(const std::function<bool()>& pred, int passes, int64_t dt) {
  for (int i = 0; i < passes; ++i) {
    if (pred()) return true;
    now += dt;
    if (h1) h1->events(now);
    if (h2) h2->events(now);
    if (h1) h1->router().poll(now);
    if (h2) h2->router().poll(now);
  }
  return pred();
}

void RouterPair::run(int passes, int64_t dt) {
  run_until([] { return false; }, passes, dt);
}

void RouterPair::run_only_h1(int64_t duration, int64_t dt) {
  for (int64_t t = 0; t < duration; t += dt) {
    now += dt;
    h1->events(now);
    h1->router().poll(now);
  }
}

int RouterPair::connect_one(FakeQp& a, FakeQp& b) {
  FakeHost& ha = (a.qpn >> 16) == 1 ? *h1 : *h2;
  int status = -1;
  ha.router().connect_qp(a.qpn, a.info(), b.client->ipv4, b.qpn,
                         [&](int st, uint32_t) { status = st; });
  run_until([&] { return status != -1; }, 1000);
  return status;
}

void RouterPair::connect(FakeQp& a, FakeQp& b) {
  a.peer_ipv4 = b.client->ipv4;
  a.peer_qpn = b.qpn;
  b.peer_ipv4 = a.client->ipv4;
  b.peer_qpn = a.qpn;
  a.set_state(IBV_QPS_RTS);
  b.set_state(IBV_QPS_RTS);
  ASSERT_EQ(connect_one(a, b), 0);
  ASSERT_EQ(connect_one(b, a), 0);
}

void RouterPair::cut_links() {
  for (int fd : link_fds_) ::shutdown(fd, SHUT_RDWR);
}

void RouterPair::cut_bulk_links(uint32_t k) {
  for (size_t i = 2 * (k - 1); i < 2 * k && i < bulk_fds_.size(); ++i)
    ::shutdown(bulk_fds_[i], SHUT_RDWR);
}

void RouterPair::cut_latency_links() {
  for (int fd : latency_fds_) ::shutdown(fd, SHUT_RDWR);
}

std::optional<Router::LinkInfo> RouterPair::link_of(FakeHost& h, bool outbound, uint32_t lane) {
  for (const auto& l : h.router().links())
    if (l.outbound == outbound && l.lane == lane) return l;
  return std::nullopt;
}

// ---- a connected RC pair -----------------------------------------------------------------

void RoutedRc::SetUp() {
  start();
  c1 = &h1->client("10.1.0.5");
  c2 = &h2->client("10.2.0.5");
  m1 = &c1->reg_mr(2 << 20, kAllAccess);
  m2 = &c2->reg_mr(2 << 20, kAllAccess);
  auto [x, y] = new_pair();
  a = x;
  b = y;
}

std::pair<FakeQp*, FakeQp*> RoutedRc::new_pair(FakeQp::Options oa, FakeQp::Options ob,
                                               bool connect_now) {
  FakeQp* x = &h1->qp(*c1, IBV_QPT_RC, oa);
  FakeQp* y = &h2->qp(*c2, IBV_QPT_RC, ob);
  if (connect_now) connect(*x, *y);
  return {x, y};
}

std::vector<ibv_wc> RoutedRc::send_completions(FakeQp& q, size_t n, int passes, int64_t dt) {
  std::vector<ibv_wc> got;
  run_until(
      [&] {
        for (auto& wc : q.poll_send()) got.push_back(wc);
        return got.size() >= n;
      },
      passes, dt);
  return got;
}

std::vector<RecvCompletion> RoutedRc::recv_completions(FakeQp& q, size_t n, int passes) {
  std::vector<RecvCompletion> got;
  run_until(
      [&] {
        for (auto& c : q.poll_recv()) got.push_back(c);
        return got.size() >= n;
      },
      passes);
  return got;
}

void RoutedRc::post_rdma(FakeQp& q, uint64_t wr_id, ibv_wr_opcode op, ibv_sge sge, uint64_t raddr,
                         uint32_t rkey, uint32_t flags) {
  ibv_send_wr wr = make_wr(wr_id, op, &sge, 1, flags);
  if (op == IBV_WR_ATOMIC_CMP_AND_SWP || op == IBV_WR_ATOMIC_FETCH_AND_ADD) {
    wr.wr.atomic.remote_addr = raddr;
    wr.wr.atomic.rkey = rkey;
    wr.wr.atomic.compare_add = 1;
  } else {
    wr.wr.rdma.remote_addr = raddr;
    wr.wr.rdma.rkey = rkey;
  }
  q.post_send(wr);
}

bool RoutedRc::has_fatal(FakeHost& h, uint32_t qpn, proto::FatalReason why) const {
  for (const Fatal& f : h.fatals)
    if (f.qpn == qpn && f.why == why) return true;
  return false;
}

}  // namespace vrdma::daemon::testing
