// vrdma_bad_rkey: provokes IBV_WC_REM_ACCESS_ERR, the way a buggy program would.
//
//   vrdma_bad_rkey [--port N]             the server: one RC QP, one MR allowing REMOTE_WRITE
//   vrdma_bad_rkey SERVER_IP [--port N] [--mode M]
//                                         the client: connects, then, by M:
//                                         rkey (default): RDMA WRITEs to the server's buffer
//                                           with a key the server never gave
//                                         bounds: WRITEs with the server's key across the end
//                                           of its MR (half inside, half past it)
//                                         read: READs with the server's key from an MR that
//                                           does not allow REMOTE_READ
//
// The two swap QP number, GID, rkey and address over TCP and connect one RC QP with a GRH
// (dgid = the peer's GID). The client prints "bad_rkey: status=<ibv_wc_status_str>" and exits
// 0 when its write completed with REM_ACCESS_ERR, 1 otherwise. The server, once the client is
// done, prints "bad_rkey: server buffer untouched" and exits 0 when no byte of its MR changed
// ("... CHANGED" and 1 otherwise). Every wait is bounded (10 s).
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

namespace {

constexpr int kWaitMs = 10000;
constexpr size_t kBuf = 4096;

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "bad_rkey: %s\n", what);
  std::exit(1);
}

struct Hello {
  uint32_t qpn, rkey;
  uint64_t addr;
  uint8_t gid[16];
};

bool wait_fd(int fd, short ev) {
  pollfd p{fd, ev, 0};
  return ::poll(&p, 1, kWaitMs) == 1;
}

void exchange(int fd, const Hello& mine, Hello* peer) {
  if (::send(fd, &mine, sizeof(mine), MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof(mine)))
    die("cannot send the hello");
  size_t got = 0;
  while (got < sizeof(*peer)) {
    if (!wait_fd(fd, POLLIN)) die("no hello from the peer in time");
    ssize_t n = ::recv(fd, reinterpret_cast<char*>(peer) + got, sizeof(*peer) - got, 0);
    if (n <= 0) die("the peer went away");
    got += static_cast<size_t>(n);
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

}  // namespace

int main(int argc, char** argv) {
  const char* server = nullptr;
  int port = 18620;
  std::string mode = "rkey";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--port" && i + 1 < argc)
      port = std::atoi(argv[++i]);
    else if (a == "--mode" && i + 1 < argc)
      mode = argv[++i];
    else if (a == "-h" || a == "--help") {
      std::printf("usage: vrdma_bad_rkey [SERVER_IP] [--port N] [--mode rkey|bounds|read]\n");
      return 0;
    } else if (!server && a[0] != '-')
      server = argv[i];
    else
      die("unknown argument (see --help)");
  }
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
  static char buf[kBuf];
  ibv_mr* mr =
      cq ? ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)
         : nullptr;
  if (!mr) die("cannot allocate PD, CQ or MR");
  if (mode != "rkey" && mode != "bounds" && mode != "read") die("--mode: rkey, bounds or read");
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
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
    die("QP to INIT failed");

  int fd = tcp(server, port);
  Hello mine{qp->qp_num, mr->rkey, reinterpret_cast<uintptr_t>(buf), {}}, peer{};
  std::memcpy(mine.gid, gid.raw, 16);
  exchange(fd, mine, &peer);

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
  // Both sides are ready once each has sent one byte.
  char one = 1;
  if (::send(fd, &one, 1, MSG_NOSIGNAL) != 1 || !wait_fd(fd, POLLIN) || ::recv(fd, &one, 1, 0) != 1)
    die("the peer went away");

  int rc = 0;
  if (server) {
    std::memset(buf, 'x', 64);
    ibv_sge sge{reinterpret_cast<uintptr_t>(buf), 64, mr->lkey};
    ibv_send_wr wr{}, *bad = nullptr;
    wr.opcode = mode == "read" ? IBV_WR_RDMA_READ : IBV_WR_RDMA_WRITE;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = mode == "bounds" ? peer.addr + kBuf - 32 : peer.addr;
    // rkey: a key the server never gave out; otherwise its own.
    wr.wr.rdma.rkey = mode == "rkey" ? peer.rkey ^ 0x5a5a5a5au : peer.rkey;
    if (ibv_post_send(qp, &wr, &bad)) die("ibv_post_send failed");
    ibv_wc wc{};
    auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(kWaitMs);
    int got = 0;
    while ((got = ibv_poll_cq(cq, 1, &wc)) == 0 && std::chrono::steady_clock::now() < end)
      ::usleep(100);
    if (got != 1) die("no completion in time");
    std::printf("bad_rkey: status=%s\n", ibv_wc_status_str(wc.status));
    rc = wc.status == IBV_WC_REM_ACCESS_ERR ? 0 : 1;
    ::send(fd, &one, 1, MSG_NOSIGNAL);
  } else {
    // The server waits for the client's word that it is done (or for it to go away).
    if (wait_fd(fd, POLLIN)) ::recv(fd, &one, 1, 0);
    std::printf("bad_rkey: server done\n");
    bool untouched = true;
    for (size_t i = 0; i < kBuf; ++i) untouched &= buf[i] == 0;
    std::printf("bad_rkey: server buffer %s\n", untouched ? "untouched" : "CHANGED");
    rc = untouched ? 0 : 1;
  }
  ::close(fd);
  ibv_destroy_qp(qp);
  ibv_dereg_mr(mr);
  ibv_destroy_cq(cq);
  ibv_dealloc_pd(pd);
  ibv_close_device(ctx);
  return rc;
}
