// vrdma-bench-conn: connection setup rates and resource holding for the
// evaluation suite (vrdma bench). Linked against vrdma's drop-in libibverbs.so.1
// and librdmacm.so.1; run inside sandbox containers.
//
//   verbs-server [--port P]                 one client: answers its QPs with as many
//   verbs-client ADDR [--port P] [--qps K]  K RC QPs connected through verbs (QPNs over TCP)
//   cm-server [--port P] [--count K]        accepts K rdma_cm connections, then exits
//   cm-client ADDR [--port P] [--count K]   K rdma_cm connections, one after another
//   hold [--qps N] [--mrs M] [--mr-size B] [--seconds S]
//                                            opens the device, creates N QPs and M MRs,
//                                            prints a line and holds them for S seconds
//
// Servers print {"listening": PORT} once ready; clients and hold print one JSON line
// with their results. Every wait is bounded; failures exit 1 with a message on stderr.
#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace {

constexpr int kTimeoutMs = 10000;  // any single wait

[[noreturn]] void die(const std::string& what, int err = 0) {
  if (err)
    std::fprintf(stderr, "vrdma-bench-conn: %s: %s\n", what.c_str(), strerror(err));
  else
    std::fprintf(stderr, "vrdma-bench-conn: %s\n", what.c_str());
  std::exit(1);
}

double now() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

struct Args {
  std::string mode;
  std::string addr;
  int port = 18600;
  int qps = 0;
  int count = 64;
  int mrs = 0;
  size_t mr_size = 4096;
  double seconds = 60;
};

int usage() {
  std::fprintf(stderr,
               "usage: vrdma-bench-conn verbs-server [--port P]\n"
               "       vrdma-bench-conn verbs-client ADDR [--port P] [--qps K]\n"
               "       vrdma-bench-conn cm-server [--port P] [--count K]\n"
               "       vrdma-bench-conn cm-client ADDR [--port P] [--count K]\n"
               "       vrdma-bench-conn hold [--qps N] [--mrs M] [--mr-size B] [--seconds S]\n");
  return 2;
}

// ---- TCP side channel (verbs mode) ---------------------------------------------------

void set_timeouts(int fd) {
  timeval tv{kTimeoutMs / 1000, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

void send_all(int fd, const void* buf, size_t len) {
  const char* p = static_cast<const char*>(buf);
  while (len) {
    ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) die("send to peer", n < 0 ? errno : EPIPE);
    p += n;
    len -= n;
  }
}

void recv_all(int fd, void* buf, size_t len) {
  char* p = static_cast<char*>(buf);
  while (len) {
    ssize_t n = recv(fd, p, len, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) die("receive from peer", errno);
    if (n == 0) die("peer closed the connection");
    p += n;
    len -= n;
  }
}

sockaddr_in parse_addr(const std::string& addr, int port) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  if (inet_pton(AF_INET, addr.c_str(), &sa.sin_addr) != 1) die("not an IPv4 address: " + addr);
  return sa;
}

int tcp_listen_accept(int port) {
  int ls = socket(AF_INET, SOCK_STREAM, 0);
  if (ls < 0) die("socket", errno);
  int one = 1;
  setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  if (bind(ls, reinterpret_cast<sockaddr*>(&sa), sizeof(sa))) die("bind", errno);
  if (listen(ls, 1)) die("listen", errno);
  std::printf("{\"listening\": %d}\n", port);
  std::fflush(stdout);
  pollfd pfd{ls, POLLIN, 0};
  if (poll(&pfd, 1, 120000) != 1) die("no client within 120 s");
  int fd = accept(ls, nullptr, nullptr);
  if (fd < 0) die("accept", errno);
  close(ls);
  set_timeouts(fd);
  return fd;
}

int tcp_connect(const std::string& addr, int port) {
  sockaddr_in sa = parse_addr(addr, port);
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) die("socket", errno);
  set_timeouts(fd);
  if (connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa))) die("connect to " + addr, errno);
  return fd;
}

// ---- verbs -------------------------------------------------------------------------

struct Verbs {
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  ibv_cq* cq = nullptr;
  ibv_gid gid{};
};

Verbs open_verbs(int cqe) {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (!list || n == 0) die("no RDMA device (is vrdmad running and the drop-in library used?)");
  Verbs v;
  v.ctx = ibv_open_device(list[0]);
  ibv_free_device_list(list);
  if (!v.ctx) die("ibv_open_device", errno);
  v.pd = ibv_alloc_pd(v.ctx);
  if (!v.pd) die("ibv_alloc_pd", errno);
  if (cqe > 0) {
    v.cq = ibv_create_cq(v.ctx, cqe, nullptr, nullptr, 0);
    if (!v.cq) die("ibv_create_cq", errno);
  }
  if (ibv_query_gid(v.ctx, 1, 0, &v.gid)) die("ibv_query_gid", errno);
  return v;
}

ibv_qp* create_rc_qp(const Verbs& v) {
  ibv_qp_init_attr a{};
  a.send_cq = v.cq;
  a.recv_cq = v.cq;
  a.qp_type = IBV_QPT_RC;
  a.cap.max_send_wr = 4;
  a.cap.max_recv_wr = 1;
  a.cap.max_send_sge = 1;
  a.cap.max_recv_sge = 1;
  ibv_qp* qp = ibv_create_qp(v.pd, &a);
  if (!qp) die("ibv_create_qp", errno);
  return qp;
}

void to_init(ibv_qp* qp) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = 0;
  a.port_num = 1;
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  int err =
      ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
  if (err) die("modify QP to INIT", err);
}

void to_rts(ibv_qp* qp, uint32_t dest_qpn, const ibv_gid& dgid) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_4096;
  a.dest_qp_num = dest_qpn;
  a.rq_psn = 0;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  a.ah_attr.is_global = 1;
  a.ah_attr.grh.dgid = dgid;
  a.ah_attr.grh.sgid_index = 0;
  a.ah_attr.grh.hop_limit = 1;
  a.ah_attr.port_num = 1;
  int err = ibv_modify_qp(qp, &a,
                          IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                              IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
  if (err) die("modify QP to RTR", err);
  a = {};
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.sq_psn = 0;
  a.max_rd_atomic = 1;
  err = ibv_modify_qp(qp, &a,
                      IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                          IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
  if (err) die("modify QP to RTS", err);
}

// What each side sends: its GID, then K QPNs; the server adds its buffer's address and rkey.
struct Hello {
  uint8_t gid[16];
  uint32_t count;
  uint32_t rkey;
  uint64_t addr;
};

int verbs_server(const Args& args) {
  int fd = tcp_listen_accept(args.port);
  Hello in{};
  recv_all(fd, &in, sizeof(in));
  if (in.count == 0 || in.count > 65536) die("bad QP count from client");
  std::vector<uint32_t> peer(in.count);
  recv_all(fd, peer.data(), peer.size() * sizeof(uint32_t));

  Verbs v = open_verbs(static_cast<int>(in.count) + 16);
  std::vector<uint64_t> buf(in.count, 0);
  ibv_mr* mr = ibv_reg_mr(v.pd, buf.data(), buf.size() * sizeof(uint64_t),
                          IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  if (!mr) die("ibv_reg_mr", errno);
  ibv_gid dgid;
  memcpy(dgid.raw, in.gid, 16);
  std::vector<ibv_qp*> qps(in.count);
  std::vector<uint32_t> mine(in.count);
  for (uint32_t i = 0; i < in.count; ++i) {
    qps[i] = create_rc_qp(v);
    to_init(qps[i]);
    to_rts(qps[i], peer[i], dgid);
    mine[i] = qps[i]->qp_num;
  }
  Hello out{};
  memcpy(out.gid, v.gid.raw, 16);
  out.count = in.count;
  out.rkey = mr->rkey;
  out.addr = reinterpret_cast<uintptr_t>(buf.data());
  send_all(fd, &out, sizeof(out));
  send_all(fd, mine.data(), mine.size() * sizeof(uint32_t));

  // The client writes i + 1 into slot i through QP i, then says how many it wrote.
  uint32_t written = 0;
  recv_all(fd, &written, sizeof(written));
  uint32_t ok = 0;
  for (uint32_t i = 0; i < in.count; ++i) ok += buf[i] == i + 1;
  send_all(fd, &ok, sizeof(ok));
  for (ibv_qp* qp : qps) ibv_destroy_qp(qp);
  ibv_dereg_mr(mr);
  close(fd);
  return ok == in.count ? 0 : 1;
}

int verbs_client(const Args& args) {
  if (args.qps <= 0 || args.qps > 65536) die("--qps must be 1..65536");
  uint32_t k = args.qps;
  int fd = tcp_connect(args.addr, args.port);
  Verbs v = open_verbs(static_cast<int>(k) + 16);
  std::vector<uint64_t> src(k);
  for (uint32_t i = 0; i < k; ++i) src[i] = i + 1;
  ibv_mr* mr = ibv_reg_mr(v.pd, src.data(), src.size() * sizeof(uint64_t), IBV_ACCESS_LOCAL_WRITE);
  if (!mr) die("ibv_reg_mr", errno);

  double t0 = now();
  std::vector<ibv_qp*> qps(k);
  std::vector<uint32_t> mine(k);
  for (uint32_t i = 0; i < k; ++i) {
    qps[i] = create_rc_qp(v);
    to_init(qps[i]);
    mine[i] = qps[i]->qp_num;
  }
  double t_created = now();
  Hello out{};
  memcpy(out.gid, v.gid.raw, 16);
  out.count = k;
  send_all(fd, &out, sizeof(out));
  send_all(fd, mine.data(), mine.size() * sizeof(uint32_t));
  Hello in{};
  recv_all(fd, &in, sizeof(in));
  if (in.count != k) die("server answered with a different QP count");
  std::vector<uint32_t> peer(k);
  recv_all(fd, peer.data(), peer.size() * sizeof(uint32_t));
  double t_answered = now();
  ibv_gid dgid;
  memcpy(dgid.raw, in.gid, 16);
  for (uint32_t i = 0; i < k; ++i) to_rts(qps[i], peer[i], dgid);
  double t1 = now();

  // Prove every connection works: one 8-byte RDMA WRITE through each QP.
  for (uint32_t i = 0; i < k; ++i) {
    ibv_sge sge{reinterpret_cast<uintptr_t>(&src[i]), 8, mr->lkey};
    ibv_send_wr wr{}, *bad = nullptr;
    wr.wr_id = i;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = in.addr + 8ull * i;
    wr.wr.rdma.rkey = in.rkey;
    int err = ibv_post_send(qps[i], &wr, &bad);
    if (err) die("ibv_post_send", err);
    // Keep at most 256 writes in flight (the CQ holds k + 16).
    if ((i + 1) % 256 == 0 || i + 1 == k) {
      uint32_t want = (i % 256) + 1;
      double deadline = now() + kTimeoutMs / 1000.0;
      while (want) {
        ibv_wc wc[32];
        int n = ibv_poll_cq(v.cq, 32, wc);
        if (n < 0) die("ibv_poll_cq failed");
        for (int j = 0; j < n; ++j)
          if (wc[j].status != IBV_WC_SUCCESS)
            die(std::string("RDMA WRITE on a new connection failed: ") +
                ibv_wc_status_str(wc[j].status));
        want -= n;
        if (n == 0 && now() > deadline) die("RDMA WRITE completions did not arrive");
      }
    }
  }
  send_all(fd, &k, sizeof(k));
  uint32_t ok = 0;
  recv_all(fd, &ok, sizeof(ok));
  if (ok != k) die("server saw " + std::to_string(ok) + " of " + std::to_string(k) + " writes");
  double t2 = now();
  for (ibv_qp* qp : qps) ibv_destroy_qp(qp);
  double t3 = now();
  std::printf(
      "{\"mode\": \"verbs\", \"qps\": %u, \"seconds\": %.6f, \"per_second\": %.1f, "
      "\"create_init_s\": %.6f, \"exchange_s\": %.6f, \"rtr_rts_s\": %.6f, \"verify_s\": %.6f, "
      "\"destroy_s\": %.6f, \"verified\": %u}\n",
      k, t1 - t0, k / (t1 - t0), t_created - t0, t_answered - t_created, t1 - t_answered, t2 - t1,
      t3 - t2, ok);
  ibv_dereg_mr(mr);
  close(fd);
  return 0;
}

// ---- rdma_cm -------------------------------------------------------------------------

rdma_cm_event* next_event(rdma_event_channel* ch, int timeout_ms) {
  pollfd pfd{ch->fd, POLLIN, 0};
  int r = poll(&pfd, 1, timeout_ms);
  if (r < 0) die("poll on the event channel", errno);
  if (r == 0) return nullptr;
  rdma_cm_event* ev = nullptr;
  if (rdma_get_cm_event(ch, &ev)) die("rdma_get_cm_event", errno);
  return ev;
}

// Waits for the next event on the channel and checks its type.
void expect_event(rdma_event_channel* ch, rdma_cm_event_type want, const std::string& what) {
  rdma_cm_event* ev = next_event(ch, kTimeoutMs);
  if (!ev)
    die("no event within " + std::to_string(kTimeoutMs / 1000) + " s while waiting for " + what);
  rdma_cm_event_type got = ev->event;
  int status = ev->status;
  rdma_ack_cm_event(ev);
  if (got != want)
    die(what + ": got " + rdma_event_str(got) + " (status " + std::to_string(status) + ")");
}

ibv_qp_init_attr cm_qp_attr(ibv_cq* cq) {
  ibv_qp_init_attr a{};
  a.send_cq = cq;
  a.recv_cq = cq;
  a.qp_type = IBV_QPT_RC;
  a.cap.max_send_wr = 4;
  a.cap.max_recv_wr = 4;
  a.cap.max_send_sge = 1;
  a.cap.max_recv_sge = 1;
  return a;
}

int cm_server(const Args& args) {
  rdma_event_channel* ch = rdma_create_event_channel();
  if (!ch) die("rdma_create_event_channel", errno);
  rdma_cm_id* listen_id = nullptr;
  if (rdma_create_id(ch, &listen_id, nullptr, RDMA_PS_TCP)) die("rdma_create_id", errno);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(args.port);
  if (rdma_bind_addr(listen_id, reinterpret_cast<sockaddr*>(&sa))) die("rdma_bind_addr", errno);
  if (rdma_listen(listen_id, 1024)) die("rdma_listen", errno);
  std::printf("{\"listening\": %d}\n", args.port);
  std::fflush(stdout);

  ibv_pd* pd = nullptr;
  ibv_cq* cq = nullptr;
  int established = 0, disconnected = 0;
  while (disconnected < args.count) {
    rdma_cm_event* ev = next_event(ch, established == 0 ? 120000 : kTimeoutMs);
    if (!ev) die("timed out after " + std::to_string(established) + " connections");
    rdma_cm_id* id = ev->id;
    switch (ev->event) {
      case RDMA_CM_EVENT_CONNECT_REQUEST: {
        if (!pd) {
          pd = ibv_alloc_pd(id->verbs);
          cq = pd ? ibv_create_cq(id->verbs, 4096, nullptr, nullptr, 0) : nullptr;
          if (!cq) die("PD/CQ for accepted connections", errno);
        }
        ibv_qp_init_attr a = cm_qp_attr(cq);
        if (rdma_create_qp(id, pd, &a)) die("rdma_create_qp", errno);
        rdma_conn_param p{};
        p.responder_resources = 1;
        p.initiator_depth = 1;
        p.rnr_retry_count = 7;
        if (rdma_accept(id, &p)) die("rdma_accept", errno);
        rdma_ack_cm_event(ev);
        break;
      }
      case RDMA_CM_EVENT_ESTABLISHED:
        ++established;
        rdma_ack_cm_event(ev);
        break;
      case RDMA_CM_EVENT_DISCONNECTED:
        rdma_ack_cm_event(ev);
        rdma_destroy_qp(id);
        rdma_destroy_id(id);
        ++disconnected;
        break;
      default: {
        std::string name = rdma_event_str(ev->event);
        int status = ev->status;
        rdma_ack_cm_event(ev);
        die("unexpected event " + name + " (status " + std::to_string(status) + ")");
      }
    }
  }
  std::printf("{\"established\": %d}\n", established);
  rdma_destroy_id(listen_id);
  rdma_destroy_event_channel(ch);
  return 0;
}

int cm_client(const Args& args) {
  if (args.count <= 0) die("--count must be positive");
  rdma_event_channel* ch = rdma_create_event_channel();
  if (!ch) die("rdma_create_event_channel", errno);
  sockaddr_in dst = parse_addr(args.addr, args.port);
  std::vector<rdma_cm_id*> ids;
  ibv_pd* pd = nullptr;
  ibv_cq* cq = nullptr;
  double resolve_s = 0, connect_s = 0;
  double t0 = now();
  for (int i = 0; i < args.count; ++i) {
    double a = now();
    rdma_cm_id* id = nullptr;
    if (rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP)) die("rdma_create_id", errno);
    if (rdma_resolve_addr(id, nullptr, reinterpret_cast<sockaddr*>(&dst), 2000))
      die("rdma_resolve_addr", errno);
    expect_event(ch, RDMA_CM_EVENT_ADDR_RESOLVED, "address resolution of " + args.addr);
    if (rdma_resolve_route(id, 2000)) die("rdma_resolve_route", errno);
    expect_event(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, "route resolution");
    if (!pd) {
      pd = ibv_alloc_pd(id->verbs);
      cq = pd ? ibv_create_cq(id->verbs, 4096, nullptr, nullptr, 0) : nullptr;
      if (!cq) die("PD/CQ for connections", errno);
    }
    ibv_qp_init_attr qa = cm_qp_attr(cq);
    if (rdma_create_qp(id, pd, &qa)) die("rdma_create_qp", errno);
    double b = now();
    rdma_conn_param p{};
    p.responder_resources = 1;
    p.initiator_depth = 1;
    p.retry_count = 7;
    p.rnr_retry_count = 7;
    if (rdma_connect(id, &p)) die("rdma_connect", errno);
    expect_event(ch, RDMA_CM_EVENT_ESTABLISHED,
                 "connection " + std::to_string(i + 1) + " of " + std::to_string(args.count) +
                     " to be established");
    ids.push_back(id);
    double c = now();
    resolve_s += b - a;
    connect_s += c - b;
  }
  double t1 = now();
  for (rdma_cm_id* id : ids) {
    if (rdma_disconnect(id)) die("rdma_disconnect", errno);
    expect_event(ch, RDMA_CM_EVENT_DISCONNECTED, "disconnect");
    rdma_destroy_qp(id);
    rdma_destroy_id(id);
  }
  double t2 = now();
  std::printf(
      "{\"mode\": \"rdma_cm\", \"connections\": %d, \"seconds\": %.6f, \"per_second\": %.1f, "
      "\"mean_resolve_ms\": %.3f, \"mean_connect_ms\": %.3f, \"disconnect_s\": %.6f}\n",
      args.count, t1 - t0, args.count / (t1 - t0), resolve_s * 1000 / args.count,
      connect_s * 1000 / args.count, t2 - t1);
  if (cq) ibv_destroy_cq(cq);
  if (pd) ibv_dealloc_pd(pd);
  rdma_destroy_event_channel(ch);
  return 0;
}

// ---- hold ----------------------------------------------------------------------------

int hold(const Args& args) {
  Verbs v = open_verbs(args.qps > 0 ? 256 : 16);
  std::vector<ibv_qp*> qps;
  for (int i = 0; i < args.qps; ++i) {
    qps.push_back(create_rc_qp(v));
    to_init(qps.back());
  }
  std::vector<ibv_mr*> mrs;
  size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  size_t len = (args.mr_size + page - 1) / page * page;
  for (int i = 0; i < args.mrs; ++i) {
    void* p = nullptr;
    if (posix_memalign(&p, page, len)) die("posix_memalign failed");
    memset(p, 0, len);
    ibv_mr* mr = ibv_reg_mr(
        v.pd, p, len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
    if (!mr) die("ibv_reg_mr #" + std::to_string(i + 1), errno);
    mrs.push_back(mr);
  }
  std::printf("{\"ready\": true, \"qps\": %zu, \"mrs\": %zu, \"mr_bytes\": %zu}\n", qps.size(),
              mrs.size(), len);
  std::fflush(stdout);
  double end = now() + args.seconds;
  while (now() < end) usleep(100000);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage();
  Args a;
  a.mode = argv[1];
  int i = 2;
  if ((a.mode == "verbs-client" || a.mode == "cm-client") && i < argc && argv[i][0] != '-')
    a.addr = argv[i++];
  for (; i < argc; ++i) {
    std::string o = argv[i];
    if (i + 1 >= argc) return usage();
    const char* v = argv[++i];
    if (o == "--port")
      a.port = std::atoi(v);
    else if (o == "--qps")
      a.qps = std::atoi(v);
    else if (o == "--count")
      a.count = std::atoi(v);
    else if (o == "--mrs")
      a.mrs = std::atoi(v);
    else if (o == "--mr-size")
      a.mr_size = std::strtoull(v, nullptr, 10);
    else if (o == "--seconds")
      a.seconds = std::atof(v);
    else
      return usage();
  }
  if (a.mode == "verbs-server") return verbs_server(a);
  if (a.mode == "verbs-client" && !a.addr.empty()) return verbs_client(a);
  if (a.mode == "cm-server") return cm_server(a);
  if (a.mode == "cm-client" && !a.addr.empty()) return cm_client(a);
  if (a.mode == "hold") return hold(a);
  return usage();
}
