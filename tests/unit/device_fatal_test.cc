// vrdmad goes away under a running program: the program gets
// IBV_EVENT_DEVICE_FATAL, its QPs flush, nothing hangs; a new vrdmad on the
// same socket serves the program's next device list. Its own binary, because
// the library's connection to vrdmad is process-wide.
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <stdlib.h>

#include <chrono>
#include <thread>
#include <vector>

#include "daemon_test_util.h"

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

TEST(DeviceFatal, DaemonLossIsFatalAndARestartedDaemonServesNewContexts) {
  DaemonFixture first;
  setenv("VRDMA_SOCKET", first.socket().c_str(), 1);
  ibv_context* ctx = open_first();
  ASSERT_NE(ctx, nullptr);
  ibv_pd* pd = ibv_alloc_pd(ctx);
  ibv_cq* cq = ibv_create_cq(ctx, 16, nullptr, nullptr, 0);
  ibv_qp_init_attr ia{};
  ia.send_cq = cq;
  ia.recv_cq = cq;
  ia.qp_type = IBV_QPT_RC;
  ia.cap = {4, 4, 1, 1, 0};
  ibv_qp* qp = ibv_create_qp(pd, &ia);
  ASSERT_NE(qp, nullptr);
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  ASSERT_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                      IBV_QP_ACCESS_FLAGS), 0);
  std::vector<char> buf(4096);
  ibv_mr* mr = ibv_reg_mr(pd, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  ibv_sge sge{reinterpret_cast<uint64_t>(buf.data()), 64, mr->lkey};
  ibv_recv_wr rwr{};
  rwr.wr_id = 5;
  rwr.sg_list = &sge;
  rwr.num_sge = 1;
  ibv_recv_wr* bad;
  ASSERT_EQ(ibv_post_recv(qp, &rwr, &bad), 0);

  first.stop();  // vrdmad is gone

  pollfd pfd{ctx->async_fd, POLLIN, 0};
  bool device_fatal = false;
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!device_fatal && std::chrono::steady_clock::now() < end) {
    if (::poll(&pfd, 1, 100) != 1) continue;
    ibv_async_event ev;
    ASSERT_EQ(ibv_get_async_event(ctx, &ev), 0);
    device_fatal = ev.event_type == IBV_EVENT_DEVICE_FATAL;
    ibv_ack_async_event(&ev);
  }
  EXPECT_TRUE(device_fatal);
  // The QP is in error: its posted receive was flushed.
  ibv_wc wc;
  int n = 0;
  for (int i = 0; i < 100 && n == 0; ++i) {
    n = ibv_poll_cq(cq, 1, &wc);
    if (!n) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(n, 1);
  EXPECT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(wc.wr_id, 5u);
  // Nothing that needs the daemon hangs; it fails.
  ibv_cq* cq2 = ibv_create_cq(ctx, 16, nullptr, nullptr, 0);
  EXPECT_NE(cq2, nullptr);  // local only
  ibv_qp* qp2 = ibv_create_qp(pd, &ia);
  EXPECT_EQ(qp2, nullptr);  // needs a QPN from vrdmad

  // A new vrdmad on the same socket: a new context works.
  DaemonFixture second([&](vrdma::daemon::DaemonConfig& c) { c.socket_path = first.socket(); });
  ibv_context* ctx2 = open_first();
  ASSERT_NE(ctx2, nullptr);
  ibv_pd* pd2 = ibv_alloc_pd(ctx2);
  ibv_cq* cq3 = ibv_create_cq(ctx2, 16, nullptr, nullptr, 0);
  ia.send_cq = cq3;
  ia.recv_cq = cq3;
  ibv_qp* qp3 = ibv_create_qp(pd2, &ia);
  EXPECT_NE(qp3, nullptr);

  ibv_destroy_qp(qp3);
  ibv_destroy_cq(cq3);
  ibv_dealloc_pd(pd2);
  ibv_close_device(ctx2);
  ibv_destroy_qp(qp);
  ibv_dereg_mr(mr);
  ibv_destroy_cq(cq2);
  ibv_destroy_cq(cq);
  ibv_dealloc_pd(pd);
  ibv_close_device(ctx);
}

}  // namespace
