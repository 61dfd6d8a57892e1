// XRC through the drop-in libibverbs: domains named by files (ibv_open_xrcd's O_CREAT and O_EXCL,
// two opens of one inode share the domain), XRC SRQs and their numbers, XRC_SEND and XRC_RECV
// QPs; sends, sends with immediate data and RDMA into the SRQ a request names, with data checked
// byte for byte, and the error paths (an SRQ number that does not exist, an SRQ of another
// domain, receives on XRC QPs, closing a domain in use); ibv_open_qp from a second context of the
// domain, its refusals, and the QP living while any of its handles does; ibv_open_qp of a QP
// another process made (tests/tools/xrc_qp_maker), which outlives its maker.
#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <string>

#include "verbs_fixture.h"

namespace vrdma::testing {
namespace {

// A tests/tools/xrc_qp_maker process with a pipe to its stdin and one from its stdout; killed
// and reaped at the latest when it goes out of scope.
class Helper {
 public:
  explicit Helper(std::vector<std::string> args) {
    int in[2], out[2];
    if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0) return;
    // The arguments on the stack: heap pages that hold registered memory are not in the child
    // (the library marks them MADV_DONTFORK), and other heap objects may share those pages.
    char text[6][64] = {};
    char* argv[8] = {const_cast<char*>(XRC_QP_MAKER)};
    if (args.size() > 6) return;
    for (size_t i = 0; i < args.size(); ++i) {
      snprintf(text[i], sizeof(text[i]), "%s", args[i].c_str());
      argv[i + 1] = text[i];
    }
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(in[0], 0);
      ::dup2(out[1], 1);
      ::dup2(out[1], 2);  // its complaints come to the test as lines too
      ::execv(XRC_QP_MAKER, argv);
      const char* why = strerror(errno);  // the child reports why, as its one line
      if (::write(1, "exec: ", 6) < 0 || ::write(1, why, strlen(why)) < 0) ::_exit(126);
      ::_exit(127);
    }
    ::close(in[0]);
    ::close(out[1]);
    to_ = in[1];
    from_ = out[0];
  }
  ~Helper() {
    ::close(to_);
    ::close(from_);
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  // A line of its output (without the newline); "" after 20 s without one.
  std::string line() {
    std::string l;
    char ch;
    pollfd p{from_, POLLIN, 0};
    while (l.size() < 128 && ::poll(&p, 1, 20000) == 1 && ::read(from_, &ch, 1) == 1 && ch != '\n')
      l += ch;
    return l;
  }
  uint32_t qpn() {
    last_ = line();
    unsigned n = 0;
    return ::sscanf(last_.c_str(), "qpn %x", &n) == 1 ? n : 0;
  }
  const std::string& last() const { return last_; }
  bool tell(const char* what) {
    return ::write(to_, what, strlen(what)) == static_cast<ssize_t>(strlen(what));
  }
  // Its exit status once it ended (128 + the signal that killed it; -1: not within 20 s).
  int wait() {
    for (int i = 0; i < 2000 && pid_ > 0; ++i) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = 0;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      ::usleep(10000);
    }
    return -1;
  }

 private:
  pid_t pid_ = -1;
  int to_ = -1, from_ = -1;
  std::string last_;
};

class VerbsXrcTest : public VerbsTest {
 protected:
  void TearDown() override {
    for (ibv_qp* q : qps) ibv_destroy_qp(q);
    qps.clear();
    for (ibv_srq* s : srqs) ibv_destroy_srq(s);
    for (ibv_xrcd* x : xrcds) EXPECT_EQ(ibv_close_xrcd(x), 0);
    for (int fd : files) ::close(fd);
    for (ibv_context* c : contexts) EXPECT_EQ(ibv_close_device(c), 0);
    VerbsTest::TearDown();
  }

  // A new file to name a domain by.
  int file() {
    FILE* f = ::tmpfile();
    EXPECT_NE(f, nullptr);
    int fd = ::dup(::fileno(f));
    ::fclose(f);
    files.push_back(fd);
    return fd;
  }

  // Another context of the device (closed last).
  ibv_context* second_context() {
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    EXPECT_EQ(n, 1);
    ibv_context* c = list && n == 1 ? ibv_open_device(list[0]) : nullptr;
    if (list) ibv_free_device_list(list);
    EXPECT_NE(c, nullptr);
    if (c) contexts.push_back(c);
    return c;
  }

  ibv_xrcd* open_xrcd(int fd, int oflags, ibv_context* in = nullptr) {
    ibv_xrcd_init_attr a{};
    a.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
    a.fd = fd;
    a.oflags = oflags;
    ibv_xrcd* x = ibv_open_xrcd(in ? in : ctx, &a);
    if (x) xrcds.push_back(x);
    return x;
  }

  ibv_srq* xrc_srq(ibv_xrcd* x, ibv_cq* c, uint32_t max_wr = 128) {
    ibv_srq_init_attr_ex a{};
    a.attr.max_wr = max_wr;
    a.attr.max_sge = 2;
    a.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_XRCD |
                  IBV_SRQ_INIT_ATTR_CQ;
    a.srq_type = IBV_SRQT_XRC;
    a.pd = pd;
    a.xrcd = x;
    a.cq = c;
    ibv_srq* s = ibv_create_srq_ex(ctx, &a);
    EXPECT_NE(s, nullptr) << strerror(errno);
    if (s) srqs.push_back(s);
    return s;
  }

  ibv_qp* recv_qp(ibv_xrcd* x) {
    ibv_qp_init_attr_ex a{};
    a.qp_type = IBV_QPT_XRC_RECV;
    a.comp_mask = IBV_QP_INIT_ATTR_XRCD;
    a.xrcd = x;
    ibv_qp* q = ibv_create_qp_ex(ctx, &a);
    EXPECT_NE(q, nullptr) << strerror(errno);
    if (q) qps.push_back(q);
    return q;
  }

  ibv_qp* send_qp(ibv_cq* c, uint64_t ops = 0) {
    ibv_qp_init_attr_ex a{};
    a.qp_type = IBV_QPT_XRC_SEND;
    a.send_cq = c;
    a.cap.max_send_wr = 64;
    a.cap.max_send_sge = 2;
    a.comp_mask = IBV_QP_INIT_ATTR_PD | (ops ? IBV_QP_INIT_ATTR_SEND_OPS_FLAGS : 0);
    a.pd = pd;
    a.send_ops_flags = ops;
    ibv_qp* q = ibv_create_qp_ex(ctx, &a);
    EXPECT_NE(q, nullptr) << strerror(errno);
    if (q) qps.push_back(q);
    return q;
  }

  // Both QPs to RTS, each naming the other (the XRC_RECV QP's RTR is its consent).
  static void connect_xrc(ibv_qp* snd, ibv_qp* rcv) {
    for (ibv_qp* q : {snd, rcv}) {
      ibv_qp_attr a{};
      a.qp_state = IBV_QPS_INIT;
      a.port_num = 1;
      a.qp_access_flags =
          q == rcv ? IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC
                   : 0;
      ASSERT_EQ(ibv_modify_qp(q, &a,
                              IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
                0);
    }
    for (ibv_qp* q : {rcv, snd}) {
      ibv_qp_attr a{};
      a.qp_state = IBV_QPS_RTR;
      a.path_mtu = IBV_MTU_1024;
      a.dest_qp_num = (q == rcv ? snd : rcv)->qp_num;
      a.max_dest_rd_atomic = 4;
      a.min_rnr_timer = 1;
      a.ah_attr.port_num = 1;
      ASSERT_EQ(ibv_modify_qp(q, &a,
                              IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER),
                0)
          << strerror(errno);
    }
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 8;
    a.retry_cnt = 2;
    a.rnr_retry = 7;
    a.max_rd_atomic = 4;
    ASSERT_EQ(ibv_modify_qp(snd, &a,
                            IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC),
              0);
  }

  static uint32_t srq_num(ibv_srq* s) {
    uint32_t n = 0;
    EXPECT_EQ(ibv_get_srq_num(s, &n), 0);
    return n;
  }

  static int post_srq_recv(ibv_srq* s, Buffer& b, uint64_t off, uint32_t len, uint64_t wr_id) {
    ibv_sge sge{b.addr() + off, len, b.mr->lkey};
    ibv_recv_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad;
    return ibv_post_srq_recv(s, &wr, &bad);
  }

  // ibv_open_qp in context `c` through domain `x`; errno kept on failure.
  ibv_qp* open_qp(ibv_context* c, ibv_xrcd* x, uint32_t num, ibv_qp_type type = IBV_QPT_XRC_RECV) {
    ibv_qp_open_attr a{};
    a.comp_mask = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE |
                  IBV_QP_OPEN_ATTR_CONTEXT;
    a.qp_num = num;
    a.xrcd = x;
    a.qp_type = type;
    a.qp_context = this;
    ibv_qp* q = ibv_open_qp(c, &a);
    if (q) qps.insert(qps.begin(), q);  // destroyed before the QPs it may share one with
    return q;
  }

  void drop(ibv_qp* q) {
    qps.erase(std::find(qps.begin(), qps.end(), q));
    ASSERT_EQ(ibv_destroy_qp(q), 0);
  }

  // One send of `len` random bytes from `snd` into SRQ `s` (CQ `rcq`), checked byte for byte.
  void send_through(ibv_qp* snd, ibv_cq* scq, ibv_srq* s, ibv_cq* rcq, uint32_t len, int seed) {
    Buffer& src = buffer(len);
    Buffer& dst = buffer(len);
    fill_random(src.data(), len, seed);
    ASSERT_EQ(post_srq_recv(s, dst, 0, len, 77), 0);
    ibv_sge sge{src.addr(), len, src.mr->lkey};
    ibv_send_wr w = send_wr(IBV_WR_SEND, sge);
    w.qp_type.xrc.remote_srqn = srq_num(s);
    ASSERT_EQ(complete_one(snd, w, scq), IBV_WC_SUCCESS);
    auto wc = poll(rcq, 1);
    ASSERT_EQ(wc.size(), 1u);
    EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc[0].wr_id, 77u);
    EXPECT_EQ(wc[0].byte_len, len);
    EXPECT_EQ(memcmp(dst.data(), src.data(), len), 0);
  }

  std::vector<ibv_srq*> srqs;
  std::vector<ibv_xrcd*> xrcds;
  std::vector<int> files;
  std::vector<ibv_context*> contexts;
};

TEST_F(VerbsXrcTest, DeviceSaysItHasXrc) {
  ibv_device_attr_ex a{};
  ASSERT_EQ(ibv_query_device_ex(ctx, nullptr, &a), 0);
  EXPECT_TRUE(a.orig_attr.device_cap_flags & IBV_DEVICE_XRC);
  EXPECT_TRUE(a.device_cap_flags_ex & IBV_DEVICE_XRC);
  // ODP MRs serve XRC as any other: sends, RDMA, atomics and receives through XRC SRQs.
  EXPECT_EQ(a.xrc_odp_caps,
            uint32_t(IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_WRITE | IBV_ODP_SUPPORT_READ |
                     IBV_ODP_SUPPORT_ATOMIC | IBV_ODP_SUPPORT_SRQ_RECV));
}

TEST_F(VerbsXrcTest, DomainsByFileFollowOpenFlags) {
  int f = file();
  // A file without a domain: only O_CREAT makes one.
  errno = 0;
  EXPECT_EQ(open_xrcd(f, 0), nullptr);
  EXPECT_EQ(errno, EINVAL);
  ibv_xrcd* a = open_xrcd(f, O_CREAT);
  ASSERT_NE(a, nullptr) << strerror(errno);
  // The domain exists now: opening it again needs no O_CREAT, and O_EXCL refuses it.
  ibv_xrcd* b = open_xrcd(f, 0);
  EXPECT_NE(b, nullptr) << strerror(errno);
  errno = 0;
  EXPECT_EQ(open_xrcd(f, O_CREAT | O_EXCL), nullptr);
  EXPECT_EQ(errno, EINVAL);
  // No file: a new domain every time.
  EXPECT_NE(open_xrcd(-1, O_CREAT), nullptr);
  EXPECT_NE(open_xrcd(-1, O_CREAT | O_EXCL), nullptr);
  // Bad attributes.
  ibv_xrcd_init_attr bad{};
  bad.comp_mask = IBV_XRCD_INIT_ATTR_FD;
  bad.fd = f;
  EXPECT_EQ(ibv_open_xrcd(ctx, &bad), nullptr);
  EXPECT_EQ(errno, EINVAL);
}

TEST_F(VerbsXrcTest, ADomainInUseDoesNotClose) {
  ibv_xrcd* x = open_xrcd(file(), O_CREAT);
  ASSERT_NE(x, nullptr);
  ibv_srq* s = xrc_srq(x, cq());
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(ibv_close_xrcd(x), EBUSY);
  ibv_destroy_srq(s);
  srqs.clear();
  ibv_qp* r = recv_qp(x);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(ibv_close_xrcd(x), EBUSY);
}

TEST_F(VerbsXrcTest, SrqNumbersAndQpAttributes) {
  ibv_xrcd* x = open_xrcd(file(), O_CREAT);
  ASSERT_NE(x, nullptr);
  ibv_cq* c = cq();
  ibv_srq* s1 = xrc_srq(x, c);
  ibv_srq* s2 = xrc_srq(x, c);
  ASSERT_TRUE(s1 && s2);
  EXPECT_NE(srq_num(s1), 0u);
  EXPECT_NE(srq_num(s1), srq_num(s2));
  // A basic SRQ has no number; XRC SRQs need a domain and a CQ.
  ibv_srq_init_attr basic{};
  basic.attr.max_wr = 4;
  basic.attr.max_sge = 1;
  ibv_srq* b = ibv_create_srq(pd, &basic);
  ASSERT_NE(b, nullptr);
  uint32_t n;
  EXPECT_EQ(ibv_get_srq_num(b, &n), EINVAL);
  ibv_destroy_srq(b);
  ibv_srq_init_attr_ex a{};
  a.attr.max_wr = 4;
  a.attr.max_sge = 1;
  a.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_CQ;
  a.srq_type = IBV_SRQT_XRC;
  a.pd = pd;
  a.cq = c;
  EXPECT_EQ(ibv_create_srq_ex(ctx, &a), nullptr);
  EXPECT_EQ(errno, EINVAL);
  // XRC QPs take no receives; an XRC_RECV QP sends nothing.
  ibv_qp* r = recv_qp(x);
  ibv_qp* snd = send_qp(c);
  ASSERT_TRUE(r && snd);
  EXPECT_EQ(r->qp_type, IBV_QPT_XRC_RECV);
  EXPECT_EQ(snd->qp_type, IBV_QPT_XRC_SEND);
  EXPECT_EQ(snd->recv_cq, nullptr);
  Buffer& buf = buffer(64);
  EXPECT_NE(post_recv(r, buf, 16), 0);
  EXPECT_NE(post_recv(snd, buf, 16), 0);
  // An XRC_RECV QP without a domain is not one.
  ibv_qp_init_attr_ex no{};
  no.qp_type = IBV_QPT_XRC_RECV;
  no.comp_mask = IBV_QP_INIT_ATTR_PD;
  no.pd = pd;
  EXPECT_EQ(ibv_create_qp_ex(ctx, &no), nullptr);
}

// Sends and sends with immediate data to two SRQs of one domain through one connection, both
// interfaces: each lands in the SRQ it named and completes on that SRQ's CQ.
TEST_F(VerbsXrcTest, SendsLandInTheSrqTheyName) {
  ibv_xrcd* x = open_xrcd(file(), O_CREAT);
  ASSERT_NE(x, nullptr);
  ibv_cq* scq = cq();
  ibv_cq* c1 = cq();
  ibv_cq* c2 = cq();
  ibv_srq* s1 = xrc_srq(x, c1);
  ibv_srq* s2 = xrc_srq(x, c2);
  ibv_qp* r = recv_qp(x);
  ibv_qp* snd = send_qp(scq, IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM);
  ASSERT_TRUE(s1 && s2 && r && snd);
  connect_xrc(snd, r);
  constexpr int kMsgs = 16;
  constexpr uint32_t kLen = 3000;
  Buffer& src = buffer(kMsgs * kLen);
  Buffer& dst = buffer(kMsgs * kLen);
  fill_random(src.data(), src.mem.size(), 0x5eed);
  for (int i = 0; i < kMsgs; ++i)
    ASSERT_EQ(post_srq_recv(i % 2 ? s2 : s1, dst, uint64_t(i) * kLen, kLen, 1000 + i), 0);
  ibv_qp_ex* qx = ibv_qp_to_qp_ex(snd);
  ASSERT_NE(qx, nullptr);
  for (int i = 0; i < kMsgs; ++i) {
    ibv_srq* target = i % 2 ? s2 : s1;
    uint32_t len = kLen - uint32_t(i) * 7;
    ibv_sge sge{src.addr() + uint64_t(i) * kLen, len, src.mr->lkey};
    if (i < kMsgs / 2) {
      ibv_send_wr wr = send_wr(i % 3 ? IBV_WR_SEND : IBV_WR_SEND_WITH_IMM, sge);
      wr.wr_id = i;
      wr.imm_data = htonl(0xab00 + i);
      wr.qp_type.xrc.remote_srqn = srq_num(target);
      ASSERT_EQ(complete_one(snd, wr, scq), IBV_WC_SUCCESS);
    } else {
      ibv_wr_start(qx);
      qx->wr_id = i;
      qx->wr_flags = IBV_SEND_SIGNALED;
      if (i % 3)
        ibv_wr_send(qx);
      else
        ibv_wr_send_imm(qx, htonl(0xab00 + i));
      ibv_wr_set_xrc_srqn(qx, srq_num(target));
      ibv_wr_set_sge(qx, sge.lkey, sge.addr, sge.length);
      ASSERT_EQ(ibv_wr_complete(qx), 0);
      auto w = poll(scq, 1);
      ASSERT_EQ(w.size(), 1u);
      ASSERT_EQ(w[0].status, IBV_WC_SUCCESS);
      EXPECT_EQ(w[0].wr_id, uint64_t(i));
    }
    auto w = poll(i % 2 ? c2 : c1, 1);
    ASSERT_EQ(w.size(), 1u) << "message " << i;
    EXPECT_EQ(w[0].status, IBV_WC_SUCCESS);
    EXPECT_EQ(w[0].wr_id, uint64_t(1000 + i));
    EXPECT_EQ(w[0].opcode, IBV_WC_RECV);
    EXPECT_EQ(w[0].byte_len, len);
    EXPECT_EQ(w[0].src_qp, snd->qp_num);
    if (i % 3 == 0) {
      EXPECT_TRUE(w[0].wc_flags & IBV_WC_WITH_IMM);
      EXPECT_EQ(ntohl(w[0].imm_data), 0xab00u + i);
    } else {
      EXPECT_FALSE(w[0].wc_flags & IBV_WC_WITH_IMM);
    }
    EXPECT_EQ(memcmp(dst.data() + uint64_t(i) * kLen, src.data() + uint64_t(i) * kLen, len), 0)
        << "message " << i;
  }
  // Nothing landed anywhere else.
  EXPECT_TRUE(poll(c1, 1, 50).empty());
  EXPECT_TRUE(poll(c2, 1, 50).empty());
}

// RDMA and atomics through an XRC connection: the XRC_RECV QP's access flags, the SRQ's PD.
TEST_F(VerbsXrcTest, RdmaAndAtomicsThroughTheConnection) {
  ibv_xrcd* x = open_xrcd(file(), O_CREAT);
  ASSERT_NE(x, nullptr);
  ibv_cq* scq = cq();
  ibv_srq* s = xrc_srq(x, cq());
  ibv_qp* r = recv_qp(x);
  ibv_qp* snd = send_qp(scq);
  ASSERT_TRUE(s && r && snd);
  connect_xrc(snd, r);
  Buffer& local = buffer(8192);
  Buffer& remote = buffer(8192);
  fill_random(local.data(), 4096, 7);
  fill_random(remote.data() + 4096, 4096, 8);
  ibv_sge sge{local.addr(), 4096, local.mr->lkey};
  ibv_send_wr w = send_wr(IBV_WR_RDMA_WRITE, sge);
  w.wr.rdma.remote_addr = remote.addr();
  w.wr.rdma.rkey = remote.mr->rkey;
  w.qp_type.xrc.remote_srqn = srq_num(s);
  ASSERT_EQ(complete_one(snd, w, scq), IBV_WC_SUCCESS);
  EXPECT_EQ(memcmp(remote.data(), local.data(), 4096), 0);
  ibv_sge rsge{local.addr() + 4096, 4096, local.mr->lkey};
  ibv_send_wr rd = send_wr(IBV_WR_RDMA_READ, rsge);
  rd.wr.rdma.remote_addr = remote.addr() + 4096;
  rd.wr.rdma.rkey = remote.mr->rkey;
  rd.qp_type.xrc.remote_srqn = srq_num(s);
  ASSERT_EQ(complete_one(snd, rd, scq), IBV_WC_SUCCESS);
  EXPECT_EQ(memcmp(local.data() + 4096, remote.data() + 4096, 4096), 0);
  uint64_t v = 41;
  memcpy(remote.data(), &v, 8);
  ibv_sge asge{local.addr(), 8, local.mr->lkey};
  ibv_send_wr fa = send_wr(IBV_WR_ATOMIC_FETCH_AND_ADD, asge);
  fa.wr.atomic.remote_addr = remote.addr();
  fa.wr.atomic.rkey = remote.mr->rkey;
  fa.wr.atomic.compare_add = 1;
  fa.qp_type.xrc.remote_srqn = srq_num(s);
  ASSERT_EQ(complete_one(snd, fa, scq), IBV_WC_SUCCESS);
  uint64_t old, now;
  memcpy(&old, local.data(), 8);
  memcpy(&now, remote.data(), 8);
  EXPECT_EQ(old, 41u);
  EXPECT_EQ(now, 42u);
}

// An SRQ number nobody has: the request fails (REM_INV_REQ_ERR) and the QP goes to error.
TEST_F(VerbsXrcTest, AnSrqNumberThatDoesNotExistFails) {
  ibv_xrcd* x = open_xrcd(file(), O_CREAT);
  ASSERT_NE(x, nullptr);
  ibv_cq* scq = cq();
  ibv_srq* s = xrc_srq(x, cq());
  ibv_qp* r = recv_qp(x);
  ibv_qp* snd = send_qp(scq);
  ASSERT_TRUE(s && r && snd);
  connect_xrc(snd, r);
  Buffer& b = buffer(64);
  ibv_sge sge{b.addr(), 16, b.mr->lkey};
  ibv_send_wr w = send_wr(IBV_WR_SEND, sge);
  w.qp_type.xrc.remote_srqn = srq_num(s) ^ 0x5a5a;
  EXPECT_EQ(complete_one(snd, w, scq), IBV_WC_REM_INV_REQ_ERR);
  ibv_qp_attr a;
  ibv_qp_init_attr ia;
  ASSERT_EQ(ibv_query_qp(snd, &a, IBV_QP_STATE, &ia), 0);
  EXPECT_EQ(a.qp_state, IBV_QPS_ERR);
}

// An SRQ of another domain is not reached through this domain's XRC_RECV QP, although it lives
// in the same process; the receive it had stays posted.
TEST_F(VerbsXrcTest, AnSrqOfAnotherDomainIsNotReached) {
  ibv_xrcd* x1 = open_xrcd(file(), O_CREAT);
  ibv_xrcd* x2 = open_xrcd(file(), O_CREAT);
  ASSERT_TRUE(x1 && x2);
  ibv_cq* scq = cq();
  ibv_cq* other_cq = cq();
  ibv_srq* other = xrc_srq(x2, other_cq);
  ibv_qp* r = recv_qp(x1);
  ibv_qp* snd = send_qp(scq);
  ASSERT_TRUE(other && r && snd);
  connect_xrc(snd, r);
  Buffer& b = buffer(64);
  ASSERT_EQ(post_srq_recv(other, b, 32, 32, 7), 0);
  ibv_sge sge{b.addr(), 16, b.mr->lkey};
  ibv_send_wr w = send_wr(IBV_WR_SEND, sge);
  w.qp_type.xrc.remote_srqn = srq_num(other);
  EXPECT_EQ(complete_one(snd, w, scq), IBV_WC_REM_INV_REQ_ERR);
  EXPECT_TRUE(poll(other_cq, 1, 50).empty());
}

// Two opens of one file, through two descriptors: an SRQ made in one and an XRC_RECV QP made in
// the other are of one domain.
TEST_F(VerbsXrcTest, OpensOfOneFileShareTheirSrqs) {
  int f = file();
  int again = ::open(("/proc/self/fd/" + std::to_string(f)).c_str(), O_RDONLY);
  ASSERT_GE(again, 0);
  files.push_back(again);
  ibv_xrcd* a = open_xrcd(f, O_CREAT);
  ibv_xrcd* b = open_xrcd(again, 0);
  ASSERT_TRUE(a && b);
  ibv_cq* scq = cq();
  ibv_cq* rcq = cq();
  ibv_srq* s = xrc_srq(a, rcq);
  ibv_qp* r = recv_qp(b);
  ibv_qp* snd = send_qp(scq);
  ASSERT_TRUE(s && r && snd);
  connect_xrc(snd, r);
  Buffer& src = buffer(256);
  Buffer& dst = buffer(256);
  fill_random(src.data(), 256, 99);
  ASSERT_EQ(post_srq_recv(s, dst, 0, 256, 5), 0);
  ibv_sge sge{src.addr(), 256, src.mr->lkey};
  ibv_send_wr w = send_wr(IBV_WR_SEND, sge);
  w.qp_type.xrc.remote_srqn = srq_num(s);
  ASSERT_EQ(complete_one(snd, w, scq), IBV_WC_SUCCESS);
  auto wc = poll(rcq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].wr_id, 5u);
  EXPECT_EQ(memcmp(dst.data(), src.data(), 256), 0);
}

// No receive posted: the sender retries (RNR) as RC does, and completes once one is posted.
TEST_F(VerbsXrcTest, NoReceiveWaitsLikeRc) {
  ibv_xrcd* x = open_xrcd(file(), O_CREAT);
  ASSERT_NE(x, nullptr);
  ibv_cq* scq = cq();
  ibv_cq* rcq = cq();
  ibv_srq* s = xrc_srq(x, rcq);
  ibv_qp* r = recv_qp(x);
  ibv_qp* snd = send_qp(scq);
  ASSERT_TRUE(s && r && snd);
  connect_xrc(snd, r);
  Buffer& b = buffer(64);
  ibv_sge sge{b.addr(), 8, b.mr->lkey};
  ibv_send_wr w = send_wr(IBV_WR_SEND, sge);
  w.qp_type.xrc.remote_srqn = srq_num(s);
  ibv_send_wr* bad;
  ASSERT_EQ(ibv_post_send(snd, &w, &bad), 0);
  EXPECT_TRUE(poll(scq, 1, 100).empty());
  ASSERT_EQ(post_srq_recv(s, b, 32, 32, 3), 0);
  auto wc = poll(scq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(poll(rcq, 1).size(), 1u);
}

// ibv_open_qp from a second context that opened the same file: a handle of the same QP, which
// that context modifies and queries; the connection it makes carries traffic into the domain.
TEST_F(VerbsXrcTest, ASecondContextOpensTheQpAndDrivesIt) {
  int f = file();
  ibv_context* other = second_context();
  ASSERT_NE(other, nullptr);
  ibv_xrcd* mine = open_xrcd(f, O_CREAT);
  ibv_xrcd* theirs = open_xrcd(f, 0, other);
  ASSERT_TRUE(mine && theirs);
  ibv_cq* scq = cq();
  ibv_cq* rcq = cq();
  ibv_srq* s = xrc_srq(mine, rcq);
  ibv_qp* r = recv_qp(mine);
  ibv_qp* snd = send_qp(scq);
  ASSERT_TRUE(s && r && snd);
  ibv_qp* o = open_qp(other, theirs, r->qp_num);
  ASSERT_NE(o, nullptr) << strerror(errno);
  EXPECT_EQ(o->qp_num, r->qp_num);
  EXPECT_EQ(o->context, other);
  EXPECT_EQ(o->qp_type, IBV_QPT_XRC_RECV);
  EXPECT_EQ(o->qp_context, this);
  connect_xrc(snd, o);  // the XRC_RECV side goes through the opened handle
  ibv_qp_attr a{};
  ibv_qp_init_attr ia{};
  ASSERT_EQ(ibv_query_qp(r, &a, IBV_QP_STATE | IBV_QP_DEST_QPN, &ia), 0);
  EXPECT_EQ(a.qp_state, IBV_QPS_RTR);
  EXPECT_EQ(a.dest_qp_num, snd->qp_num);
  ASSERT_EQ(ibv_query_qp(o, &a, IBV_QP_STATE, &ia), 0);
  EXPECT_EQ(a.qp_state, IBV_QPS_RTR);
  EXPECT_EQ(ia.qp_context, this);
  send_through(snd, scq, s, rcq, 1500, 31);
}

// A context that did not open the QP's domain gets EINVAL, as the kernel answers a number its
// domain does not have; so does a domain of another context.
TEST_F(VerbsXrcTest, AContextWithoutTheDomainCannotOpenTheQp) {
  ibv_context* other = second_context();
  ASSERT_NE(other, nullptr);
  ibv_xrcd* mine = open_xrcd(file(), O_CREAT);
  ibv_xrcd* elsewhere = open_xrcd(file(), O_CREAT, other);
  ASSERT_TRUE(mine && elsewhere);
  ibv_qp* r = recv_qp(mine);
  ASSERT_NE(r, nullptr);
  errno = 0;
  EXPECT_EQ(open_qp(other, elsewhere, r->qp_num), nullptr);
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(open_qp(other, mine, r->qp_num), nullptr);
  EXPECT_EQ(errno, EINVAL);
  // Through its own domain, the creator's context may open it.
  ibv_qp* o = open_qp(ctx, mine, r->qp_num);
  EXPECT_NE(o, nullptr) << strerror(errno);
}

// Numbers that are not an XRC_RECV QP of the domain, and attributes ibv_open_qp does not take.
TEST_F(VerbsXrcTest, OpenQpRefusesWrongNumbersAndAttributes) {
  ibv_xrcd* x = open_xrcd(file(), O_CREAT);
  ASSERT_NE(x, nullptr);
  ibv_cq* c = cq();
  ibv_srq* s = xrc_srq(x, c);
  ibv_qp* r = recv_qp(x);
  ibv_qp* snd = send_qp(c);
  ASSERT_TRUE(s && r && snd);
  for (uint32_t num : {r->qp_num ^ 0x5a5au, snd->qp_num, srq_num(s), 0u, 0xffffffu}) {
    errno = 0;
    EXPECT_EQ(open_qp(ctx, x, num), nullptr) << std::hex << num;
    EXPECT_EQ(errno, EINVAL) << std::hex << num;
  }
  errno = 0;
  EXPECT_EQ(open_qp(ctx, x, r->qp_num, IBV_QPT_RC), nullptr);
  EXPECT_EQ(errno, EINVAL);
  ibv_qp_open_attr a{};
  a.comp_mask = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_TYPE;  // no domain
  a.qp_num = r->qp_num;
  a.qp_type = IBV_QPT_XRC_RECV;
  a.xrcd = x;
  errno = 0;
  EXPECT_EQ(ibv_open_qp(ctx, &a), nullptr);
  EXPECT_EQ(errno, EINVAL);
  a.comp_mask = IBV_QP_OPEN_ATTR_RESERVED | IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD |
                IBV_QP_OPEN_ATTR_TYPE;
  errno = 0;
  EXPECT_EQ(ibv_open_qp(ctx, &a), nullptr);
  EXPECT_EQ(errno, EINVAL);
}

// Destroying an opened handle drops only that handle: the creator's QP connects and receives.
TEST_F(VerbsXrcTest, DestroyingAnOpenedHandleLeavesTheQp) {
  int f = file();
  ibv_context* other = second_context();
  ASSERT_NE(other, nullptr);
  ibv_xrcd* mine = open_xrcd(f, O_CREAT);
  ibv_xrcd* theirs = open_xrcd(f, 0, other);
  ASSERT_TRUE(mine && theirs);
  ibv_cq* scq = cq();
  ibv_cq* rcq = cq();
  ibv_srq* s = xrc_srq(mine, rcq);
  ibv_qp* r = recv_qp(mine);
  ibv_qp* snd = send_qp(scq);
  ASSERT_TRUE(s && r && snd);
  ibv_qp* o = open_qp(other, theirs, r->qp_num);
  ASSERT_NE(o, nullptr) << strerror(errno);
  drop(o);
  connect_xrc(snd, r);
  send_through(snd, scq, s, rcq, 700, 32);
  // Its domain's handle in the other context is free again.
  EXPECT_EQ(ibv_close_xrcd(theirs), 0);
  xrcds.erase(std::find(xrcds.begin(), xrcds.end(), theirs));
}

// The creator's handle destroyed first: the QP lives on for the context that opened it, whose
// connection carries traffic; it goes with that last handle.
TEST_F(VerbsXrcTest, TheQpLivesWhileAnOpenerHoldsIt) {
  int f = file();
  ibv_context* other = second_context();
  ASSERT_NE(other, nullptr);
  ibv_xrcd* mine = open_xrcd(f, O_CREAT);
  ibv_xrcd* theirs = open_xrcd(f, 0, other);
  ASSERT_TRUE(mine && theirs);
  ibv_cq* scq = cq();
  ibv_cq* rcq = cq();
  ibv_srq* s = xrc_srq(mine, rcq);
  ibv_qp* r = recv_qp(mine);
  ibv_qp* snd = send_qp(scq);
  ASSERT_TRUE(s && r && snd);
  const uint32_t num = r->qp_num;
  ibv_qp* o = open_qp(other, theirs, num);
  ASSERT_NE(o, nullptr) << strerror(errno);
  drop(r);
  connect_xrc(snd, o);
  send_through(snd, scq, s, rcq, 2048, 33);
  drop(o);
  // Gone with its last handle: nobody opens that number any more.
  errno = 0;
  EXPECT_EQ(open_qp(other, theirs, num), nullptr);
  EXPECT_EQ(errno, EINVAL);
}

// ibv_open_qp of a QP another process made (tests/tools/xrc_qp_maker): the opener sees and sets
// the QP's shared state, the maker's exit leaves the QP to the opener, an XRC_SEND QP sends
// through it into the domain's SRQ afterwards (while a hostile process forging numbers opens
// nothing), and the opener's last handle frees it.
TEST_F(VerbsXrcTest, AnotherProcessesQpOpensAndOutlivesItsMaker) {
  char path[] = "/tmp/vrdma-xrc-shared-XXXXXX";
  int f = ::mkstemp(path);
  ASSERT_GE(f, 0);
  files.push_back(f);
  Helper maker({path});
  const uint32_t num = maker.qpn();
  ::unlink(path);
  ASSERT_NE(num, 0u) << maker.last();

  ibv_xrcd* x = open_xrcd(f, 0);
  ASSERT_NE(x, nullptr);
  ibv_qp* o = open_qp(ctx, x, num);
  ASSERT_NE(o, nullptr) << strerror(errno);
  EXPECT_EQ(o->qp_num, num);
  ibv_qp_attr a{};
  ibv_qp_init_attr ia{};
  ASSERT_EQ(ibv_query_qp(o, &a, IBV_QP_STATE | IBV_QP_ACCESS_FLAGS, &ia), 0);
  EXPECT_EQ(a.qp_state, IBV_QPS_INIT);  // as the maker set it
  EXPECT_EQ(a.qp_access_flags, unsigned(IBV_ACCESS_REMOTE_WRITE));

  ibv_cq* scq = cq();
  ibv_cq* rcq = cq();
  ibv_srq* s = xrc_srq(x, rcq);
  ibv_qp* snd = send_qp(scq);
  ASSERT_TRUE(s && snd);
  connect_xrc(snd, o);  // driven through the opened handle
  send_through(snd, scq, s, rcq, 1500, 41);

  // The maker exits without destroying anything: the QP is the opener's now.
  ASSERT_TRUE(maker.tell("exit\n"));
  ASSERT_EQ(maker.wait(), 0);
  ASSERT_EQ(ibv_query_qp(o, &a, IBV_QP_STATE, &ia), 0);
  EXPECT_EQ(a.qp_state, IBV_QPS_RTR);  // as connect_xrc left it
  send_through(snd, scq, s, rcq, 4096, 42);
  {
    // A hostile process with domains of its own forges the number and its neighbours: all
    // refused, and the traffic goes on.
    char other[] = "/tmp/vrdma-xrc-forge-XXXXXX";
    int of = ::mkstemp(other);
    ASSERT_GE(of, 0);
    files.push_back(of);
    char hex[16];
    snprintf(hex, sizeof(hex), "%x", num);
    Helper forger({"--forge", other, hex});
    EXPECT_EQ(forger.line(), "refused 8");
    EXPECT_EQ(forger.wait(), 0);
    ::unlink(other);
  }
  send_through(snd, scq, s, rcq, 7, 43);
  // A second handle of the same process, then the QP goes with the last one.
  ibv_qp* o2 = open_qp(ctx, x, num);
  ASSERT_NE(o2, nullptr) << strerror(errno);
  drop(o);
  send_through(snd, scq, s, rcq, 100, 44);
  drop(o2);
  errno = 0;
  EXPECT_EQ(open_qp(ctx, x, num), nullptr);
  EXPECT_EQ(errno, EINVAL);
}

// The maker destroys its handle while another process holds the QP (it lives on; the maker's
// domain closes), and an XRC_SEND QP of a third process sends through it into an SRQ of the
// domain after the maker has exited; the data arrive byte for byte.
TEST_F(VerbsXrcTest, AThirdProcessSendsThroughItAfterItsMakerWent) {
  char path[] = "/tmp/vrdma-xrc-shared-XXXXXX";
  int f = ::mkstemp(path);
  ASSERT_GE(f, 0);
  files.push_back(f);
  Helper maker({path});
  const uint32_t num = maker.qpn();
  ::unlink(path);
  ASSERT_NE(num, 0u) << maker.last();
  ibv_xrcd* x = open_xrcd(f, 0);
  ASSERT_NE(x, nullptr);
  ibv_qp* o = open_qp(ctx, x, num);
  ASSERT_NE(o, nullptr) << strerror(errno);
  ASSERT_TRUE(maker.tell("destroy\n"));
  EXPECT_EQ(maker.line(), "destroyed") << "its handle goes and its domain closes: no EBUSY";
  ASSERT_EQ(maker.wait(), 0);

  ibv_cq* rcq = cq();
  ibv_srq* s = xrc_srq(x, rcq);
  ASSERT_NE(s, nullptr);
  constexpr int kCount = 3;
  std::vector<Buffer*> dst;
  for (int i = 0; i < kCount; ++i) {
    dst.push_back(&buffer(512));
    ASSERT_EQ(post_srq_recv(s, *dst.back(), 0, 512, 100 + i), 0);
  }
  char recv_hex[16], srq_hex[16];
  snprintf(recv_hex, sizeof(recv_hex), "%x", num);
  snprintf(srq_hex, sizeof(srq_hex), "%x", srq_num(s));
  Helper sender({"--send", recv_hex, srq_hex, std::to_string(kCount)});
  const uint32_t snd = sender.qpn();
  ASSERT_NE(snd, 0u) << sender.last() << ", exit " << sender.wait();
  // The XRC_RECV side names the sender, through the handle this process holds.
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = snd;
  a.max_dest_rd_atomic = 4;
  a.min_rnr_timer = 1;
  a.ah_attr.port_num = 1;
  ASSERT_EQ(ibv_modify_qp(o, &a,
                          IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                              IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER),
            0);
  ASSERT_TRUE(sender.tell("go\n"));
  EXPECT_EQ(sender.line(), "ok 3");
  auto wc = poll(rcq, kCount);
  ASSERT_EQ(wc.size(), size_t(kCount));
  for (int i = 0; i < kCount; ++i) {
    EXPECT_EQ(wc[i].status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc[i].wr_id, uint64_t(100 + i));
    EXPECT_EQ(wc[i].byte_len, 512u);
    EXPECT_EQ(wc[i].qp_num, num);  // the XRC_RECV QP it came through
    const uint8_t* d = static_cast<const uint8_t*>(dst[i]->data());
    int wrong = 0;
    for (int j = 0; j < 512; ++j) wrong += d[j] != uint8_t(i * 7 + j);
    EXPECT_EQ(wrong, 0) << "message " << i;
  }
  sender.tell("die\n");
  EXPECT_EQ(sender.wait(), 0);
  // The sender's process died: its connection is lost, and the handle still here hears it.
  pollfd pfd{ctx->async_fd, POLLIN, 0};
  ASSERT_EQ(::poll(&pfd, 1, 20000), 1) << "no async event";
  ibv_async_event ev{};
  ASSERT_EQ(ibv_get_async_event(ctx, &ev), 0);
  EXPECT_EQ(ev.event_type, IBV_EVENT_QP_FATAL);
  EXPECT_EQ(ev.element.qp, o);
  ibv_ack_async_event(&ev);
  ibv_qp_init_attr ia{};
  ASSERT_EQ(ibv_query_qp(o, &a, IBV_QP_STATE, &ia), 0);
  EXPECT_EQ(a.qp_state, IBV_QPS_ERR);
  drop(o);
  errno = 0;
  EXPECT_EQ(open_qp(ctx, x, num), nullptr);
  EXPECT_EQ(errno, EINVAL);
}

// A number that is not an XRC_RECV QP of the domain (forged, or of another domain) opens
// nothing while another process's QP is open and carries traffic.
TEST_F(VerbsXrcTest, ForgedNumbersDoNotOpenAnotherProcessesQp) {
  int f = file();
  ibv_context* other = second_context();
  ASSERT_NE(other, nullptr);
  ibv_xrcd* mine = open_xrcd(f, O_CREAT);
  ibv_xrcd* elsewhere = open_xrcd(file(), O_CREAT, other);
  ASSERT_TRUE(mine && elsewhere);
  ibv_qp* r = recv_qp(mine);
  ASSERT_NE(r, nullptr);
  for (uint32_t forged : {r->qp_num ^ 1u, r->qp_num + 0x1000u, 0xFFFFFFu}) {
    errno = 0;
    EXPECT_EQ(open_qp(other, elsewhere, forged), nullptr);
    EXPECT_EQ(errno, EINVAL);
  }
  errno = 0;
  EXPECT_EQ(open_qp(other, elsewhere, r->qp_num), nullptr);  // the right number, wrong domain
  EXPECT_EQ(errno, EINVAL);
}

}  // namespace
}  // namespace vrdma::testing
