// vrdmad goes away under a running program (a restart, an upgrade, a crash): a connection
// between QPs of this host goes on with every byte in place, no device-fatal event comes, what
// needs vrdmad fails with ENODEV and nothing hangs; a new vrdmad on the same socket serves the
// program's next device list while the old connection still runs. Its own binary, because the
// library's connection to vrdmad is process-wide.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <stdlib.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "daemon_test_util.h"
#include "verbs_fixture.h"

namespace {

using vrdma::daemon::testing::DaemonFixture;

ibv_context* open_first() {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (!list) return nullptr;
  ibv_context* ctx = n == 1 ? ibv_open_device(list[0]) : nullptr;
  ibv_free_device_list(list);
  return ctx;
}

// The verbs tests' helpers that bring a QP through its states and poll its completions.
struct Verbs : vrdma::testing::VerbsTest {
  using VerbsTest::poll;
  using VerbsTest::to_init;
  using VerbsTest::to_rtr;
  using VerbsTest::to_rts;
};

TEST(DaemonLoss, ConnectionsOnThisHostGoOnAndARestartedDaemonServesNewContexts) {
  DaemonFixture first;
  setenv("VRDMA_SOCKET", first.socket().c_str(), 1);
  setenv("VRDMA_QUIET", "1", 1);
  ibv_context* ctx = open_first();
  ASSERT_NE(ctx, nullptr);
  ibv_pd* pd = ibv_alloc_pd(ctx);
  ibv_cq* cq = ibv_create_cq(ctx, 16, nullptr, nullptr, 0);
  ibv_qp_init_attr ia{};
  ia.send_cq = cq;
  ia.recv_cq = cq;
  ia.qp_type = IBV_QPT_RC;
  ia.cap = {4, 4, 1, 1, 0};
  ibv_qp* a = ibv_create_qp(pd, &ia);
  ibv_qp* b = ibv_create_qp(pd, &ia);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  ASSERT_EQ(Verbs::to_init(a), 0);
  ASSERT_EQ(Verbs::to_init(b), 0);
  ASSERT_EQ(Verbs::to_rtr(a, b->qp_num), 0);
  ASSERT_EQ(Verbs::to_rtr(b, a->qp_num), 0);
  ASSERT_EQ(Verbs::to_rts(a), 0);
  ASSERT_EQ(Verbs::to_rts(b), 0);
  std::vector<uint8_t> buf(8192);
  ibv_mr* mr =
      ibv_reg_mr(pd, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  ASSERT_NE(mr, nullptr);
  // A first SEND and WRITE while vrdmad is there.
  auto exchange = [&](uint8_t tag) {
    ibv_sge rsge{reinterpret_cast<uint64_t>(buf.data()), 64, mr->lkey};
    ibv_recv_wr rwr{};
    rwr.wr_id = 5;
    rwr.sg_list = &rsge;
    rwr.num_sge = 1;
    ibv_recv_wr* rbad;
    ASSERT_EQ(ibv_post_recv(a, &rwr, &rbad), 0);
    memset(buf.data() + 4096, tag, 64);
    ibv_sge ssge{reinterpret_cast<uint64_t>(buf.data() + 4096), 64, mr->lkey};
    ibv_send_wr swr{};
    swr.wr_id = 6;
    swr.sg_list = &ssge;
    swr.num_sge = 1;
    swr.opcode = IBV_WR_SEND;
    swr.send_flags = IBV_SEND_SIGNALED;
    ibv_send_wr* sbad;
    ASSERT_EQ(ibv_post_send(b, &swr, &sbad), 0);
    const std::vector<ibv_wc> both = Verbs::poll(cq, 2);
    ASSERT_EQ(both.size(), 2u);
    for (const ibv_wc& w : both) EXPECT_EQ(w.status, IBV_WC_SUCCESS);
    for (int i = 0; i < 64; ++i) ASSERT_EQ(buf[i], tag) << i;
    // And a WRITE from b into the second half of the buffer, through a's rkey.
    memset(buf.data() + 4096, tag + 1, 64);
    swr.opcode = IBV_WR_RDMA_WRITE;
    swr.wr.rdma.remote_addr = reinterpret_cast<uint64_t>(buf.data() + 6000);
    swr.wr.rdma.rkey = mr->rkey;
    ASSERT_EQ(ibv_post_send(b, &swr, &sbad), 0);
    const std::vector<ibv_wc> written = Verbs::poll(cq, 1);
    ASSERT_EQ(written.size(), 1u);
    EXPECT_EQ(written[0].status, IBV_WC_SUCCESS);
    for (int i = 0; i < 64; ++i) ASSERT_EQ(buf[6000 + i], tag + 1) << i;
  };
  exchange(0x11);

  first.stop();  // vrdmad is gone
  std::this_thread::sleep_for(std::chrono::milliseconds(200));

  // No device-fatal event: the connection between a and b goes on, every byte in place.
  pollfd pfd{ctx->async_fd, POLLIN, 0};
  int flags = fcntl(ctx->async_fd, F_GETFL);
  fcntl(ctx->async_fd, F_SETFL, flags | O_NONBLOCK);
  EXPECT_EQ(::poll(&pfd, 1, 100), 0) << "an async event came";
  exchange(0x22);
  exchange(0x33);
  // What needs vrdmad fails, and says why; nothing hangs.
  ibv_cq* cq2 = ibv_create_cq(ctx, 16, nullptr, nullptr, 0);
  EXPECT_NE(cq2, nullptr);  // local only
  errno = 0;
  ibv_qp* c = ibv_create_qp(pd, &ia);
  EXPECT_EQ(c, nullptr);  // needs a QPN from vrdmad
  EXPECT_EQ(errno, ENODEV);

  // A new vrdmad on the same socket: a new context works.
  DaemonFixture second([&](vrdma::daemon::DaemonConfig& cfg) { cfg.socket_path = first.socket(); });
  ibv_context* ctx2 = open_first();
  ASSERT_NE(ctx2, nullptr);
  ibv_pd* pd2 = ibv_alloc_pd(ctx2);
  ibv_cq* cq3 = ibv_create_cq(ctx2, 16, nullptr, nullptr, 0);
  ia.send_cq = cq3;
  ia.recv_cq = cq3;
  ibv_qp* qp3 = ibv_create_qp(pd2, &ia);
  EXPECT_NE(qp3, nullptr);
  // The old connection still goes on beside it.
  exchange(0x44);

  // The old objects are let go without vrdmad's help.
  EXPECT_EQ(ibv_destroy_qp(qp3), 0);
  EXPECT_EQ(ibv_destroy_cq(cq3), 0);
  EXPECT_EQ(ibv_dealloc_pd(pd2), 0);
  EXPECT_EQ(ibv_close_device(ctx2), 0);
  EXPECT_EQ(ibv_destroy_qp(a), 0);
  EXPECT_EQ(ibv_destroy_qp(b), 0);
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
  EXPECT_EQ(ibv_destroy_cq(cq2), 0);
  EXPECT_EQ(ibv_destroy_cq(cq), 0);
  EXPECT_EQ(ibv_dealloc_pd(pd), 0);
  EXPECT_EQ(ibv_close_device(ctx), 0);
}

}  // namespace
