// vrdma_mw_check: a type-2 memory window used by a peer, then invalidated by it.
//
//   vrdma_mw_check [--port N]             the owner: one RC QP, an MR allowing only local
//                                         writes and window binds, a type-2 window bound over
//                                         4 KiB inside it with remote read and write
//   vrdma_mw_check SERVER_IP [--port N]   the peer: RDMA WRITE of random bytes through the
//                                         window's rkey, READ back, SEND_WITH_INV of that rkey,
//                                         then one more WRITE through it
//
// The two swap QP number and GID over TCP and connect one RC QP with a GRH (dgid = the peer's
// GID), then the owner binds the window and sends its rkey and address. Checked: the write
// lands byte for byte in the window (the owner compares its memory), the read returns it, the
// owner's receive completes with IBV_WC_WITH_INV and invalidated_rkey = the window's rkey, the
// write after it completes with IBV_WC_REM_ACCESS_ERR and leaves the owner's memory as it was.
// Each side prints "mw_check: ..." lines and exits 0 when everything held, 1 otherwise. Every
// wait is bounded (10 s).
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

constexpr int kWaitMs = 10000;
constexpr size_t kBuf = 16384, kWinOff = 1024, kWin = 4096;

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "mw_check: %s\n", what);
  std::exit(1);
}

struct Hello {
  uint32_t qpn;
  uint8_t gid[16];
};
struct Window {
  uint32_t rkey;
  uint64_t addr;
};

bool wait_fd(int fd, short ev) {
  pollfd p{fd, ev, 0};
  return ::poll(&p, 1, kWaitMs) == 1;
}

void send_all(int fd, const void* p, size_t n) {
  if (::send(fd, p, n, MSG_NOSIGNAL) != static_cast<ssize_t>(n)) die("the peer went away");
}
void recv_all(int fd, void* p, size_t n) {
  size_t got = 0;
  while (got < n) {
    if (!wait_fd(fd, POLLIN)) die("nothing from the peer in time");
    ssize_t r = ::recv(fd, static_cast<char*>(p) + got, n - got, 0);
    if (r <= 0) die("the peer went away");
    got += static_cast<size_t>(r);
  }
}

int tcp(const char* server, int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  if (server) {
    if (::inet_pton(AF_INET, server, &sa.sin_addr) != 1) die("bad server address");
    if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) < 0) die("cannot connect");
    return fd;
  }
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) < 0 || ::listen(fd, 1) < 0)
    die("cannot listen");
  if (!wait_fd(fd, POLLIN)) die("no client in time");
  int c = ::accept(fd, nullptr, nullptr);
  ::close(fd);
  if (c < 0) die("accept failed");
  return c;
}

ibv_wc poll_one(ibv_cq* cq) {
  ibv_wc wc{};
  auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(kWaitMs);
  int got = 0;
  while ((got = ibv_poll_cq(cq, 1, &wc)) == 0 && std::chrono::steady_clock::now() < end)
    ::usleep(100);
  if (got != 1) die("no completion in time");
  return wc;
}

// The same bytes on both sides: xorshift from a fixed seed.
void pattern(uint8_t* p, size_t n, uint64_t seed) {
  uint64_t x = seed;
  for (size_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    p[i] = static_cast<uint8_t>(x);
  }
}

ibv_wc_status post_wait(ibv_qp* qp, ibv_cq* cq, ibv_send_wr& wr) {
  ibv_send_wr* bad = nullptr;
  if (ibv_post_send(qp, &wr, &bad)) die("ibv_post_send failed");
  return poll_one(cq).status;
}

}  // namespace

int main(int argc, char** argv) {
  const char* server = nullptr;
  int port = 18621;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--port" && i + 1 < argc)
      port = std::atoi(argv[++i]);
    else if (a == "-h" || a == "--help") {
      std::printf("usage: vrdma_mw_check [SERVER_IP] [--port N]\n");
      return 0;
    } else if (!server && a[0] != '-')
      server = argv[i];
    else
      die("unknown argument (see --help)");
  }
  const bool owner = server == nullptr;
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (!list || n == 0) die("no RDMA device");
  ibv_context* ctx = ibv_open_device(list[0]);
  ibv_free_device_list(list);
  if (!ctx) die("ibv_open_device failed");
  ibv_gid gid{};
  if (ibv_query_gid(ctx, 1, 0, &gid)) die("ibv_query_gid failed");
  ibv_pd* pd = ibv_alloc_pd(ctx);
  ibv_cq* cq = pd ? ibv_create_cq(ctx, 16, nullptr, nullptr, 0) : nullptr;
  static uint8_t buf[kBuf];
  std::memset(buf, 0, sizeof(buf));
  int access = owner ? IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND : IBV_ACCESS_LOCAL_WRITE;
  ibv_mr* mr = cq ? ibv_reg_mr(pd, buf, sizeof(buf), access) : nullptr;
  if (!mr) die("cannot allocate PD, CQ or MR");
  ibv_qp_init_attr qa{};
  qa.send_cq = qa.recv_cq = cq;
  qa.qp_type = IBV_QPT_RC;
  qa.cap.max_send_wr = qa.cap.max_recv_wr = 4;
  qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
  ibv_qp* qp = ibv_create_qp(pd, &qa);
  if (!qp) die("ibv_create_qp failed");
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_LOCAL_WRITE;
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
    die("QP to INIT failed");

  int fd = tcp(server, port);
  Hello mine{qp->qp_num, {}}, peer{};
  std::memcpy(mine.gid, gid.raw, 16);
  send_all(fd, &mine, sizeof(mine));
  recv_all(fd, &peer, sizeof(peer));
  a = {};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = peer.qpn;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 1;
  a.ah_attr.is_global = 1;
  std::memcpy(a.ah_attr.grh.dgid.raw, peer.gid, 16);
  a.ah_attr.grh.hop_limit = 1;
  a.ah_attr.port_num = 1;
  if (ibv_modify_qp(qp, &a,
                    IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                        IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
    die("QP to RTR failed");
  a = {};
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.max_rd_atomic = 1;
  if (ibv_modify_qp(qp, &a,
                    IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                        IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
    die("QP to RTS failed");
  char one = 1;
  send_all(fd, &one, 1);
  recv_all(fd, &one, 1);

  std::vector<uint8_t> data(kWin);
  pattern(data.data(), data.size(), 0x9e3779b97f4a7c15ull);
  bool ok = true;
  auto check = [&](bool cond, const char* what) {
    std::printf("mw_check: %s: %s\n", what, cond ? "ok" : "FAILED");
    ok = ok && cond;
  };

  if (owner) {
    ibv_mw* mw = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
    if (!mw) die("ibv_alloc_mw failed");
    ibv_send_wr wr{};
    wr.opcode = IBV_WR_BIND_MW;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.bind_mw.mw = mw;
    wr.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
    wr.bind_mw.bind_info.mr = mr;
    wr.bind_mw.bind_info.addr = reinterpret_cast<uintptr_t>(buf) + kWinOff;
    wr.bind_mw.bind_info.length = kWin;
    wr.bind_mw.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    check(post_wait(qp, cq, wr) == IBV_WC_SUCCESS && mw->rkey == wr.bind_mw.rkey, "bind");
    ibv_sge rs{reinterpret_cast<uintptr_t>(buf), 64, mr->lkey};
    ibv_recv_wr rw{}, *rbad = nullptr;
    rw.wr_id = 77;
    rw.sg_list = &rs;
    rw.num_sge = 1;
    if (ibv_post_recv(qp, &rw, &rbad)) die("ibv_post_recv failed");
    Window w{mw->rkey, wr.bind_mw.bind_info.addr};
    send_all(fd, &w, sizeof(w));
    recv_all(fd, &one, 1);  // the peer wrote, read and sent with invalidate
    check(std::memcmp(buf + kWinOff, data.data(), kWin) == 0, "window holds the peer's bytes");
    ibv_wc wc = poll_one(cq);
    check(wc.status == IBV_WC_SUCCESS && wc.wr_id == 77 && (wc.wc_flags & IBV_WC_WITH_INV) &&
              wc.invalidated_rkey == w.rkey,
          "receive carries IBV_WC_WITH_INV and the window's rkey");
    std::vector<uint8_t> before(buf, buf + kBuf);
    send_all(fd, &one, 1);  // invalidated: the peer may try again
    recv_all(fd, &one, 1);  // it tried
    check(std::memcmp(buf, before.data(), kBuf) == 0, "memory untouched after invalidation");
    ibv_dealloc_mw(mw);
  } else {
    Window w{};
    recv_all(fd, &w, sizeof(w));
    std::memcpy(buf, data.data(), kWin);
    ibv_sge sge{reinterpret_cast<uintptr_t>(buf), static_cast<uint32_t>(kWin), mr->lkey};
    ibv_send_wr wr{};
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = w.addr;
    wr.wr.rdma.rkey = w.rkey;
    check(post_wait(qp, cq, wr) == IBV_WC_SUCCESS, "write through the window");
    sge.addr = reinterpret_cast<uintptr_t>(buf) + kWin;
    wr.opcode = IBV_WR_RDMA_READ;
    check(
        post_wait(qp, cq, wr) == IBV_WC_SUCCESS && std::memcmp(buf + kWin, data.data(), kWin) == 0,
        "read through the window returns the bytes");
    ibv_sge s2{reinterpret_cast<uintptr_t>(buf), 16, mr->lkey};
    ibv_send_wr inv{};
    inv.opcode = IBV_WR_SEND_WITH_INV;
    inv.sg_list = &s2;
    inv.num_sge = 1;
    inv.send_flags = IBV_SEND_SIGNALED;
    inv.invalidate_rkey = w.rkey;
    check(post_wait(qp, cq, inv) == IBV_WC_SUCCESS, "send with invalidate");
    send_all(fd, &one, 1);
    recv_all(fd, &one, 1);  // the owner saw its completion
    std::memset(buf, 0xab, kWin);
    wr.opcode = IBV_WR_RDMA_WRITE;
    sge.addr = reinterpret_cast<uintptr_t>(buf);
    ibv_wc_status st = post_wait(qp, cq, wr);
    std::printf("mw_check: write after invalidation: status=%s\n", ibv_wc_status_str(st));
    check(st == IBV_WC_REM_ACCESS_ERR, "write after invalidation refused");
    send_all(fd, &one, 1);
  }
  ::close(fd);
  ibv_destroy_qp(qp);
  ibv_dereg_mr(mr);
  ibv_destroy_cq(cq);
  ibv_dealloc_pd(pd);
  ibv_close_device(ctx);
  std::printf("mw_check: %s\n", ok ? "all checks held" : "a check failed");
  return ok ? 0 : 1;
}
