// A socket's resources: its event channel and rdma_cm id, and once it has a device its
// endpoint (completion channel, one CQ for both directions, the RC QP, the receive ring and the
// send buffer, both registered); the connection data both sides exchange; address conversion.
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <new>

#include "socket.h"

namespace vrdma::rsock {

namespace {

uint32_t clamp(uint32_t v, uint32_t lo, uint32_t hi) {
  return v < lo ? lo : v > hi ? hi : v;
}

uint32_t pow2_at_least(uint32_t v) {
  uint32_t p = 1;
  while (p < v) p <<= 1;
  return p;
}

uint8_t* map_buffer(size_t len) {
  void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : static_cast<uint8_t*>(p);
}

int set_nonblock(int fd) {
  int fl = fcntl(fd, F_GETFL);
  if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) return errno;
  return 0;
}

// The highest descriptor open in this process, or -1 if /proc cannot say.
int highest_open_fd() {
  DIR* d = ::opendir("/proc/self/fd");
  if (!d) return -1;
  int highest = -1;
  while (dirent* e = ::readdir(d)) {
    char* end = nullptr;
    long v = strtol(e->d_name, &end, 10);
    if (end != e->d_name && *end == 0 && v > highest) highest = int(v);
  }
  ::closedir(d);
  return highest;
}

// Moves the channel to a descriptor numbered above every descriptor open now (dup shares the
// open file description, flags included). Past the descriptor limit the number stays.
void number_above_open(rdma_event_channel* ch) {
  const int highest = highest_open_fd();
  if (highest < 0 || ch->fd > highest) return;
  const int moved = ::fcntl(ch->fd, F_DUPFD_CLOEXEC, highest + 1);
  if (moved < 0) return;
  ::close(ch->fd);
  ch->fd = moved;
}

}  // namespace

rdma_event_channel* socket_channel(int& err) {
  rdma_event_channel* ch = rdma_create_event_channel();
  if (!ch) {
    err = errno ? errno : ENODEV;
    return nullptr;
  }
  number_above_open(ch);
  if ((err = set_nonblock(ch->fd)) != 0) {
    rdma_destroy_event_channel(ch);
    return nullptr;
  }
  return ch;
}

int fail(int err) {
  errno = err;
  return -1;
}

Socket* new_socket(int domain, int& err) {
  auto* s = new (std::nothrow) Socket();
  if (!s) {
    err = ENOMEM;
    return nullptr;
  }
  s->domain = domain;
  s->local.sin_family = AF_INET;
  s->ch = socket_channel(err);
  if (!s->ch) {
    delete s;
    return nullptr;
  }
  if (rdma_create_id(s->ch, &s->id, s, RDMA_PS_TCP)) {
    err = errno;
    rdma_destroy_event_channel(s->ch);
    delete s;
    return nullptr;
  }
  s->fd = s->ch->fd;
  return s;
}

int create_endpoint(Socket& s) {
  rdma_cm_id* id = s.id;
  if (!id->verbs || !id->pd) return EINVAL;
  // Sizes: a ring of R bytes holding at most rq - 2 messages of at least `slot` bytes each.
  s.ring = pow2_at_least(clamp(s.opt.rbuf, kMinBuf, kMaxRing));
  uint32_t rq = clamp(s.opt.rq, kMinQueue, kMaxQueue);
  s.slot = (s.ring / (rq - 2) + kAlign) & ~(kAlign - 1);
  s.rq_depth = rq + kCtrlRecvs;
  s.sq_size = clamp(s.opt.sq, kMinQueue, kMaxQueue);
  s.sbuf_size = (clamp(s.opt.sbuf, kMinBuf, 1u << 30) + kAlign - 1) & ~(kAlign - 1);
  if (s.opt.inline_size > kMaxInline) s.opt.inline_size = kMaxInline;

  bool reused = pool_take(s, cq_entries(s));
  if (!reused) {
    s.cc = ibv_create_comp_channel(id->verbs);
    if (!s.cc) return errno ? errno : ENOMEM;
    if (int e = set_nonblock(s.cc->fd)) return e;
    s.cq = ibv_create_cq(id->verbs, int(cq_entries(s)), &s, s.cc, 0);
    if (!s.cq) return errno ? errno : ENOMEM;
  }
  ibv_qp_init_attr a{};
  a.send_cq = a.recv_cq = s.cq;
  a.qp_type = IBV_QPT_RC;
  a.cap.max_send_wr = s.sq_size;
  a.cap.max_recv_wr = s.rq_depth;
  a.cap.max_send_sge = 2;
  a.cap.max_recv_sge = 1;
  a.cap.max_inline_data =
      s.opt.inline_size > sizeof(IomapEntry) ? s.opt.inline_size : sizeof(IomapEntry);
  if (rdma_create_qp(id, id->pd, &a)) return errno ? errno : ENOMEM;
  s.qp = id->qp;

  if (!reused) {
    s.rbuf = map_buffer(s.ring);
    s.sbuf = map_buffer(s.sbuf_size);
    if (!s.rbuf || !s.sbuf) return ENOMEM;
    s.rmr = ibv_reg_mr(id->pd, s.rbuf, s.ring, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    if (!s.rmr) return errno ? errno : ENOMEM;
    s.smr = ibv_reg_mr(id->pd, s.sbuf, s.sbuf_size, IBV_ACCESS_LOCAL_WRITE);
    if (!s.smr) return errno ? errno : ENOMEM;
  }

  s.rmsg.assign(pow2_at_least(s.rq_depth), RxMsg{});
  s.peer_maps.assign(clamp(s.opt.iomap, 0, kMaxIomap), PeerMap{});
  s.recv_wrs.assign(s.rq_depth, ibv_recv_wr{});
  for (uint32_t i = 0; i < s.rq_depth; ++i) {
    s.recv_wrs[i].wr_id = kRecvId;
    s.recv_wrs[i].next = i + 1 < s.rq_depth ? &s.recv_wrs[i + 1] : nullptr;
  }
  ibv_recv_wr* bad = nullptr;
  if (int e = ibv_post_recv(s.qp, s.recv_wrs.data(), &bad)) return e;
  return 0;
}

ConnData conn_data(const Socket& s) {
  ConnData d{};
  d.magic = kConnMagic;
  d.version = kConnVersion;
  d.iomap_entries = static_cast<uint16_t>(s.peer_maps.size());
  d.ring_addr = reinterpret_cast<uintptr_t>(s.rbuf);
  d.ring_rkey = s.rmr->rkey;
  d.ring_size = s.ring;
  d.ring_slot = s.slot;
  return d;
}

int take_conn_data(Socket& s, const void* data, uint8_t len) {
  if (!data || len < sizeof(ConnData)) return EPROTO;
  ConnData d;
  memcpy(&d, data, sizeof(d));
  if (d.magic != kConnMagic || d.version != kConnVersion) return EPROTO;
  bool pow2 = d.ring_size && !(d.ring_size & (d.ring_size - 1));
  if (!pow2 || d.ring_size < kMinBuf || d.ring_size > kMaxRing || d.ring_slot < kAlign ||
      d.ring_slot % kAlign || d.ring_slot > d.ring_size)
    return EPROTO;
  s.peer_ring_addr = d.ring_addr;
  s.peer_rkey = d.ring_rkey;
  s.peer_ring = d.ring_size;
  s.peer_slot = d.ring_slot;
  s.peer_iomap = d.iomap_entries;
  return 0;
}

uint32_t cq_entries(const Socket& s) { return s.sq_size + s.rq_depth + kCtrlSends; }

void destroy_socket(Socket* s) {
  if (s->id && s->id->qp) rdma_destroy_qp(s->id);
  pool_give(*s);  // the CQ, its channel and the buffers, for the next socket
  if (s->cq && s->unacked) ibv_ack_cq_events(s->cq, s->unacked);
  for (LocalMap& m : s->maps) ibv_dereg_mr(m.mr);
  if (s->rmr) ibv_dereg_mr(s->rmr);
  if (s->smr) ibv_dereg_mr(s->smr);
  if (s->rbuf) munmap(s->rbuf, s->ring);
  if (s->sbuf) munmap(s->sbuf, s->sbuf_size);
  if (s->cq) ibv_destroy_cq(s->cq);
  if (s->cc) ibv_destroy_comp_channel(s->cc);
  if (s->id) rdma_destroy_id(s->id);
  if (s->ch) rdma_destroy_event_channel(s->ch);
  delete s;
}

int to_v4(const sockaddr* sa, socklen_t len, int domain, sockaddr_in& out) {
  if (!sa) return EFAULT;
  out = sockaddr_in{};
  out.sin_family = AF_INET;
  if (sa->sa_family == AF_INET) {
    if (len < sizeof(sockaddr_in)) return EINVAL;
    const auto* in = reinterpret_cast<const sockaddr_in*>(sa);
    out.sin_addr = in->sin_addr;
    out.sin_port = in->sin_port;
    return 0;
  }
  if (sa->sa_family != AF_INET6 || domain != AF_INET6) return EAFNOSUPPORT;
  if (len < sizeof(sockaddr_in6)) return EINVAL;
  const auto* in6 = reinterpret_cast<const sockaddr_in6*>(sa);
  out.sin_port = in6->sin6_port;
  const in6_addr& a = in6->sin6_addr;
  if (IN6_IS_ADDR_UNSPECIFIED(&a)) return 0;
  if (IN6_IS_ADDR_LOOPBACK(&a)) {
    out.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return 0;
  }
  if (IN6_IS_ADDR_V4MAPPED(&a)) {
    memcpy(&out.sin_addr, a.s6_addr + 12, 4);
    return 0;
  }
  return EAFNOSUPPORT;  // vrdma addresses containers by IPv4
}

void from_v4(const Socket& s, const sockaddr_in& in, sockaddr* out, socklen_t* len) {
  if (!len) return;
  if (s.domain == AF_INET6) {
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_port = in.sin_port;
    if (in.sin_addr.s_addr) {
      a.sin6_addr.s6_addr[10] = a.sin6_addr.s6_addr[11] = 0xff;
      memcpy(a.sin6_addr.s6_addr + 12, &in.sin_addr, 4);
    }
    if (out) memcpy(out, &a, *len < sizeof(a) ? *len : sizeof(a));
    *len = sizeof(a);
    return;
  }
  if (out) memcpy(out, &in, *len < sizeof(in) ? *len : sizeof(in));
  *len = sizeof(in);
}

}  // namespace vrdma::rsock
