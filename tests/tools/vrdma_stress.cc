// vrdma_stress: a verbs load generator that checks every byte it moves.
//
// Like ibv_rc_pingpong, one program is the server (no address) and one the client (the
// server's IP). They swap QP number, GID, rkey and buffer address over TCP, connect one RC
// QP with a GRH (dgid = the peer's GID), and for --seconds the client keeps up to kDepth
// operations in flight, every opcode in a random mix, each one verified:
//   SEND, SEND_WITH_IMM  random payload behind a header {seq, len, kind, FNV-64}; the server
//                        checks length, checksum, kind, seq in order and imm == seq
//   RDMA_WRITE + READ    a fresh random pattern written into the server's buffer and read
//                        back (posted back to back): the READ must return what was written
//   RDMA_WRITE_WITH_IMM  imm = seq; the server recomputes the pattern, region and length
//                        from (seed, seq) and checks what landed in its buffer
//   FETCH_AND_ADD        the old values must be the running sum of what was added before
//   CMP_AND_SWP          a chain of known values: every old value is the expected one; one
//                        in four compares a wrong value, which must not swap
// At the end the two exchange counters over TCP, the server checks the final atomic words,
// and each prints one line "stress: role=... errors=0 corrupt=0 lost=0". Exit 0 only when
// everything matched. Every wait is bounded: a vanished peer ends the run with exit 1.

#include <arpa/inet.h>
#include <fcntl.h>
#include <getopt.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

constexpr int kDepth = 16;      // client operations in flight (a write+read pair is one)
constexpr int kRecvDepth = 64;  // receives the server keeps posted
// WRITE_WITH_IMM regions on the server, indexed by seq % kImmRegions. A message can only be
// posted after the ones kDepth before it were acknowledged, and every acknowledged message
// consumed one of the kRecvDepth receives, so a region is never rewritten before the server
// has checked it as long as kImmRegions >= kRecvDepth + kDepth.
constexpr int kImmRegions = 128;
constexpr uint32_t kMagic = 0x76537472;  // "vStr"
constexpr uint32_t kMaxSize = 65536;
constexpr int kAcceptSeconds = 120;  // how long a server waits for its client
constexpr int kGraceSeconds = 30;    // beyond --seconds, for setup, draining and counters

using Clock = std::chrono::steady_clock;

// SIGINT or SIGTERM to a client ends its load early; it then drains, exchanges counters and
// reports as after --seconds.
volatile sig_atomic_t g_interrupted = 0;
void on_interrupt(int) {
  g_interrupted = 1;
}

[[noreturn]] void die(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::fputs("vrdma_stress: ", stderr);
  std::vfprintf(stderr, fmt, ap);
  std::fputc('\n', stderr);
  va_end(ap);
  std::exit(1);
}

// ---- data: a seeded pseudo-random stream and a checksum ------------------------------

uint64_t splitmix(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

void fill(void* buf, size_t len, uint64_t key) {
  auto* p = static_cast<uint8_t*>(buf);
  for (size_t i = 0; i < len; i += 8) {
    uint64_t v = splitmix(key);
    std::memcpy(p + i, &v, len - i < 8 ? len - i : 8);
  }
}

uint64_t fnv64(const void* buf, size_t len) {
  const auto* p = static_cast<const uint8_t*>(buf);
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < len; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

// What a WRITE_WITH_IMM with this seq writes, so that the server can recompute it.
struct ImmWrite {
  uint64_t offset_in_area, key;
  uint32_t len;
};
ImmWrite imm_write(uint64_t seed, uint64_t seq, uint32_t size) {
  uint64_t s = seed ^ (seq * 0xd6e8feb86659fd93ull);
  uint32_t len = 1 + static_cast<uint32_t>(splitmix(s) % size);
  return {(seq % kImmRegions) * size, splitmix(s), len};
}

// The compare-and-swap chain: the word starts at 0 and the i-th successful swap replaces
// cas_value(i) with cas_value(i + 1).
uint64_t cas_value(uint64_t seed, uint64_t i) {
  if (i == 0) return 0;
  uint64_t s = seed + i;
  return splitmix(s) | 1;
}

// ---- wire formats (TCP) ----------------------------------------------------------------

struct Hello {
  uint32_t magic, qpn, psn, rkey;
  uint64_t addr, seed;
  uint8_t gid[16];
  uint32_t size, seconds;  // the client's; the server follows them
};

// Message kinds in the SEND header.
enum : uint32_t { kSend = 1, kSendImm = 2 };
struct MsgHeader {
  uint64_t seq;
  uint32_t len, kind;
  uint64_t sum, pad;
};
constexpr uint32_t kHdr = sizeof(MsgHeader);

struct Counters {
  uint64_t ops, bytes;
  uint64_t msgs, msg_bytes;  // everything that consumed a receive, and its payload bytes
  uint64_t sends, send_imms, write_imms, writes, reads, fetch_adds, cmp_swaps;
  uint64_t errors, corrupt, lost;
  uint64_t faa_total, cas_final;  // client: what the server's atomic words must hold
};

// ---- TCP with deadlines ----------------------------------------------------------------

int ms_left(Clock::time_point deadline) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return ms < 0 ? 0 : static_cast<int>(ms);
}

bool wait_fd(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    int r = ::poll(&p, 1, ms_left(deadline));
    if (r > 0) return true;
    if (r == 0) return false;
    if (errno != EINTR) return false;
  }
}

bool send_all(int fd, const void* buf, size_t len, Clock::time_point deadline) {
  const auto* p = static_cast<const char*>(buf);
  while (len > 0) {
    if (!wait_fd(fd, POLLOUT, deadline)) return false;
    ssize_t n = ::send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (n <= 0) return false;
    p += n;
    len -= static_cast<size_t>(n);
  }
  return true;
}

bool recv_all(int fd, void* buf, size_t len, Clock::time_point deadline) {
  auto* p = static_cast<char*>(buf);
  while (len > 0) {
    if (!wait_fd(fd, POLLIN, deadline)) return false;
    ssize_t n = ::recv(fd, p, len, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (n <= 0) return false;  // 0: the peer closed
    p += n;
    len -= static_cast<size_t>(n);
  }
  return true;
}

int tcp_accept(int port) {
  int ls = ::socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  ::setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  if (::bind(ls, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || ::listen(ls, 1) != 0)
    die("cannot listen on port %d: %s", port, std::strerror(errno));
  if (!wait_fd(ls, POLLIN, Clock::now() + std::chrono::seconds(kAcceptSeconds)))
    die("no client within %d s", kAcceptSeconds);
  int fd = ::accept(ls, nullptr, nullptr);
  if (fd < 0) die("accept: %s", std::strerror(errno));
  ::close(ls);
  return fd;
}

int tcp_connect(const char* ip, int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  if (::inet_pton(AF_INET, ip, &a.sin_addr) != 1) die("not an IPv4 address: %s", ip);
  auto deadline = Clock::now() + std::chrono::seconds(30);  // the server may still be starting
  for (;;) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    timeval tv{5, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));  // bounds connect()
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) return fd;
    int err = errno;
    ::close(fd);
    if (Clock::now() > deadline) die("cannot connect to %s:%d: %s", ip, port, std::strerror(err));
    ::usleep(100 * 1000);
  }
}

// ---- verbs resources -------------------------------------------------------------------

// One buffer, registered once, the same layout on both sides (each uses its own parts):
//   msg   kRecvDepth slots of kHdr + size  server: receives; client: SEND sources
//   data  kDepth slots of size             server: WRITE/READ target; client: write sources
//   back  kDepth slots of size             client: READ destinations
//   imm   kImmRegions slots of size        server: WRITE_WITH_IMM targets
//   atom  kDepth words                     server: [0] fetch-add counter, [1] CAS word;
//                                          client: atomic results
struct Layout {
  size_t msg, data, back, imm, atom, total;
  uint32_t size;
  explicit Layout(uint32_t n) : size(n) {
    msg = 0;
    data = msg + size_t(kRecvDepth) * (kHdr + n);
    data = (data + 63) & ~size_t(63);
    back = data + size_t(kDepth) * n;
    imm = back + size_t(kDepth) * n;
    atom = (imm + size_t(kImmRegions) * n + 63) & ~size_t(63);
    total = atom + kDepth * 8;
  }
};

struct Rdma {
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  ibv_comp_channel* channel = nullptr;
  ibv_cq* cq = nullptr;
  ibv_qp* qp = nullptr;
  ibv_mr* mr = nullptr;
  uint8_t* buf = nullptr;
  size_t buf_len = 0;
  ibv_gid gid{};
  int gid_index = 0;
  int rd_atom = 1;
  ibv_mtu mtu = IBV_MTU_1024;
};

void open_rdma(Rdma& r, int gid_index) {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (!list || n == 0) die("no RDMA device (is vrdmad running and LD_LIBRARY_PATH set?)");
  r.ctx = ibv_open_device(list[0]);
  ibv_free_device_list(list);
  if (!r.ctx) die("ibv_open_device failed");
  ibv_device_attr da{};
  if (ibv_query_device(r.ctx, &da)) die("ibv_query_device failed");
  r.rd_atom = std::max(1, std::min({16, da.max_qp_rd_atom, da.max_qp_init_rd_atom}));
  ibv_port_attr pa{};
  if (ibv_query_port(r.ctx, 1, &pa)) die("ibv_query_port failed");
  r.mtu = pa.active_mtu;
  r.gid_index = gid_index;
  if (ibv_query_gid(r.ctx, 1, gid_index, &r.gid)) die("ibv_query_gid(%d) failed", gid_index);
  r.pd = ibv_alloc_pd(r.ctx);
  r.channel = ibv_create_comp_channel(r.ctx);
  if (r.channel) ::fcntl(r.channel->fd, F_SETFL, ::fcntl(r.channel->fd, F_GETFL) | O_NONBLOCK);
  int cqe = 2 * kDepth + kRecvDepth + 16;
  r.cq = r.pd && r.channel ? ibv_create_cq(r.ctx, cqe, nullptr, r.channel, 0) : nullptr;
  if (!r.cq) die("cannot allocate PD, completion channel or CQ");
  ibv_qp_init_attr qa{};
  qa.send_cq = qa.recv_cq = r.cq;
  qa.qp_type = IBV_QPT_RC;
  qa.cap.max_send_wr = 2 * kDepth;
  qa.cap.max_recv_wr = kRecvDepth;
  qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
  r.qp = ibv_create_qp(r.pd, &qa);
  if (!r.qp) die("ibv_create_qp: %s", std::strerror(errno));
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
  if (ibv_modify_qp(r.qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
    die("QP to INIT failed");
}

void register_buffer(Rdma& r, size_t len) {
  r.buf_len = (len + 4095) & ~size_t(4095);
  void* p = ::mmap(nullptr, r.buf_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) die("mmap %zu bytes failed", r.buf_len);
  r.buf = static_cast<uint8_t*>(p);
  r.mr = ibv_reg_mr(r.pd, r.buf, r.buf_len,
                    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                        IBV_ACCESS_REMOTE_ATOMIC);
  if (!r.mr) die("ibv_reg_mr: %s", std::strerror(errno));
}

Hello my_hello(const Rdma& r, uint32_t psn) {
  Hello h{};
  h.magic = kMagic;
  h.qpn = r.qp->qp_num;
  h.psn = psn;
  h.rkey = r.mr ? r.mr->rkey : 0;
  h.addr = reinterpret_cast<uintptr_t>(r.buf);
  std::memcpy(h.gid, r.gid.raw, 16);
  return h;
}

void connect_qp(Rdma& r, const Hello& peer, uint32_t my_psn) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = r.mtu;
  a.dest_qp_num = peer.qpn;
  a.rq_psn = peer.psn;
  a.max_dest_rd_atomic = static_cast<uint8_t>(r.rd_atom);
  a.min_rnr_timer = 1;
  a.ah_attr.is_global = 1;
  std::memcpy(a.ah_attr.grh.dgid.raw, peer.gid, 16);
  a.ah_attr.grh.sgid_index = static_cast<uint8_t>(r.gid_index);
  a.ah_attr.grh.hop_limit = 1;
  a.ah_attr.port_num = 1;
  if (ibv_modify_qp(r.qp, &a,
                    IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                        IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
    die("QP to RTR failed");
  a = {};
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;  // the client may outrun the server's re-posted receives: retry forever
  a.sq_psn = my_psn;
  a.max_rd_atomic = static_cast<uint8_t>(r.rd_atom);
  if (ibv_modify_qp(r.qp, &a,
                    IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                        IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
    die("QP to RTS failed");
}

void close_rdma(Rdma& r) {
  if (r.qp) ibv_destroy_qp(r.qp);
  if (r.mr) ibv_dereg_mr(r.mr);
  if (r.cq) ibv_destroy_cq(r.cq);
  if (r.channel) ibv_destroy_comp_channel(r.channel);
  if (r.pd) ibv_dealloc_pd(r.pd);
  if (r.ctx) ibv_close_device(r.ctx);
  if (r.buf) ::munmap(r.buf, r.buf_len);
  r = Rdma{};
}

// Polls the CQ; when it is empty, arms it and sleeps on the completion channel (and on
// `extra_fd`, if any) for up to `ms`, so that sixteen programs can share two cores.
int poll_or_wait(Rdma& r, ibv_wc* wc, int max, int ms, int extra_fd = -1) {
  for (int spin = 0; spin < 64; ++spin) {
    int n = ibv_poll_cq(r.cq, max, wc);
    if (n != 0) return n;
  }
  if (ibv_req_notify_cq(r.cq, 0)) die("ibv_req_notify_cq failed");
  int n = ibv_poll_cq(r.cq, max, wc);
  if (n != 0) return n;
  pollfd p[2] = {{r.channel->fd, POLLIN, 0}, {extra_fd, POLLIN, 0}};
  if (::poll(p, extra_fd >= 0 ? 2 : 1, ms) > 0 && (p[0].revents & POLLIN)) {
    ibv_cq* cq;
    void* ctx;
    if (ibv_get_cq_event(r.channel, &cq, &ctx) == 0) ibv_ack_cq_events(cq, 1);  // non-blocking
  }
  return ibv_poll_cq(r.cq, max, wc);
}

const char* opcode_name(int op) {
  switch (op) {
    case IBV_WR_SEND:
      return "SEND";
    case IBV_WR_SEND_WITH_IMM:
      return "SEND_WITH_IMM";
    case IBV_WR_RDMA_WRITE:
      return "RDMA_WRITE";
    case IBV_WR_RDMA_WRITE_WITH_IMM:
      return "RDMA_WRITE_WITH_IMM";
    case IBV_WR_RDMA_READ:
      return "RDMA_READ";
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
      return "ATOMIC_FETCH_AND_ADD";
    case IBV_WR_ATOMIC_CMP_AND_SWP:
      return "ATOMIC_CMP_AND_SWP";
  }
  return "?";
}

// Reports the first few problems of each kind, then only counts them.
int g_reported = 0;
void report(const char* fmt, ...) {
  if (++g_reported > 20) return;
  va_list ap;
  va_start(ap, fmt);
  std::fputs("vrdma_stress: ", stderr);
  std::vfprintf(stderr, fmt, ap);
  std::fputc('\n', stderr);
  va_end(ap);
}

void print_summary(const char* role, const Counters& c) {
  std::printf("stress: role=%s ops=%" PRIu64 " bytes=%" PRIu64 " msgs=%" PRIu64 " send=%" PRIu64
              " send_imm=%" PRIu64 " write=%" PRIu64 " write_imm=%" PRIu64 " read=%" PRIu64
              " fetch_add=%" PRIu64 " cmp_swap=%" PRIu64 " errors=%" PRIu64 " corrupt=%" PRIu64
              " lost=%" PRIu64 "\n",
              role, c.ops, c.bytes, c.msgs, c.sends, c.send_imms, c.writes, c.write_imms, c.reads,
              c.fetch_adds, c.cmp_swaps, c.errors, c.corrupt, c.lost);
  std::fflush(stdout);
}

bool clean(const Counters& c) {
  return c.errors == 0 && c.corrupt == 0 && c.lost == 0;
}

// ---- server ----------------------------------------------------------------------------

int run_server(int port, int gid_index) {
  int fd = tcp_accept(port);
  auto setup_deadline = Clock::now() + std::chrono::seconds(kGraceSeconds);
  Hello peer{};
  if (!recv_all(fd, &peer, sizeof(peer), setup_deadline) || peer.magic != kMagic)
    die("no valid hello from the client");
  if (peer.size < 1 || peer.size > kMaxSize) die("client asked for size %u", peer.size);
  const uint32_t size = peer.size;
  const Layout L(size);
  auto deadline = Clock::now() + std::chrono::seconds(peer.seconds + kGraceSeconds);

  Rdma r;
  open_rdma(r, gid_index);
  register_buffer(r, L.total);
  auto post_recv = [&](uint32_t slot) {
    ibv_sge sge{reinterpret_cast<uintptr_t>(r.buf + L.msg + size_t(slot) * (kHdr + size)),
                kHdr + size, r.mr->lkey};
    ibv_recv_wr wr{}, *bad;
    wr.wr_id = slot;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    if (ibv_post_recv(r.qp, &wr, &bad)) die("ibv_post_recv failed");
  };
  for (uint32_t i = 0; i < kRecvDepth; ++i) post_recv(i);
  uint32_t psn = static_cast<uint32_t>(peer.seed) & 0xffffff;
  connect_qp(r, peer, psn);
  Hello mine = my_hello(r, psn);
  if (!send_all(fd, &mine, sizeof(mine), deadline)) die("cannot send the hello");

  Counters got{}, want{};
  bool have_want = false, failed = false;
  Clock::time_point drain_deadline{};
  std::string why;
  uint64_t expect = 0;
  std::string ref;  // the pattern a WRITE_WITH_IMM should have left
  ibv_wc wc[32];
  for (;;) {
    int n = poll_or_wait(r, wc, 32, 100, have_want ? -1 : fd);
    if (n < 0) die("ibv_poll_cq failed");
    for (int i = 0; i < n; ++i) {
      const ibv_wc& w = wc[i];
      if (w.status != IBV_WC_SUCCESS) {
        // After the first error the QP is in the error state and the rest flush.
        if (!failed) report("receive completion: %s", ibv_wc_status_str(w.status));
        failed = true;
        ++got.errors;
        continue;
      }
      const uint8_t* slot = r.buf + L.msg + size_t(w.wr_id) * (kHdr + size);
      uint64_t seq;
      bool with_imm = w.wc_flags & IBV_WC_WITH_IMM;
      if (w.opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
        seq = ntohl(w.imm_data);
        // imm carries the low 32 bits of seq; extend it from the sequence we expect.
        seq |= expect & ~0xffffffffull;
        if (seq < expect && expect - seq > (1ull << 31)) seq += 1ull << 32;
        ImmWrite iw = imm_write(peer.seed, seq, size);
        ref.resize(iw.len);
        fill(ref.data(), iw.len, iw.key);
        if (!with_imm || w.byte_len != iw.len ||
            std::memcmp(r.buf + L.imm + iw.offset_in_area, ref.data(), iw.len) != 0) {
          report("WRITE_WITH_IMM seq %" PRIu64
                 " (%u bytes, byte_len %u): data differs from the "
                 "pattern",
                 seq, iw.len, w.byte_len);
          ++got.corrupt;
        }
        ++got.write_imms;
        got.msg_bytes += iw.len;
      } else if (w.opcode == IBV_WC_RECV) {
        MsgHeader h;
        std::memcpy(&h, slot, kHdr);
        seq = h.seq;
        bool ok = w.byte_len == kHdr + h.len && h.len >= 1 && h.len <= size &&
                  fnv64(slot + kHdr, h.len) == h.sum;
        if (h.kind == kSendImm)
          ok = ok && with_imm && ntohl(w.imm_data) == static_cast<uint32_t>(h.seq);
        else
          ok = ok && h.kind == kSend && !with_imm;
        if (!ok) {
          report("SEND seq %" PRIu64
                 " kind %u len %u byte_len %u imm %d: bad size, kind, "
                 "immediate or checksum",
                 h.seq, h.kind, h.len, w.byte_len, with_imm);
          ++got.corrupt;
        }
        ++(h.kind == kSendImm ? got.send_imms : got.sends);
        got.msg_bytes += h.len;
      } else {
        report("unexpected receive opcode %d", w.opcode);
        ++got.corrupt;
        seq = expect;
      }
      if (seq != expect) {
        report("message seq %" PRIu64 " where %" PRIu64 " was expected", seq, expect);
        if (seq > expect)
          got.lost += seq - expect;
        else
          ++got.corrupt;
      }
      expect = seq + 1;
      ++got.msgs;
      if (!failed) post_recv(static_cast<uint32_t>(w.wr_id));
    }
    if (!have_want && n == 0 && wait_fd(fd, POLLIN, Clock::now())) {
      if (!recv_all(fd, &want, sizeof(want), deadline)) {
        why = "the client closed the connection before sending its counters";
        break;
      }
      have_want = true;
      // Every message was acknowledged before the client sent this: what has not arrived
      // within a few seconds never will.
      drain_deadline = std::min(deadline, Clock::now() + std::chrono::seconds(10));
    }
    if (have_want && got.msgs + got.errors >= want.msgs) break;
    if (have_want && Clock::now() > drain_deadline) break;
    if (Clock::now() > deadline) {
      why = "timed out waiting for the client";
      break;
    }
  }

  if (have_want) {
    got.lost += want.msgs > got.msgs ? want.msgs - got.msgs : 0;
    if (got.msgs != want.msgs || got.sends != want.sends || got.send_imms != want.send_imms ||
        got.write_imms != want.write_imms || got.msg_bytes != want.msg_bytes)
      report("received %" PRIu64 " messages (%" PRIu64 " bytes), the client sent %" PRIu64
             " (%" PRIu64 " bytes)",
             got.msgs, got.msg_bytes, want.msgs, want.msg_bytes);
    if (got.msgs > want.msgs) ++got.corrupt;
    uint64_t faa, cas;
    std::memcpy(&faa, r.buf + L.atom, 8);
    std::memcpy(&cas, r.buf + L.atom + 8, 8);
    if (faa != want.faa_total || cas != want.cas_final) {
      report("atomic words hold %#" PRIx64 "/%#" PRIx64 ", expected %#" PRIx64 "/%#" PRIx64, faa,
             cas, want.faa_total, want.cas_final);
      ++got.corrupt;
    }
    // What the server cannot see, as the client reports it, for the summary line (the
    // atomics were checked above through the final words).
    got.ops = got.msgs;
    got.bytes = got.msg_bytes;
    got.writes = want.writes;
    got.reads = want.reads;
    got.fetch_adds = want.fetch_adds;
    got.cmp_swaps = want.cmp_swaps;
    if (!send_all(fd, &got, sizeof(got), deadline)) why = "cannot send counters to the client";
  }
  ::close(fd);
  close_rdma(r);
  print_summary("server", got);
  if (!why.empty()) {
    std::fprintf(stderr, "vrdma_stress: FAILED: %s\n", why.c_str());
    return 1;
  }
  if (!clean(got) || (have_want && !clean(want))) {
    std::fprintf(stderr,
                 "vrdma_stress: FAILED (server errors=%" PRIu64 " corrupt=%" PRIu64 " lost=%" PRIu64
                 "; client errors=%" PRIu64 " corrupt=%" PRIu64 " lost=%" PRIu64 ")\n",
                 got.errors, got.corrupt, got.lost, want.errors, want.corrupt, want.lost);
    return 1;
  }
  return 0;
}

// ---- client ----------------------------------------------------------------------------

// One operation in flight: a slot owns its parts of the buffer until all its WRs complete.
struct Op {
  int opcode = -1;  // the first WR's opcode; -1 = free
  int pending = 0;  // WRs not yet completed
  uint32_t len = 0;
  uint64_t expect = 0;  // atomics: the old value the server must return
  uint64_t seq = 0;     // messages
};

int run_client(const char* server_ip, int port, int gid_index, uint32_t size, int seconds) {
  const Layout L(size);
  uint64_t seed =
      static_cast<uint64_t>(Clock::now().time_since_epoch().count()) ^ (uint64_t(::getpid()) << 32);
  uint64_t rng = seed * 31 + 7;

  Rdma r;
  open_rdma(r, gid_index);
  register_buffer(r, L.total);
  int fd = tcp_connect(server_ip, port);
  auto start = Clock::now();
  auto deadline = start + std::chrono::seconds(seconds + kGraceSeconds);
  uint32_t psn = static_cast<uint32_t>(splitmix(rng)) & 0xffffff;
  Hello mine = my_hello(r, psn), peer{};
  mine.seed = seed;
  mine.size = size;
  mine.seconds = static_cast<uint32_t>(seconds);
  if (!send_all(fd, &mine, sizeof(mine), deadline) ||
      !recv_all(fd, &peer, sizeof(peer), deadline) || peer.magic != kMagic)
    die("no valid hello from the server");
  connect_qp(r, peer, psn);

  Counters c{};
  Op ops[kDepth];
  int in_flight = 0;  // WRs
  uint64_t msg_seq = 0, cas_index = 0, cas_posted = 0, faa_sum = 0;
  bool stopping = false, failed = false;
  std::string why;
  auto end = start + std::chrono::seconds(seconds);

  auto post = [&](ibv_send_wr* wr) {
    ibv_send_wr* bad;
    if (int e = ibv_post_send(r.qp, wr, &bad)) die("ibv_post_send: %s", std::strerror(e));
  };
  auto start_op = [&](uint32_t slot) {
    Op& op = ops[slot];
    uint8_t* msg = r.buf + L.msg + size_t(slot) * (kHdr + size);
    uint8_t* data = r.buf + L.data + size_t(slot) * size;
    uint8_t* back = r.buf + L.back + size_t(slot) * size;
    uint8_t* atom = r.buf + L.atom + size_t(slot) * 8;
    uint64_t dice = splitmix(rng);
    uint32_t len = 1 + static_cast<uint32_t>((dice >> 8) % size);
    ibv_sge sge{0, 0, r.mr->lkey}, sge2{0, 0, r.mr->lkey};
    ibv_send_wr wr{}, wr2{};
    wr.wr_id = slot;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.send_flags = IBV_SEND_SIGNALED;
    op = Op{};
    op.len = len;
    op.pending = 1;
    switch (dice % 6) {
      case 0:
      case 1: {  // SEND / SEND_WITH_IMM
        bool imm = dice % 6 == 1;
        MsgHeader h{msg_seq, len, imm ? kSendImm : kSend, 0, 0};
        fill(msg + kHdr, len, splitmix(rng));
        h.sum = fnv64(msg + kHdr, len);
        std::memcpy(msg, &h, kHdr);
        sge.addr = reinterpret_cast<uintptr_t>(msg);
        sge.length = kHdr + len;
        wr.opcode = imm ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND;
        wr.imm_data = htonl(static_cast<uint32_t>(msg_seq));
        op.seq = msg_seq++;
        break;
      }
      case 2: {  // RDMA_WRITE of a fresh pattern, then RDMA_READ of it back
        fill(data, len, splitmix(rng));
        std::memset(back, 0, len);
        sge.addr = reinterpret_cast<uintptr_t>(data);
        sge.length = len;
        wr.opcode = IBV_WR_RDMA_WRITE;
        wr.wr.rdma.remote_addr = peer.addr + L.data + size_t(slot) * size;
        wr.wr.rdma.rkey = peer.rkey;
        wr2 = wr;
        wr2.sg_list = &sge2;
        sge2.addr = reinterpret_cast<uintptr_t>(back);
        sge2.length = len;
        wr2.opcode = IBV_WR_RDMA_READ;
        wr.next = &wr2;
        op.pending = 2;
        break;
      }
      case 3: {  // RDMA_WRITE_WITH_IMM: the server recomputes what it should find
        ImmWrite iw = imm_write(seed, msg_seq, size);
        fill(data, iw.len, iw.key);
        op.len = iw.len;
        sge.addr = reinterpret_cast<uintptr_t>(data);
        sge.length = iw.len;
        wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
        wr.imm_data = htonl(static_cast<uint32_t>(msg_seq));
        wr.wr.rdma.remote_addr = peer.addr + L.imm + iw.offset_in_area;
        wr.wr.rdma.rkey = peer.rkey;
        op.seq = msg_seq++;
        break;
      }
      case 4: {  // FETCH_AND_ADD: the old value is the sum of everything added before
        uint64_t add = 1 + (dice >> 40);
        std::memset(atom, 0xee, 8);
        sge.addr = reinterpret_cast<uintptr_t>(atom);
        sge.length = 8;
        wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
        wr.wr.atomic.remote_addr = peer.addr + L.atom;
        wr.wr.atomic.rkey = peer.rkey;
        wr.wr.atomic.compare_add = add;
        op.expect = faa_sum;
        faa_sum += add;
        break;
      }
      default: {  // CMP_AND_SWP along the chain; one in four compares a wrong value
        bool miss = (cas_posted++ % 4) == 3;
        uint64_t cur = cas_value(seed, cas_index);
        std::memset(atom, 0xee, 8);
        sge.addr = reinterpret_cast<uintptr_t>(atom);
        sge.length = 8;
        wr.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
        wr.wr.atomic.remote_addr = peer.addr + L.atom + 8;
        wr.wr.atomic.rkey = peer.rkey;
        wr.wr.atomic.compare_add = miss ? ~cur : cur;
        wr.wr.atomic.swap = miss ? 0x5a5a5a5a5a5a5a5aull : cas_value(seed, cas_index + 1);
        op.expect = cur;
        if (!miss) ++cas_index;
        break;
      }
    }
    op.opcode = wr.opcode;
    post(&wr);
    in_flight += op.pending;
  };
  // Checks one completed WR; the op is done when its last WR has completed.
  auto complete = [&](const ibv_wc& w) {
    Op& op = ops[w.wr_id];
    uint8_t* data = r.buf + L.data + size_t(w.wr_id) * size;
    uint8_t* back = r.buf + L.back + size_t(w.wr_id) * size;
    uint8_t* atom = r.buf + L.atom + size_t(w.wr_id) * 8;
    --in_flight;
    if (w.status != IBV_WC_SUCCESS) {
      if (!failed)
        report("%s completion: %s (vendor error %u)", opcode_name(op.opcode),
               ibv_wc_status_str(w.status), w.vendor_err);
      failed = true;
      ++c.errors;
      op = Op{};
      return;
    }
    ++c.ops;
    if (--op.pending > 0) return;
    switch (op.opcode) {
      case IBV_WR_SEND:
      case IBV_WR_SEND_WITH_IMM:
        ++(op.opcode == IBV_WR_SEND ? c.sends : c.send_imms);
        ++c.msgs;
        c.msg_bytes += op.len;
        c.bytes += kHdr + op.len;
        break;
      case IBV_WR_RDMA_WRITE:  // and its READ
        ++c.writes;
        ++c.reads;
        c.bytes += 2ull * op.len;
        if (w.opcode != IBV_WC_RDMA_READ || std::memcmp(data, back, op.len) != 0) {
          report("RDMA_READ of %u bytes returned other data than the RDMA_WRITE before it", op.len);
          ++c.corrupt;
        }
        break;
      case IBV_WR_RDMA_WRITE_WITH_IMM:
        ++c.write_imms;
        ++c.msgs;
        c.msg_bytes += op.len;
        c.bytes += op.len;
        break;
      default: {  // atomics
        uint64_t old;
        std::memcpy(&old, atom, 8);
        ++(op.opcode == IBV_WR_ATOMIC_FETCH_AND_ADD ? c.fetch_adds : c.cmp_swaps);
        c.bytes += 8;
        if (old != op.expect) {
          report("%s returned %#" PRIx64 ", expected %#" PRIx64, opcode_name(op.opcode), old,
                 op.expect);
          ++c.corrupt;
        }
      }
    }
    op = Op{};
  };

  ibv_wc wc[32];
  for (;;) {
    auto now = Clock::now();
    if (!stopping && (now >= end || failed || g_interrupted)) stopping = true;
    if (!stopping)
      for (uint32_t s = 0; s < kDepth; ++s)
        if (ops[s].opcode < 0) start_op(s);
    if (stopping && in_flight == 0) break;
    if (now > deadline) {
      why = "operations never completed (" + std::to_string(in_flight) + " in flight)";
      c.lost += static_cast<uint64_t>(in_flight);
      break;
    }
    int n = poll_or_wait(r, wc, 32, 100);
    if (n < 0) die("ibv_poll_cq failed");
    for (int i = 0; i < n; ++i) complete(wc[i]);
  }

  c.faa_total = faa_sum;
  c.cas_final = cas_value(seed, cas_index);
  Counters srv{};
  if (!why.empty()) {
    // Keep the server from waiting for messages that are still in flight.
  } else if (!send_all(fd, &c, sizeof(c), deadline) || !recv_all(fd, &srv, sizeof(srv), deadline)) {
    why = "no counters from the server (did it die?)";
  }
  ::close(fd);
  close_rdma(r);

  if (why.empty()) {
    if (srv.msgs != c.msgs || srv.msg_bytes != c.msg_bytes || srv.sends != c.sends ||
        srv.send_imms != c.send_imms || srv.write_imms != c.write_imms) {
      std::fprintf(stderr,
                   "vrdma_stress: the server received %" PRIu64 " messages (%" PRIu64
                   " bytes) of the %" PRIu64 " (%" PRIu64 " bytes) sent\n",
                   srv.msgs, srv.msg_bytes, c.msgs, c.msg_bytes);
      c.lost += c.msgs > srv.msgs ? c.msgs - srv.msgs : 1;
    }
    c.errors += srv.errors;
    c.corrupt += srv.corrupt;
    c.lost += srv.lost;
  }
  print_summary("client", c);
  if (!why.empty()) {
    std::fprintf(stderr, "vrdma_stress: FAILED: %s\n", why.c_str());
    return 1;
  }
  if (!clean(c)) {
    std::fprintf(stderr,
                 "vrdma_stress: FAILED: errors=%" PRIu64 " corrupt=%" PRIu64 " lost=%" PRIu64
                 " (server and client together)\n",
                 c.errors, c.corrupt, c.lost);
    return 1;
  }
  return 0;
}

void usage(FILE* out) {
  std::fprintf(
      out,
      "usage: vrdma_stress [options]            server: waits for one client\n"
      "       vrdma_stress [options] SERVER_IP  client: drives the load, then both check\n"
      "\n"
      "One RC QP (with GRH, dgid = the peer's GID) between two programs; the client keeps %d\n"
      "operations in flight for --seconds, a random mix of SEND, SEND_WITH_IMM, RDMA_WRITE\n"
      "followed by RDMA_READ back, RDMA_WRITE_WITH_IMM, ATOMIC_FETCH_AND_ADD and\n"
      "ATOMIC_CMP_AND_SWP, and every result is checked (checksums, sequence numbers,\n"
      "immediates, read-back data, atomic old values). Both print one line\n"
      "  stress: role=... ops=... send=... errors=0 corrupt=0 lost=0\n"
      "and exit 0 only when everything matched, 1 otherwise.\n"
      "\n"
      "  -p, --port P        TCP port for the exchange (default 18600)\n"
      "  -t, --seconds S     how long the client runs the load (default 10; client only); SIGINT\n"
      "                      or SIGTERM ends it sooner, with the usual checks and report\n"
      "  -s, --size N        largest payload in bytes, 1..%u (default 8192; client only)\n"
      "  -g, --gid-index I   local GID index (default 0)\n"
      "  -h, --help          this text\n",
      kDepth, kMaxSize);
}

}  // namespace

int main(int argc, char** argv) {
  int port = 18600, seconds = 10, gid_index = 0;
  long size = 8192;
  static const option longopts[] = {
      {"port", required_argument, nullptr, 'p'}, {"seconds", required_argument, nullptr, 't'},
      {"size", required_argument, nullptr, 's'}, {"gid-index", required_argument, nullptr, 'g'},
      {"help", no_argument, nullptr, 'h'},       {nullptr, 0, nullptr, 0}};
  for (int o; (o = getopt_long(argc, argv, "p:t:s:g:h", longopts, nullptr)) != -1;) {
    switch (o) {
      case 'p':
        port = std::atoi(optarg);
        break;
      case 't':
        seconds = std::atoi(optarg);
        break;
      case 's':
        size = std::atol(optarg);
        break;
      case 'g':
        gid_index = std::atoi(optarg);
        break;
      case 'h':
        usage(stdout);
        return 0;
      default:
        usage(stderr);
        return 2;
    }
  }
  if (port <= 0 || port > 65535 || seconds < 1 || seconds > 86400 || size < 1 || size > kMaxSize ||
      gid_index < 0 || argc - optind > 1) {
    usage(stderr);
    return 2;
  }
  setvbuf(stdout, nullptr, _IOLBF, 0);
  struct sigaction sa {};
  sa.sa_handler = on_interrupt;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
  if (optind < argc)
    return run_client(argv[optind], port, gid_index, static_cast<uint32_t>(size), seconds);
  return run_server(port, gid_index);
}
