// vrdma_attacker: a hostile same-tenant program against vrdma's same-host sharing, and the
// cooperating target it attacks.
//
//   vrdma_attacker target [--port N]
//       A victim process (the drop-in libibverbs): MRs of every kind (LOCAL only, REMOTE_READ
//       only, LOCAL_WRITE|REMOTE_READ, REMOTE_WRITE with unregistered canary pages around it,
//       receive buffers, one it deregisters on request), an RC QP whose RTR names the attacker's
//       QP (a legitimately connected peer), and an RC QP that names nobody. It polls its CQ for
//       the whole attack and, at the end, prints one line
//         target: forged=N duplicates=N completions=N memory=ok|CORRUPT ... max_call_ms=N
//       and exits 0 only when nothing an attacker did reached it.
//
//   vrdma_attacker attack NAME TARGET_IP [--port N] [--probe CLIENT:QPN[:KEY...]]...
//       Speaks the control protocol itself (a raw client with its own arena and QP objects)
//       and uses the drop-in library where a QP of its own is needed. Prints
//         attack NAME failed|SUCCEEDED: detail
//       and exits 0 when the attack failed, 3 when it succeeded. NAME is one of:
//         consent      connect to a QP whose RTR does not name us; send to it; probe the victims
//         fds          GetFd of every fd id of the target (arena, backings, ...) over our QP
//         local-mr     GetMr of a LOCAL-only MR, and of memory no receive points into
//         read-only    map a read-only grant writable, mprotect it, reopen it through /proc
//         beyond       write past the pages of a granted MR; grow or seal its backing
//         dereg        keep a mapping of an MR, have it deregistered, write through the mapping
//         forge        push receive completions with indices never posted, repeated, garbage
//         corrupt      scribble on the receive queue's and the ring's indices
//         truncated    hand vrdmad files it could not map safely (unsealed, shrinkable)
//
// Every wait is bounded; the target gives up (exit 1) if its attacker vanishes.
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/protocol.h"
#include "common/unix_socket.h"
#include "shm/layout.h"
#include "shm/peer.h"
#include "shm/respond.h"
#include "shm/rings.h"
#include "shm/shared_file.h"

namespace {

using Clock = std::chrono::steady_clock;
using vrdma::Packet;
namespace proto = vrdma::proto;
namespace shm = vrdma::shm;

constexpr int kPort = 18700;
constexpr int kWaitSeconds = 60;
constexpr uint64_t kPage = 4096;

[[noreturn]] void die(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::fputs("vrdma_attacker: ", stderr);
  std::vfprintf(stderr, fmt, ap);
  std::fputc('\n', stderr);
  va_end(ap);
  std::exit(1);
}

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

// ---- a line protocol over TCP between the attacker and its target ----------------------

struct Line {
  int fd = -1;
  std::string buf;
  void send(const std::string& s) {
    std::string m = s + "\n";
    if (::send(fd, m.data(), m.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(m.size()))
      die("peer gone while sending");
  }
  // A line, or "" after timeout_ms (or when the peer closed: `closed` set).
  std::string recv(int timeout_ms, bool* closed = nullptr) {
    auto end = Clock::now() + std::chrono::milliseconds(timeout_ms);
    for (;;) {
      size_t nl = buf.find('\n');
      if (nl != std::string::npos) {
        std::string l = buf.substr(0, nl);
        buf.erase(0, nl + 1);
        return l;
      }
      int left = static_cast<int>(
          std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now()).count());
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, left > 0 ? left : 0) <= 0) {
        if (left <= 0) return "";
        continue;
      }
      char tmp[512];
      ssize_t n = ::recv(fd, tmp, sizeof(tmp), 0);
      if (n <= 0) {
        if (closed) *closed = true;
        return "";
      }
      buf.append(tmp, static_cast<size_t>(n));
    }
  }
  std::string expect(const char* what) {
    std::string l = recv(kWaitSeconds * 1000);
    if (l.empty()) die("no %s from the peer", what);
    return l;
  }
};

int tcp_listen(int port) {
  int ls = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  ::setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  if (::bind(ls, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || ::listen(ls, 1) != 0)
    die("cannot listen on %d: %s", port, strerror(errno));
  return ls;
}

int tcp_connect(const char* ip, int port) {
  auto end = Clock::now() + std::chrono::seconds(kWaitSeconds);
  while (Clock::now() < end) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    ::inet_pton(AF_INET, ip, &a.sin_addr);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) return fd;
    ::close(fd);
    ::usleep(100000);
  }
  die("cannot connect to %s:%d", ip, port);
}

void mapped_gid(uint32_t ipv4_net, uint8_t* gid) {
  std::memset(gid, 0, 16);
  gid[10] = gid[11] = 0xff;
  std::memcpy(gid + 12, &ipv4_net, 4);
}

// ---- the target --------------------------------------------------------------------------

uint64_t pattern(uint64_t i) { return 0x5a17e5a17e000000ull ^ (i * 0x9e3779b97f4a7c15ull); }

void fill(uint8_t* p, size_t n, uint64_t seed) {
  for (size_t i = 0; i < n; i += 8) {
    uint64_t v = pattern(seed + i);
    std::memcpy(p + i, &v, std::min<size_t>(8, n - i));
  }
}
bool same(const uint8_t* p, size_t n, uint64_t seed) {
  std::vector<uint8_t> want(n);
  fill(want.data(), n, seed);
  return std::memcmp(p, want.data(), n) == 0;
}

struct Region {
  const char* name;
  uint8_t* base;  // page aligned
  size_t pages;
  size_t mr_off, mr_len;  // the MR inside (0 length: no MR)
  int access;
  ibv_mr* mr = nullptr;
  uint64_t seed;
  bool attacker_may_write = false;  // the MR's own pages (a page is the granularity)
};

int target(int port) {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (!list || n < 1) die("no vrdma device");
  ibv_context* ctx = ibv_open_device(list[0]);
  ibv_free_device_list(list);
  if (!ctx) die("ibv_open_device failed");
  ibv_pd* pd = ibv_alloc_pd(ctx);
  ibv_cq* cq = ibv_create_cq(ctx, 1024, nullptr, nullptr, 0);
  if (!pd || !cq) die("pd/cq");

  // Memory: each region is separate pages, with unregistered canary pages around the one that
  // allows remote writes.
  const int kRW = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  std::vector<Region> regions = {
      {"canary-before", nullptr, 1, 0, 0, 0, nullptr, 11},
      {"remote-write", nullptr, 2, 512, 4096, kRW, nullptr, 12, true},
      {"canary-after", nullptr, 1, 0, 0, 0, nullptr, 13},
      {"local-only", nullptr, 2, 0, 8192, IBV_ACCESS_LOCAL_WRITE, nullptr, 14},
      {"read-only", nullptr, 2, 0, 8192, IBV_ACCESS_REMOTE_READ, nullptr, 15},
      {"read-local-write", nullptr, 2, 0, 8192, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ,
       nullptr, 16},
      {"receive", nullptr, 16, 0, 65536, IBV_ACCESS_LOCAL_WRITE, nullptr, 17, true},
      {"deregistered", nullptr, 2, 0, 8192, kRW, nullptr, 18, true},
  };
  size_t total = 0;
  for (auto& r : regions) total += r.pages;
  auto* mem = static_cast<uint8_t*>(::mmap(nullptr, total * kPage, PROT_READ | PROT_WRITE,
                                           MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  if (mem == MAP_FAILED) die("mmap");
  size_t at = 0;
  for (auto& r : regions) {
    r.base = mem + at * kPage;
    at += r.pages;
    fill(r.base, r.pages * kPage, r.seed << 32);
    if (r.mr_len) {
      r.mr = ibv_reg_mr(pd, r.base + r.mr_off, r.mr_len, r.access);
      if (!r.mr) die("ibv_reg_mr(%s): %s", r.name, strerror(errno));
    }
  }
  auto find = [&](const char* name) -> Region& {
    for (auto& r : regions)
      if (!std::strcmp(r.name, name)) return r;
    die("no region %s", name);
  };

  auto make_qp = [&]() {
    ibv_qp_init_attr a{};
    a.send_cq = a.recv_cq = cq;
    a.qp_type = IBV_QPT_RC;
    a.cap.max_send_wr = 16;
    a.cap.max_recv_wr = 16;
    a.cap.max_send_sge = a.cap.max_recv_sge = 1;
    ibv_qp* q = ibv_create_qp(pd, &a);
    if (!q) die("ibv_create_qp: %s", strerror(errno));
    ibv_qp_attr x{};
    x.qp_state = IBV_QPS_INIT;
    x.port_num = 1;
    x.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                        IBV_ACCESS_REMOTE_ATOMIC;
    if (ibv_modify_qp(q, &x, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
      die("INIT");
    return q;
  };
  auto to_rtr_rts = [&](ibv_qp* q, uint32_t dest, uint32_t ip_net) {
    ibv_qp_attr x{};
    x.qp_state = IBV_QPS_RTR;
    x.path_mtu = IBV_MTU_4096;
    x.dest_qp_num = dest;
    x.max_dest_rd_atomic = 4;
    x.min_rnr_timer = 1;
    x.ah_attr.is_global = 1;
    x.ah_attr.port_num = 1;
    mapped_gid(ip_net, x.ah_attr.grh.dgid.raw);
    if (ibv_modify_qp(q, &x,
                      IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                          IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
      die("RTR: %s", strerror(errno));
    ibv_qp_attr y{};
    y.qp_state = IBV_QPS_RTS;
    y.timeout = 12;
    y.retry_cnt = 3;
    y.rnr_retry = 7;
    y.max_rd_atomic = 4;
    if (ibv_modify_qp(q, &y,
                      IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                          IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC))
      die("RTS: %s", strerror(errno));
  };
  ibv_qp* peer_qp = make_qp();  // connected to the attacker
  ibv_qp* lonely = make_qp();   // names nobody
  // Receives the attacker may fill, each with a wr_id the application would dereference.
  std::set<uint64_t> outstanding;
  Region& recv = find("receive");
  uint64_t next_wr = 0x7f0000001000ull;
  double max_call_ms = 0;
  auto post = [&](ibv_qp* q, int i) {
    ibv_sge s{reinterpret_cast<uint64_t>(recv.base + (i % 16) * 4096), 4096, recv.mr->lkey};
    ibv_recv_wr w{};
    w.wr_id = next_wr;
    w.sg_list = &s;
    w.num_sge = 1;
    ibv_recv_wr* bad;
    auto t0 = Clock::now();
    int e = ibv_post_recv(q, &w, &bad);
    max_call_ms = std::max(max_call_ms, ms_since(t0));
    if (e == 0) outstanding.insert(next_wr);
    next_wr += 0x40;
    return e;
  };
  for (int i = 0; i < 8; ++i) post(peer_qp, i);
  for (int i = 0; i < 4; ++i) post(lonely, 8 + i);

  int ls = tcp_listen(port);
  std::printf("target: listening on %d\n", port);
  std::fflush(stdout);
  pollfd lp{ls, POLLIN, 0};
  if (::poll(&lp, 1, kWaitSeconds * 1000) != 1) die("no attacker came");
  sockaddr_in from{};
  socklen_t fl = sizeof(from);
  Line line{::accept(ls, reinterpret_cast<sockaddr*>(&from), &fl)};
  if (line.fd < 0) die("accept");
  std::string hello = line.expect("QP number");
  uint32_t attacker_qpn = static_cast<uint32_t>(std::strtoul(hello.c_str() + 4, nullptr, 0));
  to_rtr_rts(peer_qp, attacker_qpn, from.sin_addr.s_addr);
  // The lonely QP is connected to a QP that does not exist: it names nobody real.
  to_rtr_rts(lonely, 0xFFFFF1, from.sin_addr.s_addr);
  char info[1024];
  std::snprintf(info, sizeof(info),
                "READY %u %u rw=%u:%lu local=%u:%lu ro=%u:%lu rolw=%u:%lu recv=%u:%lu dereg=%u:%lu",
                peer_qp->qp_num, lonely->qp_num, find("remote-write").mr->rkey,
                static_cast<unsigned long>(reinterpret_cast<uint64_t>(find("remote-write").mr->addr)),
                find("local-only").mr->rkey,
                static_cast<unsigned long>(reinterpret_cast<uint64_t>(find("local-only").mr->addr)),
                find("read-only").mr->rkey,
                static_cast<unsigned long>(reinterpret_cast<uint64_t>(find("read-only").mr->addr)),
                find("read-local-write").mr->rkey,
                static_cast<unsigned long>(
                    reinterpret_cast<uint64_t>(find("read-local-write").mr->addr)),
                recv.mr->rkey, static_cast<unsigned long>(reinterpret_cast<uint64_t>(recv.mr->addr)),
                find("deregistered").mr->rkey,
                static_cast<unsigned long>(reinterpret_cast<uint64_t>(find("deregistered").mr->addr)));
  line.send(info);

  // Serve: poll completions, keep receives posted, deregister on request, until DONE.
  uint64_t forged = 0, duplicates = 0, completions = 0, errors = 0;
  std::set<uint64_t> completed;
  bool done = false, closed = false;
  auto deadline = Clock::now() + std::chrono::seconds(2 * kWaitSeconds);
  int posted = 12;
  while (!done && Clock::now() < deadline) {
    ibv_wc wc[16];
    auto t0 = Clock::now();
    int got = ibv_poll_cq(cq, 16, wc);
    max_call_ms = std::max(max_call_ms, ms_since(t0));
    for (int i = 0; i < got; ++i) {
      ++completions;
      if (wc[i].status != IBV_WC_SUCCESS) ++errors;
      if (wc[i].opcode & IBV_WC_RECV) {
        if (completed.count(wc[i].wr_id)) ++duplicates;
        else if (!outstanding.count(wc[i].wr_id)) ++forged;
        outstanding.erase(wc[i].wr_id);
        completed.insert(wc[i].wr_id);
        if (wc[i].status == IBV_WC_SUCCESS && wc[i].qp_num == peer_qp->qp_num)
          post(peer_qp, posted++);
      }
    }
    std::string cmd = line.recv(got ? 0 : 5, &closed);
    if (closed) break;
    if (cmd == "DEREG") {
      Region& d = find("deregistered");
      if (ibv_dereg_mr(d.mr)) die("ibv_dereg_mr");
      d.mr = nullptr;
      d.attacker_may_write = false;  // from now on nothing may reach it
      fill(d.base, d.pages * kPage, d.seed << 32);
      line.send("DEREGGED");
    } else if (cmd == "DONE") {
      done = true;
    }
  }
  // The memory the attacker must not have reached: every page outside the MRs it may write.
  std::string bad;
  for (auto& r : regions) {
    if (r.attacker_may_write) continue;
    if (!same(r.base, r.pages * kPage, r.seed << 32)) bad += std::string(" ") + r.name;
  }
  bool ok = forged == 0 && duplicates == 0 && bad.empty() && done && max_call_ms < 1000;
  std::printf(
      "target: forged=%llu duplicates=%llu completions=%llu errors=%llu memory=%s%s "
      "max_call_ms=%.1f attack_finished=%d\n",
      static_cast<unsigned long long>(forged), static_cast<unsigned long long>(duplicates),
      static_cast<unsigned long long>(completions), static_cast<unsigned long long>(errors),
      bad.empty() ? "ok" : "CORRUPT:", bad.c_str(), max_call_ms, done ? 1 : 0);
  std::fflush(stdout);
  if (!closed) line.send(ok ? "TARGET-OK" : "TARGET-HIT");
  return ok ? 0 : 1;
}

// ---- the attacker's own raw client -------------------------------------------------------

struct Raw {
  int fd = -1;
  uint32_t seq = 1;
  uint32_t id = 0;
  uint32_t ipv4 = 0;
  uint32_t next_fd = 2;
  std::unique_ptr<Packet> pkt = std::make_unique<Packet>();

  // Sends a request, returns the reply's status (-1: no reply); the reply stays in pkt.
  int call(proto::Op op, const void* req, size_t len, const int* fds = nullptr, int nfds = 0) {
    uint32_t s = seq++;
    if (vrdma::send_packet(fd, op, s, 0, req, len, std::span<const int>(fds, nfds)) != 0)
      return -1;
    auto end = Clock::now() + std::chrono::seconds(10);
    while (Clock::now() < end) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 1000) <= 0) continue;
      pkt->close_fds();
      if (vrdma::recv_packet(fd, *pkt, MSG_DONTWAIT) < 0) return -1;
      if (pkt->header.seq == s) return pkt->header.status;
    }
    return -1;
  }
  template <typename T>
  int call(proto::Op op, const T& req, const int* fds = nullptr, int nfds = 0) {
    return call(op, &req, sizeof(req), fds, nfds);
  }
  int put(uint32_t fd_id, proto::FdKind kind, int f, uint64_t size) {
    proto::PutFdReq r{fd_id, static_cast<uint32_t>(kind), size, 0, 0};
    return call(proto::Op::kPutFd, r, &f, 1);
  }
  // A descriptor of `owner`'s, or -errno (or -1000 - status when refused).
  int get_fd(uint32_t owner, uint32_t fd_id, uint32_t via) {
    proto::GetFdReq r{owner, fd_id, via, 0};
    int st = call(proto::Op::kGetFd, r);
    if (st != 0) return -1000 - st;
    if (pkt->nfds != 1) return -1;
    int f = pkt->fds[0];
    pkt->nfds = 0;
    return f;
  }
};

// A minimal but valid client: arena, key table, one RC QP (object handed over).
struct RawClient {
  Raw raw;
  int arena = -1, keys = -1, object = -1;
  uint32_t qpn = 0;

  void open() {
    raw.fd = vrdma::unix_connect(vrdma::socket_path_from_env());
    if (raw.fd < 0) die("cannot reach vrdmad");
    proto::HelloReq h{proto::kVersion, static_cast<uint32_t>(proto::ClientKind::kVerbs)};
    if (raw.call(proto::Op::kHello, h) != 0) die("hello refused");
    const auto* rep = raw.pkt->as<proto::HelloRep>();
    if (!rep) die("bad hello");
    raw.id = rep->client_id;
    raw.ipv4 = rep->ipv4;
    const uint64_t asize = 1 << 20;
    if (shm::create_sealed("attacker-arena", asize, false, arena)) die("memfd");
    auto* a = static_cast<shm::ArenaHeader*>(
        ::mmap(nullptr, asize, PROT_READ | PROT_WRITE, MAP_SHARED, arena, 0));
    a->magic = shm::kArenaMagic;
    a->version = shm::kArenaVersion;
    a->size = asize;
    if (raw.put(shm::kArenaFdId, proto::FdKind::kArena, arena, asize)) die("arena refused");
    if (shm::create_sealed("attacker-keys", 20480, true, keys)) die("memfd");
    ::fcntl(keys, F_ADD_SEALS, F_SEAL_FUTURE_WRITE);
    if (raw.put(shm::kKeyTableFdId, proto::FdKind::kKeyTable, keys, 20480)) die("keys refused");
    if (shm::create_sealed("attacker-qp", 8192, false, object)) die("memfd");
    auto* o = static_cast<shm::QpObject*>(
        ::mmap(nullptr, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, object, 0));
    o->hdr = shm::ObjectHeader{shm::kObjectMagic, shm::kArenaVersion, 1, raw.id, 8192, 1024, 0,
                               192, 0};
    shm::ring_init(reinterpret_cast<shm::RecvRing*>(reinterpret_cast<uint8_t*>(o) + 192), 4);
    shm::rq_init(reinterpret_cast<shm::RecvQueue*>(reinterpret_cast<uint8_t*>(o) + 1024), 4, 1);
    uint32_t oid = raw.next_fd++;
    if (raw.put(oid, proto::FdKind::kQpObject, object, 8192)) die("qp object refused");
    proto::AllocQpnReq q{static_cast<uint32_t>(proto::QpType::kRc), 4096, oid, 0, 0, 1};
    if (raw.call(proto::Op::kAllocQpn, q) != 0) die("AllocQpn refused");
    qpn = raw.pkt->as<proto::AllocQpnRep>()->qpn;
  }
  // ConnectQp: its status; on success the owner and the destination's object fd id.
  int connect(uint32_t dest, uint32_t ip_net, uint32_t* owner, uint32_t* obj) {
    proto::ConnectQpReq r{};
    r.local_qpn = qpn;
    r.dest_qpn = dest;
    mapped_gid(ip_net, r.dest_gid);
    int st = raw.call(proto::Op::kConnectQp, r);
    if (st == 0) {
      const auto* rep = raw.pkt->as<proto::ConnectQpRep>();
      if (owner) *owner = rep->peer_client;
      if (obj) *obj = rep->peer_object_fd_id;
    }
    return st;
  }
};

// shm::Peer's descriptors through the raw client: the hostile library has the same machinery
// an honest one has.
class RawSource : public shm::FdSource {
 public:
  explicit RawSource(Raw& r) : r_(r) {}
  int fetch_fd(uint32_t owner, uint32_t fd_id, uint32_t via, int& fd) override {
    int f = r_.get_fd(owner, fd_id, via);
    if (f < 0) return f <= -1000 ? -(f + 1000) : EPROTO;
    fd = f;
    return 0;
  }
  int grant_mr(uint32_t owner, uint32_t via, uint32_t key, uint32_t access,
               shm::MrGrant& out) override {
    proto::GetMrReq q{owner, via, key, access};
    int st = r_.call(proto::Op::kGetMr, q);
    const auto* rep = r_.pkt->as<proto::GetMrRep>();
    if (st || !rep || rep->nseg > shm::kMaxMrSegments || r_.pkt->nfds != int(rep->nseg))
      return st ? st : EPROTO;
    out.slot = rep->slot;
    out.gen = rep->gen;
    out.access = rep->access;
    out.pd = rep->pd;
    out.nseg = rep->nseg;
    out.writable = rep->writable;
    out.iova = rep->iova;
    out.length = rep->length;
    out.va_offset = rep->va_offset;
    out.map_length = rep->map_length;
    for (uint32_t i = 0; i < rep->nseg; ++i) {
      out.seg[i] = {rep->seg[i].fd_id, rep->seg[i].offset, rep->seg[i].length};
      out.fds[i] = r_.pkt->fds[i];
    }
    r_.pkt->nfds = 0;
    return 0;
  }

 private:
  Raw& r_;
};

// ---- faults in the attacker's own address space ------------------------------------------

sigjmp_buf* volatile g_jump = nullptr;  // volatile: the handler reads it
void on_fault(int) {
  if (g_jump) siglongjmp(*g_jump, 1);
  _exit(99);
}
// Writes `len` bytes at p; false when the kernel refused (SIGBUS, SIGSEGV).
bool try_write(volatile uint8_t* p, size_t len, uint8_t v) {
  struct sigaction sa {};
  sa.sa_handler = on_fault;
  sa.sa_flags = SA_NODEFER;
  sigaction(SIGBUS, &sa, nullptr);
  sigaction(SIGSEGV, &sa, nullptr);
  sigjmp_buf jb;
  if (sigsetjmp(jb, 1)) {
    g_jump = nullptr;
    return false;
  }
  g_jump = &jb;
  for (size_t i = 0; i < len; ++i) p[i] = v;
  g_jump = nullptr;
  return true;
}

// ---- the attacks -------------------------------------------------------------------------

struct TargetInfo {
  uint32_t qpn = 0, lonely = 0;
  struct Mr {
    uint32_t key = 0;
    uint64_t addr = 0;
  } rw, local, ro, rolw, recv, dereg;
};

TargetInfo parse_ready(const std::string& l) {
  TargetInfo t;
  unsigned long a[6];
  unsigned k[6];
  if (std::sscanf(l.c_str(),
                  "READY %u %u rw=%u:%lu local=%u:%lu ro=%u:%lu rolw=%u:%lu recv=%u:%lu dereg=%u:%lu",
                  &t.qpn, &t.lonely, &k[0], &a[0], &k[1], &a[1], &k[2], &a[2], &k[3], &a[3],
                  &k[4], &a[4], &k[5], &a[5]) != 14)
    die("bad READY line: %s", l.c_str());
  TargetInfo::Mr* m[6] = {&t.rw, &t.local, &t.ro, &t.rolw, &t.recv, &t.dereg};
  for (int i = 0; i < 6; ++i) *m[i] = {k[i], a[i]};
  return t;
}

struct Probe {
  uint32_t client = 0, qpn = 0;
  std::vector<uint32_t> keys;
};

struct Attack {
  std::string name;
  RawClient me;
  Line line;
  TargetInfo t;
  uint32_t target_ip = 0;
  uint32_t owner = 0, obj = 0;
  std::vector<Probe> probes;
  std::vector<std::string> wins;  // what worked (the attack succeeded if any)
  std::vector<std::string> notes;

  void won(const std::string& s) { wins.push_back(s); }
  void note(const std::string& s) { notes.push_back(s); }

  int get_mr(uint32_t key, uint32_t access, proto::GetMrRep* rep, std::vector<int>* fds) {
    proto::GetMrReq q{owner, me.qpn, key, access};
    int st = me.raw.call(proto::Op::kGetMr, q);
    if (st == 0 && rep) *rep = *me.raw.pkt->as<proto::GetMrRep>();
    if (fds)
      for (int i = 0; i < me.raw.pkt->nfds; ++i) fds->push_back(me.raw.pkt->fds[i]);
    else
      me.raw.pkt->close_fds();
    me.raw.pkt->nfds = 0;
    return st;
  }

  // Connected the honest way: the target's RTR names our QP, ours names its.
  void connect_for_real() {
    int st = me.connect(t.qpn, target_ip, &owner, &obj);
    if (st != 0) die("ConnectQp to the agreed QP failed: %s", strerror(st));
  }

  void consent();
  void fds();
  void local_mr();
  void read_only();
  void beyond();
  void dereg();
  void forge();
  void corrupt();
  void truncated();
};

void Attack::consent() {
  // 1. The target's QP that names nobody: vrdmad says not ready, and grants nothing.
  int st = me.connect(t.lonely, target_ip, nullptr, nullptr);
  if (st == 0) won("ConnectQp to a QP whose RTR does not name us succeeded");
  else note("ConnectQp to the lonely QP: " + std::string(strerror(st)));
  // Guessing its owner and descriptors over that QP.
  for (uint32_t client = 1; client < 64; ++client)
    for (uint32_t fd_id = 0; fd_id < 48; ++fd_id) {
      int f = me.raw.get_fd(client, fd_id, me.qpn);
      if (f >= 0) {
        ::close(f);
        if (client != me.raw.id) won("GetFd of client " + std::to_string(client) + " fd " +
                                     std::to_string(fd_id) + " without consent");
      }
    }
  // 2. Through the library: an RC QP whose RTR names the lonely QP, sending to it.
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  ibv_context* ctx = list && n ? ibv_open_device(list[0]) : nullptr;
  if (list) ibv_free_device_list(list);
  if (!ctx) die("no device");
  ibv_pd* pd = ibv_alloc_pd(ctx);
  ibv_cq* cq = ibv_create_cq(ctx, 16, nullptr, nullptr, 0);
  ibv_qp_init_attr ia{};
  ia.send_cq = ia.recv_cq = cq;
  ia.qp_type = IBV_QPT_RC;
  ia.cap.max_send_wr = ia.cap.max_recv_wr = 4;
  ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
  ia.cap.max_inline_data = 64;
  ibv_qp* q = ibv_create_qp(pd, &ia);
  ibv_qp_attr x{};
  x.qp_state = IBV_QPS_INIT;
  x.port_num = 1;
  ibv_modify_qp(q, &x, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
  x = {};
  x.qp_state = IBV_QPS_RTR;
  x.path_mtu = IBV_MTU_1024;
  x.dest_qp_num = t.lonely;
  x.ah_attr.is_global = 1;
  x.ah_attr.port_num = 1;
  mapped_gid(target_ip, x.ah_attr.grh.dgid.raw);
  ibv_modify_qp(q, &x, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                           IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
  x = {};
  x.qp_state = IBV_QPS_RTS;
  x.timeout = 8;  // ~1 ms
  x.retry_cnt = 2;
  x.rnr_retry = 0;
  ibv_modify_qp(q, &x, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                           IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC);
  char msg[32] = "unwanted";
  ibv_sge sge{reinterpret_cast<uint64_t>(msg), sizeof(msg), 0};
  ibv_send_wr wr{}, *bad;
  wr.opcode = IBV_WR_SEND;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
  if (ibv_post_send(q, &wr, &bad)) die("post_send");
  ibv_wc wc{};
  auto end = Clock::now() + std::chrono::seconds(10);
  int got = 0;
  while (Clock::now() < end && (got = ibv_poll_cq(cq, 1, &wc)) == 0) ::usleep(1000);
  if (got != 1) won("the send to the lonely QP never completed");
  else if (wc.status == IBV_WC_SUCCESS) won("a send to a QP that did not name us was delivered");
  else note(std::string("send to the lonely QP: ") + ibv_wc_status_str(wc.status));
  ibv_destroy_qp(q);
  ibv_destroy_cq(cq);
  ibv_dealloc_pd(pd);
  ibv_close_device(ctx);
  // 3. The victims of the other pair: their QPs, descriptors and keys.
  for (const Probe& p : probes) {
    if (me.connect(p.qpn, 0, nullptr, nullptr) == 0)
      won("ConnectQp to victim QP " + std::to_string(p.qpn) + " succeeded");
    for (uint32_t fd_id = 0; fd_id < 64; ++fd_id) {
      int f = me.raw.get_fd(p.client, fd_id, me.qpn);
      if (f >= 0) {
        ::close(f);
        won("GetFd of victim client " + std::to_string(p.client) + " fd " + std::to_string(fd_id));
      }
    }
    for (uint32_t key : p.keys)
      for (uint32_t acc : {uint32_t(IBV_ACCESS_REMOTE_READ), uint32_t(IBV_ACCESS_REMOTE_WRITE),
                           uint32_t(IBV_ACCESS_LOCAL_WRITE)}) {
        proto::GetMrReq g{p.client, me.qpn, key, acc};
        if (me.raw.call(proto::Op::kGetMr, g) == 0) won("GetMr of a victim's key");
        me.raw.pkt->close_fds();
      }
  }
}

void Attack::fds() {
  connect_for_real();
  // Every descriptor id the target might have, over the connection we legitimately hold.
  int granted = 0;
  for (uint32_t fd_id = 0; fd_id < 256; ++fd_id) {
    int f = me.raw.get_fd(owner, fd_id, me.qpn);
    if (f < 0) continue;
    ++granted;
    char path[64], what[128] = {};
    std::snprintf(path, sizeof(path), "/proc/self/fd/%d", f);
    ssize_t n = ::readlink(path, what, sizeof(what) - 1);
    std::string kind = n > 0 ? what : "?";
    note("fd " + std::to_string(fd_id) + ": " + kind);
    if (kind.find("arena") != std::string::npos) won("GetFd gave the arena");
    if (kind.find("vrdma-mr") != std::string::npos) won("GetFd gave a memory backing by id");
    if (kind.find("vrdma-keys") != std::string::npos) {
      void* p = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0);
      if (p != MAP_FAILED) won("the key table mapped writable");
      int rw = ::open(path, O_RDWR);
      if (rw >= 0) {
        void* q = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, rw, 0);
        if (q != MAP_FAILED) won("the key table, reopened, mapped writable");
        ::close(rw);
      }
    }
    if (kind.find("vrdma-qp") != std::string::npos && fd_id != obj)
      won("GetFd gave another QP's object");
    ::close(f);
  }
  if (granted > 4) won(std::to_string(granted) + " descriptors granted");
}

void Attack::local_mr() {
  connect_for_real();
  for (uint32_t acc : {uint32_t(IBV_ACCESS_REMOTE_READ), uint32_t(IBV_ACCESS_REMOTE_WRITE),
                       uint32_t(IBV_ACCESS_REMOTE_ATOMIC), uint32_t(IBV_ACCESS_LOCAL_WRITE)})
    if (get_mr(t.local.key, acc, nullptr, nullptr) == 0)
      won("GetMr of the LOCAL-only MR (access " + std::to_string(acc) + ")");
  // Receive buffers are the documented exception: granted while a receive points into them,
  // and only those; never for remote access.
  if (get_mr(t.recv.key, IBV_ACCESS_REMOTE_WRITE, nullptr, nullptr) == 0)
    won("GetMr of receive buffers for REMOTE_WRITE");
  if (get_mr(t.ro.key, IBV_ACCESS_LOCAL_WRITE, nullptr, nullptr) == 0)
    won("GetMr of a read-only MR as a receive buffer");
  if (get_mr(t.recv.key, IBV_ACCESS_LOCAL_WRITE, nullptr, nullptr) != 0)
    note("the receive buffers were not granted (no receive posted?)");
  // Keys of nobody, keys with the slot guessed.
  for (uint32_t k = 1; k < 4096; k += 7)
    if (get_mr(k, IBV_ACCESS_REMOTE_READ, nullptr, nullptr) == 0) won("GetMr of a guessed key");
}

void Attack::read_only() {
  connect_for_real();
  for (TargetInfo::Mr* m : {&t.ro, &t.rolw}) {
    if (get_mr(m->key, IBV_ACCESS_REMOTE_WRITE, nullptr, nullptr) == 0)
      won("GetMr of a read-only MR for writing");
    proto::GetMrRep rep{};
    std::vector<int> fds;
    if (get_mr(m->key, IBV_ACCESS_REMOTE_READ, &rep, &fds) != 0) {
      note("read grant refused");
      continue;
    }
    if (rep.writable) won("a read grant came writable");
    for (size_t i = 0; i < fds.size(); ++i) {
      int f = fds[i];
      struct stat st {};
      ::fstat(f, &st);
      size_t len = static_cast<size_t>(st.st_size);
      void* p = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0);
      if (p != MAP_FAILED) won("a read-only grant mapped writable");
      void* r = ::mmap(nullptr, len, PROT_READ, MAP_SHARED, f, 0);
      if (r != MAP_FAILED && ::mprotect(r, len, PROT_READ | PROT_WRITE) == 0)
        won("a read-only mapping made writable with mprotect");
      if (::pwrite(f, "x", 1, 0) == 1) won("pwrite through a read-only grant");
      // Reopened through /proc: the file itself refuses new writable mappings.
      char path[64];
      std::snprintf(path, sizeof(path), "/proc/self/fd/%d", f);
      int rw = ::open(path, O_RDWR);
      if (rw >= 0) {
        note("reopened read-write through /proc (the seal must stop it)");
        void* w = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, rw, 0);
        if (w != MAP_FAILED) {
          won("a reopened read-only grant mapped writable");
          try_write(static_cast<uint8_t*>(w), len, 0xEE);
        }
        if (::pwrite(rw, "x", 1, 0) == 1) won("pwrite through a reopened read-only grant");
        if (::fcntl(rw, F_ADD_SEALS, F_SEAL_WRITE) == 0) won("sealed the victim's backing");
        ::close(rw);
      }
      ::close(f);
    }
  }
}

void Attack::beyond() {
  connect_for_real();
  proto::GetMrRep rep{};
  std::vector<int> fds;
  if (get_mr(t.rw.key, IBV_ACCESS_REMOTE_WRITE, &rep, &fds) != 0) {
    won("the remote-write MR was not granted at all (the test's premise)");
    return;
  }
  if (rep.map_length != 2 * kPage) won("the grant spans more than the MR's pages");
  for (size_t i = 0; i < fds.size(); ++i) {
    int f = fds[i];
    struct stat st {};
    ::fstat(f, &st);
    size_t size = static_cast<size_t>(st.st_size);
    if (size > rep.map_length) won("a backing holds more pages than the MR's");
    // Map more than the file and write past its end.
    size_t len = size + 4 * kPage;
    auto* p = static_cast<uint8_t*>(
        ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0));
    if (p == MAP_FAILED) continue;
    try_write(p, size, 0xEE);  // the MR's own pages: allowed
    if (try_write(p + size, kPage, 0xEE)) won("wrote past the end of a backing");
    // Offsets beyond the file.
    auto* q = static_cast<uint8_t*>(::mmap(nullptr, kPage, PROT_READ | PROT_WRITE, MAP_SHARED, f,
                                           static_cast<off_t>(size + kPage)));
    if (q != MAP_FAILED && try_write(q, 8, 0xEE)) won("wrote at an offset beyond a backing");
    if (::ftruncate(f, static_cast<off_t>(size + 16 * kPage)) == 0) won("grew a backing");
    if (::ftruncate(f, 0) == 0) won("shrank a backing");
    if (::fcntl(f, F_ADD_SEALS, F_SEAL_FUTURE_WRITE) == 0) won("sealed a backing against others");
    ::close(f);
  }
}

void Attack::dereg() {
  connect_for_real();
  proto::GetMrRep rep{};
  std::vector<int> fds;
  if (get_mr(t.dereg.key, IBV_ACCESS_REMOTE_WRITE, &rep, &fds) != 0) {
    won("the MR to be deregistered was not granted (the test's premise)");
    return;
  }
  std::vector<std::pair<uint8_t*, size_t>> maps;
  for (int f : fds) {
    struct stat st {};
    ::fstat(f, &st);
    auto* p = static_cast<uint8_t*>(::mmap(nullptr, static_cast<size_t>(st.st_size),
                                           PROT_READ | PROT_WRITE, MAP_SHARED, f, 0));
    if (p != MAP_FAILED) maps.push_back({p, static_cast<size_t>(st.st_size)});
    ::close(f);
  }
  line.send("DEREG");
  if (line.expect("DEREGGED") != "DEREGGED") die("target did not deregister");
  // The old mapping: still ours, but it must no longer be the target's memory.
  for (auto& [p, n] : maps) try_write(p, n, 0xEE);
  if (get_mr(t.dereg.key, IBV_ACCESS_REMOTE_WRITE, nullptr, nullptr) == 0)
    won("GetMr of a deregistered key");
  note("wrote over " + std::to_string(maps.size()) + " old mapping(s)");
}

void Attack::forge() {
  connect_for_real();
  RawSource src(me.raw);
  auto peer = std::make_shared<shm::Peer>(src, owner);
  shm::PeerQp dst;
  if (int e = shm::attach_peer_qp(peer, obj, me.qpn, dst)) {
    won(std::string("could not map the QP object we may reach: ") + strerror(e));
    return;
  }
  // One honest SEND first (data into a posted receive, a proper report): the channel works.
  shm::Incoming in;
  in.opcode = IBV_WR_SEND;
  in.qp_type = IBV_QPT_RC;
  in.src_qpn = me.qpn;
  in.length = 16;
  shm::Placement pl;
  shm::admit_request(dst, in, pl);
  if (pl.admission == shm::Admission::kDone && pl.status == IBV_WC_SUCCESS) {
    uint8_t data[16] = "honest message";
    shm::Seg s{data, 16};
    shm::copy_segs(pl.segs, pl.nsegs, &s, 1, 16);
    if (!shm::commit_request(dst, pl, 16)) note("honest completion not delivered");
    // The same report again: a repeated index.
    shm::ring_push(dst.ring, pl.report);
  } else {
    note("no honest send possible");
  }
  // Forgeries: indices never posted, far ahead, behind, garbage fields, huge lengths.
  shm::RecvReport r;
  uint64_t forged_indices[] = {0, 1, 2, 1000, 1ull << 40, ~0ull, ~0ull - 1, 17, 3 + (1ull << 33)};
  int pushed = 0;
  for (uint64_t idx : forged_indices)
    for (uint8_t status : {uint8_t(0), uint8_t(1), uint8_t(2), uint8_t(7)}) {
      r = shm::RecvReport{};
      r.index = idx;
      r.status = status;
      r.byte_len = 0xFFFFFFFF;
      r.flags = 0xFF;
      r.opcode = 9;
      if (shm::ring_push(dst.ring, r) == shm::RingResult::kOk) ++pushed;
      r.flags = 0;
      r.opcode = 0;
      r.byte_len = 8;
      if (shm::ring_push(dst.ring, r) == shm::RingResult::kOk) ++pushed;
      ::usleep(2000);
    }
  // Raw bytes straight into cells, with whatever sequence numbers.
  for (uint32_t i = 0; i <= dst.ring.mask; ++i) {
    shm::RecvCqe& c = dst.ring.ring->entries[i];
    c.index = 0x4141414141414141ull;
    c.byte_len = 0x42424242;
    c.seq.store(i + 1, std::memory_order_release);
  }
  if (dst.notify_efd >= 0) {
    uint64_t one = 1;
    for (int i = 0; i < 100; ++i) {
      [[maybe_unused]] ssize_t n = ::write(dst.notify_efd, &one, 8);
    }
  }
  note("pushed " + std::to_string(pushed) + " forged reports");
  ::usleep(300000);  // let the target poll them
}

void Attack::corrupt() {
  connect_for_real();
  RawSource src(me.raw);
  auto peer = std::make_shared<shm::Peer>(src, owner);
  shm::PeerQp dst;
  if (int e = shm::attach_peer_qp(peer, obj, me.qpn, dst)) {
    won(std::string("could not map the QP object we may reach: ") + strerror(e));
    return;
  }
  auto* rq = dst.rq.rq;
  auto* ring = dst.ring.ring;
  for (int round = 0; round < 50; ++round) {
    rq->head.store(0xdead0000beefull + round);
    rq->tail.store(~0ull);
    for (uint32_t i = 0; i <= dst.rq.mask; ++i)
      dst.rq.entry(i)->seq.store((1ull << 50) + i * 977 + round);
    ring->tail.store(0x1234567890ull);
    for (uint32_t i = 0; i <= dst.ring.mask; ++i) ring->entries[i].seq.store(~0ull - i);
    ring->armed.store(7);
    dst.attrs->state.store(IBV_QPS_RTS);
    dst.attrs->gone.store(0);
    ::usleep(10000);
  }
  // Our own consumer side must stay bounded too.
  shm::RecvWr w;
  auto t0 = Clock::now();
  shm::RingResult res = shm::rq_take(dst.rq, w);
  note("rq_take on the corrupt queue: " + std::to_string(int(res)) + " after " +
       std::to_string(ms_since(t0)) + " ms");
}

void Attack::truncated() {
  // A fresh raw client handing vrdmad files it could not map safely.
  Raw r;
  r.fd = vrdma::unix_connect(vrdma::socket_path_from_env());
  proto::HelloReq h{proto::kVersion, static_cast<uint32_t>(proto::ClientKind::kVerbs)};
  if (r.call(proto::Op::kHello, h) != 0) die("hello refused");
  r.id = r.pkt->as<proto::HelloRep>()->client_id;
  auto loose = [](uint64_t size, int seals) {
    int f = ::memfd_create("loose", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    ::ftruncate(f, static_cast<off_t>(size));
    if (seals) ::fcntl(f, F_ADD_SEALS, seals);
    return f;
  };
  struct Case {
    const char* what;
    proto::FdKind kind;
    uint32_t id;
    int seals;
  } cases[] = {
      {"an arena that can shrink", proto::FdKind::kArena, 0, 0},
      {"an arena sealed against growing only", proto::FdKind::kArena, 0, F_SEAL_GROW},
      {"a QP object that can shrink", proto::FdKind::kQpObject, 5, F_SEAL_GROW},
      {"memory that can shrink", proto::FdKind::kMemory, 6, 0},
      {"an SRQ object that can shrink", proto::FdKind::kSrqObject, 7, F_SEAL_GROW},
      {"a key table others could write", proto::FdKind::kKeyTable, 1,
       F_SEAL_SHRINK | F_SEAL_GROW},
  };
  for (const Case& c : cases) {
    int f = loose(1 << 20, c.seals);
    if (c.kind == proto::FdKind::kArena) {
      auto* a = static_cast<shm::ArenaHeader*>(
          ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0));
      a->magic = shm::kArenaMagic;
      a->version = shm::kArenaVersion;
    }
    int st = r.put(c.id, c.kind, f, 1 << 20);
    if (st == 0) won(std::string("vrdmad took ") + c.what);
    // Cut it short afterwards, as a hostile client would under vrdmad's mapping.
    ::ftruncate(f, 0);
    ::close(f);
  }
  // Still alive: an ordinary request answers.
  if (r.call(proto::Op::kStatus, static_cast<const void*>(nullptr), 0) != 0)
    won("vrdmad stopped answering");
  ::close(r.fd);
}

int attack(const std::string& name, const char* target_ip, int port,
           const std::vector<Probe>& probes) {
  Attack a;
  a.name = name;
  a.probes = probes;
  a.me.open();
  ::inet_pton(AF_INET, target_ip, &a.target_ip);
  a.line.fd = tcp_connect(target_ip, port);
  a.line.send("QPN " + std::to_string(a.me.qpn));
  a.t = parse_ready(a.line.expect("READY"));
  auto t0 = Clock::now();
  if (name == "consent") a.consent();
  else if (name == "fds") a.fds();
  else if (name == "local-mr") a.local_mr();
  else if (name == "read-only") a.read_only();
  else if (name == "beyond") a.beyond();
  else if (name == "dereg") a.dereg();
  else if (name == "forge") a.forge();
  else if (name == "corrupt") a.corrupt();
  else if (name == "truncated") a.truncated();
  else die("unknown attack %s", name.c_str());
  a.line.send("DONE");
  std::string verdict = a.line.recv(kWaitSeconds * 1000);
  if (verdict != "TARGET-OK") a.won("the target reports: " + (verdict.empty() ? "nothing" : verdict));
  std::string detail;
  for (auto& w : a.wins) detail += (detail.empty() ? "" : "; ") + w;
  for (auto& n : a.notes) detail += (detail.empty() ? "" : "; ") + n;
  std::printf("attack %s %s: %s (%.0f ms)\n", name.c_str(), a.wins.empty() ? "failed" : "SUCCEEDED",
              detail.c_str(), ms_since(t0));
  std::fflush(stdout);
  return a.wins.empty() ? 0 : 3;
}

void usage() {
  std::puts(
      "usage: vrdma_attacker target [--port N]\n"
      "       vrdma_attacker attack NAME TARGET_IP [--port N] [--probe CLIENT:QPN[:KEY...]]...\n"
      "attacks: consent fds local-mr read-only beyond dereg forge corrupt truncated\n"
      "The target prints 'target: ...' and exits 0 when nothing reached it; the attacker prints\n"
      "'attack NAME failed|SUCCEEDED: ...' and exits 0 when the attack failed, 3 when it\n"
      "succeeded. Run both with vrdma's drop-in libibverbs (VRDMA_SOCKET names vrdmad).");
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    usage();
    return args.empty() ? 2 : 0;
  }
  int port = kPort;
  std::vector<Probe> probes;
  std::vector<std::string> pos;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--port" && i + 1 < args.size()) {
      port = std::atoi(args[++i].c_str());
    } else if (args[i] == "--probe" && i + 1 < args.size()) {
      Probe p;
      std::string s = args[++i];
      std::vector<uint32_t> nums;
      size_t at = 0;
      while (at <= s.size()) {
        size_t c = s.find(':', at);
        nums.push_back(static_cast<uint32_t>(std::strtoul(s.substr(at, c - at).c_str(), nullptr, 0)));
        if (c == std::string::npos) break;
        at = c + 1;
      }
      if (nums.size() < 2) die("--probe CLIENT:QPN[:KEY...]");
      p.client = nums[0];
      p.qpn = nums[1];
      p.keys.assign(nums.begin() + 2, nums.end());
      probes.push_back(p);
    } else {
      pos.push_back(args[i]);
    }
  }
  signal(SIGPIPE, SIG_IGN);
  if (pos[0] == "target") return target(port);
  if (pos[0] == "attack" && pos.size() == 3) return attack(pos[1], pos[2].c_str(), port, probes);
  usage();
  return 2;
}
