// A vrdmad in a thread on a private socket, one opened device, and helpers to
// build connected queue pairs, for the verbs-level tests.
#pragma once

#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <stdlib.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "daemon_test_util.h"

namespace vrdma::testing {

// The daemon lives for the whole test program: the library connects to it once.
inline daemon::testing::DaemonFixture& shared_daemon() {
  static auto* d = [] {
    auto* fx = new daemon::testing::DaemonFixture();
    setenv("VRDMA_SOCKET", fx->socket().c_str(), 1);
    return fx;
  }();
  return *d;
}

struct Buffer {
  std::vector<uint8_t> mem;
  ibv_mr* mr = nullptr;
  uint8_t* data() { return mem.data(); }
  uint64_t addr() { return reinterpret_cast<uint64_t>(mem.data()); }
};

class VerbsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    shared_daemon();
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    ASSERT_NE(list, nullptr);
    ASSERT_EQ(n, 1);
    ctx = ibv_open_device(list[0]);
    ibv_free_device_list(list);
    ASSERT_NE(ctx, nullptr);
    pd = ibv_alloc_pd(ctx);
    ASSERT_NE(pd, nullptr);
  }
  void TearDown() override {
    for (ibv_qp* q : qps) ibv_destroy_qp(q);
    for (ibv_cq* c : cqs) ibv_destroy_cq(c);
    for (auto& b : bufs) ibv_dereg_mr(b->mr);
    ibv_dealloc_pd(pd);
    ibv_close_device(ctx);
  }

  Buffer& buffer(size_t size, int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                           IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC) {
    auto b = std::make_unique<Buffer>();
    b->mem.resize(size);
    b->mr = ibv_reg_mr(pd, b->mem.data(), size, access);
    EXPECT_NE(b->mr, nullptr) << strerror(errno);
    bufs.push_back(std::move(b));
    return *bufs.back();
  }

  ibv_cq* cq(int depth = 256, ibv_comp_channel* ch = nullptr) {
    ibv_cq* c = ibv_create_cq(ctx, depth, nullptr, ch, 0);
    EXPECT_NE(c, nullptr);
    cqs.push_back(c);
    return c;
  }

  ibv_qp* qp(ibv_cq* scq, ibv_cq* rcq, ibv_qp_type type = IBV_QPT_RC, ibv_srq* srq = nullptr,
             uint32_t max_inline = 0) {
    ibv_qp_init_attr a{};
    a.send_cq = scq;
    a.recv_cq = rcq;
    a.srq = srq;
    a.qp_type = type;
    a.cap.max_send_wr = 64;
    a.cap.max_recv_wr = 64;
    a.cap.max_send_sge = 4;
    a.cap.max_recv_sge = 4;
    a.cap.max_inline_data = max_inline;
    ibv_qp* q = ibv_create_qp(pd, &a);
    EXPECT_NE(q, nullptr) << strerror(errno);
    qps.push_back(q);
    return q;
  }

  static int to_init(ibv_qp* q, int access = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                                             IBV_ACCESS_REMOTE_ATOMIC) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qp_access_flags = access;
    a.qkey = 0x11111111;
    int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
    mask |= q->qp_type == IBV_QPT_UD ? IBV_QP_QKEY : IBV_QP_ACCESS_FLAGS;
    return ibv_modify_qp(q, &a, mask);
  }
  static int to_rtr(ibv_qp* q, uint32_t dest, uint8_t min_rnr_timer = 1) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_RTR;
    if (q->qp_type == IBV_QPT_UD) return ibv_modify_qp(q, &a, IBV_QP_STATE);
    a.path_mtu = IBV_MTU_4096;
    a.dest_qp_num = dest;
    a.max_dest_rd_atomic = 4;
    a.min_rnr_timer = min_rnr_timer;
    a.ah_attr.port_num = 1;
    int mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
    if (q->qp_type == IBV_QPT_RC) mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
    return ibv_modify_qp(q, &a, mask);
  }
  static int to_rts(ibv_qp* q, uint8_t rnr_retry = 7, uint8_t timeout = 10, uint8_t retry = 3) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_RTS;
    a.timeout = timeout;
    a.retry_cnt = retry;
    a.rnr_retry = rnr_retry;
    a.max_rd_atomic = 4;
    int mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
    if (q->qp_type == IBV_QPT_RC)
      mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
    return ibv_modify_qp(q, &a, mask);
  }
  // Moves a QP to the error state (its posted receives are flushed).
  static int to_err(ibv_qp* q) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_ERR;
    return ibv_modify_qp(q, &a, IBV_QP_STATE);
  }
  // Brings two QPs to RTS, connected to each other.
  void connect(ibv_qp* a, ibv_qp* b, uint8_t rnr_retry = 7, uint8_t min_rnr_timer = 1) {
    ASSERT_EQ(to_init(a), 0);
    ASSERT_EQ(to_init(b), 0);
    ASSERT_EQ(to_rtr(a, b->qp_num, min_rnr_timer), 0);
    ASSERT_EQ(to_rtr(b, a->qp_num, min_rnr_timer), 0);
    ASSERT_EQ(to_rts(a, rnr_retry), 0);
    ASSERT_EQ(to_rts(b, rnr_retry), 0);
  }

  // Posts one receive of `len` bytes at the start of `b`; returns ibv_post_recv's result.
  static int post_recv(ibv_qp* q, Buffer& b, uint32_t len, uint64_t wr_id = 0) {
    ibv_sge sge{b.addr(), len, b.mr->lkey};
    ibv_recv_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad;
    return ibv_post_recv(q, &wr, &bad);
  }

  // A one-SGE work request; `sge` must outlive the post.
  static ibv_send_wr send_wr(ibv_wr_opcode op, ibv_sge& sge, int flags = IBV_SEND_SIGNALED) {
    ibv_send_wr wr{};
    wr.opcode = op;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.send_flags = flags;
    return wr;
  }

  // Posts one work request and returns the status of its one completion.
  static ibv_wc_status complete_one(ibv_qp* q, ibv_send_wr& wr, ibv_cq* c) {
    ibv_send_wr* bad;
    EXPECT_EQ(ibv_post_send(q, &wr, &bad), 0);
    auto w = poll(c, 1);
    EXPECT_EQ(w.size(), 1u);
    return w.empty() ? IBV_WC_GENERAL_ERR : w[0].status;
  }

  // Polls until n completions arrived or the time is up.
  static std::vector<ibv_wc> poll(ibv_cq* c, int n, int timeout_ms = 5000) {
    std::vector<ibv_wc> out;
    auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (static_cast<int>(out.size()) < n && std::chrono::steady_clock::now() < end) {
      ibv_wc wc[16];
      int got = ibv_poll_cq(c, 16, wc);
      EXPECT_GE(got, 0);
      for (int i = 0; i < got; ++i) out.push_back(wc[i]);
      if (got == 0) std::this_thread::yield();
    }
    return out;
  }

  static void fill_random(uint8_t* p, size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    for (size_t i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(rng());
  }

  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  std::vector<ibv_qp*> qps;
  std::vector<ibv_cq*> cqs;
  std::vector<std::unique_ptr<Buffer>> bufs;
};

// Two RC QPs, a and b, each with a CQ of its own (ca, cb), connected to each other.
class PairTest : public VerbsTest {
 protected:
  // A fresh connected pair (an access error puts a requester's QP in the error state).
  void connect_pair() {
    ca = cq();
    cb = cq();
    a = qp(ca, ca);
    b = qp(cb, cb);
    ASSERT_TRUE(a && b);
    connect(a, b);
  }
  // One signaled RDMA (or atomic) request on `q` from/to [laddr, +len) under `lkey`, to `raddr`
  // under `rkey`; the status of its completion on `c`.
  static ibv_wc_status rdma_on(ibv_qp* q, ibv_cq* c, ibv_wr_opcode op, uint64_t laddr,
                               uint32_t lkey, uint32_t len, uint64_t raddr, uint32_t rkey) {
    ibv_sge sge{laddr, len, lkey};
    ibv_send_wr wr = send_wr(op, sge);
    wr.wr.rdma.remote_addr = raddr;
    wr.wr.rdma.rkey = rkey;
    return complete_one(q, wr, c);
  }

  ibv_cq *ca = nullptr, *cb = nullptr;
  ibv_qp *a = nullptr, *b = nullptr;
};

}  // namespace vrdma::testing
