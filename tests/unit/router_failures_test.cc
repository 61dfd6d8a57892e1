// What the routers do when things go away: a link that falls silent, a link cut, a router
// gone, a client gone on either side; and UD datagrams, which need no connection but reach
// only a QP of the sender's tenant with the right Q_Key.
#include <arpa/inet.h>

#include <cstring>

#include "router_fake.h"

namespace vrdma::daemon::testing {
namespace {

TEST_F(RoutedRc, ASilentLinkFailsOutstandingWorkWithRetryExceeded) {
  FakeQp::Options oa;
  oa.timeout = 10;  // 4.2 ms, x (retry_cnt + 1): the router waits at least 150 ms anyway
  oa.retry_cnt = 2;
  auto [x, y] = new_pair(oa);
  post_rdma(*x, 1, IBV_WR_RDMA_WRITE, m1->sge(0, 8), m2->addr(), m2->key);
  post_rdma(*x, 2, IBV_WR_RDMA_WRITE, m1->sge(0, 8), m2->addr(), m2->key);
  // Host 2's router stops: nothing comes back, not even pongs.
  run_only_h1(100'000'000);
  EXPECT_TRUE(x->poll_send().empty()) << "failed before the silence lasted its bound";
  run_only_h1(200'000'000);
  auto wcs = x->poll_send();
  ASSERT_EQ(wcs.size(), 2u);
  EXPECT_EQ(wcs[0].status, IBV_WC_RETRY_EXC_ERR);
  EXPECT_EQ(wcs[1].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(x->state(), IBV_QPS_ERR);
  EXPECT_TRUE(has_fatal(*h1, x->qpn, proto::FatalReason::kRouted));
  // The idle QP on the same link lost its peer.
  EXPECT_EQ(a->state(), IBV_QPS_ERR);
  EXPECT_TRUE(has_fatal(*h1, a->qpn, proto::FatalReason::kPeerGone));
}

TEST_F(RoutedRc, AResponderThatAnswersPingsKeepsAWaitingQpAlive) {
  FakeQp::Options oa;
  oa.timeout = 10;
  oa.retry_cnt = 1;
  auto [x, y] = new_pair(oa);
  // No receive: RNR forever (rnr_retry 7); the link is alive, so the QP keeps waiting, far
  // past its transport timeout.
  ibv_sge sge = m1->sge(0, 8);
  x->post_send(make_wr(1, IBV_WR_SEND, &sge, 1));
  run(1000, 1'000'000);  // 1 s
  EXPECT_TRUE(x->poll_send().empty());
  EXPECT_NE(x->state(), IBV_QPS_ERR);
  EXPECT_TRUE(h1->fatals.empty());
  y->post_recv(1, {m2->sge(0, 8)});
  auto wcs = send_completions(*x, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
}

TEST_F(RoutedRc, ACutLinkFailsBothSides) {
  post_rdma(*a, 1, IBV_WR_RDMA_WRITE, m1->sge(0, 8), m2->addr(), m2->key);
  cut_links();
  auto wcs = send_completions(*a, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_RETRY_EXC_ERR);
  EXPECT_TRUE(has_fatal(*h1, a->qpn, proto::FatalReason::kRouted));
  // Host 2: its QP that agreed to a lost its peer.
  EXPECT_TRUE(has_fatal(*h2, b->qpn, proto::FatalReason::kPeerGone));
  EXPECT_EQ(b->state(), IBV_QPS_ERR) << "b sent on the cut link too (it is connected to a)";
  // Later work fails at once.
  post_rdma(*a, 2, IBV_WR_RDMA_WRITE, m1->sge(0, 8), m2->addr(), m2->key);
  wcs = send_completions(*a, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_WR_FLUSH_ERR);
}

TEST_F(RoutedRc, ARouterGoneFailsItsPeersQps) {
  post_rdma(*a, 1, IBV_WR_RDMA_WRITE, m1->sge(0, 8), m2->addr(), m2->key);
  kill_h2();
  auto wcs = send_completions(*a, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_RETRY_EXC_ERR);
  EXPECT_EQ(a->state(), IBV_QPS_ERR);
  EXPECT_TRUE(has_fatal(*h1, a->qpn, proto::FatalReason::kRouted));
  EXPECT_TRUE(h1->router().links().empty());
}

TEST_F(RoutedRc, TheDestinationsClientGoneFailsTheRequester) {
  // A request held (no receive) when the client dies.
  ibv_sge sge = m1->sge(0, 8);
  a->post_send(make_wr(1, IBV_WR_SEND, &sge, 1));
  post_rdma(*a, 2, IBV_WR_RDMA_WRITE, m1->sge(0, 8), m2->addr(), m2->key);
  run(1000);
  EXPECT_TRUE(a->poll_send().empty());
  h2->client_gone(*c2);
  auto wcs = send_completions(*a, 2);
  ASSERT_EQ(wcs.size(), 2u);
  EXPECT_EQ(wcs[0].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(wcs[1].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(a->state(), IBV_QPS_ERR);
  EXPECT_TRUE(has_fatal(*h1, a->qpn, proto::FatalReason::kPeerGone));
  EXPECT_TRUE(h2->router().held_by_owner().empty());
  EXPECT_EQ(h2->router().routed_qps(), 0u);
}

TEST_F(RoutedRc, TheRequestersClientGoneFailsTheDestination) {
  h1->client_gone(*c1);
  ASSERT_TRUE(run_until([&] { return has_fatal(*h2, b->qpn, proto::FatalReason::kPeerGone); }));
  EXPECT_EQ(h1->router().routed_qps(), 0u);
}

TEST_F(RoutedRc, ARequestAfterReconnectStartsANewSequence) {
  // Work before and after the QPs are reset and connected again arrives, and in order.
  post_rdma(*a, 1, IBV_WR_RDMA_WRITE, m1->sge(0, 8), m2->addr(), m2->key);
  ASSERT_EQ(send_completions(*a, 1).size(), 1u);
  a->set_state(IBV_QPS_RESET);
  b->set_state(IBV_QPS_RESET);
  run(10);
  connect(*a, *b);
  auto data = random_bytes(8, 30);
  memcpy(m1->ptr + 8, data.data(), 8);
  post_rdma(*a, 2, IBV_WR_RDMA_WRITE, m1->sge(8, 8), m2->addr() + 8, m2->key);
  auto wcs = send_completions(*a, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(memcmp(m2->ptr + 8, data.data(), 8), 0);
}

// ---- UD --------------------------------------------------------------------------------

class RoutedUd : public RouterPair {
 protected:
  void SetUp() override {
    start();
    c1 = &h1->client("10.1.0.7", "t");
    c2 = &h2->client("10.2.0.7", "t");
    c3 = &h2->client("10.2.0.8", "other");
    m1 = &c1->reg_mr(1 << 16, kAllAccess);
    m2 = &c2->reg_mr(1 << 16, kAllAccess);
    m3 = &c3->reg_mr(1 << 16, kAllAccess);
    u1 = &h1->qp(*c1, IBV_QPT_UD);
    u2 = &h2->qp(*c2, IBV_QPT_UD);
    u3 = &h2->qp(*c3, IBV_QPT_UD);
    for (FakeQp* q : {u1, u2, u3}) q->set_state(IBV_QPS_RTS);
    // The library connects a UD QP to the router for the first remote destination it sends
    // to.
    ASSERT_EQ(connect_one(*u1, *u2), 0);
  }
  void datagram(uint64_t wr_id, FakeQp& to, uint32_t qkey, uint32_t len, uint32_t imm = 0) {
    ibv_sge sge = m1->sge(0, len);
    ibv_send_wr wr = make_wr(wr_id, imm ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND, &sge, 1);
    wr.imm_data = imm;
    wr.wr.ud.remote_qpn = to.qpn;
    wr.wr.ud.remote_qkey = qkey;
    u1->post_send(wr, to.client->ipv4);
  }
  FakeClient *c1, *c2, *c3;
  FakeMr *m1, *m2, *m3;
  FakeQp *u1, *u2, *u3;
};

TEST_F(RoutedUd, ADatagramArrivesWithItsGrh) {
  auto data = random_bytes(1000, 40);
  memcpy(m1->ptr, data.data(), data.size());
  u2->post_recv(8, {m2->sge(0, 40), m2->sge(100, 2000)});
  datagram(1, *u2, u2->opt.qkey, 1000, htonl(99));
  ASSERT_TRUE(run_until([&] { return u1->outstanding() == 0; }));
  auto wcs = u1->poll_send();
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
  std::vector<RecvCompletion> rcs;
  ASSERT_TRUE(run_until([&] {
    for (auto& r : u2->poll_recv()) rcs.push_back(r);
    return !rcs.empty();
  }));
  EXPECT_EQ(rcs[0].wr_id, 8u);
  EXPECT_EQ(rcs[0].byte_len, 1040u);
  EXPECT_NE(rcs[0].flags & shm::kRecvGrh, 0);
  EXPECT_EQ(rcs[0].imm_data, htonl(99));
  EXPECT_EQ(rcs[0].src_qp, u1->qpn);
  uint32_t src = 0, dst = 0;
  memcpy(&src, m2->ptr + 20 + 12, 4);
  memcpy(&dst, m2->ptr + 20 + 16, 4);
  EXPECT_EQ(src, c1->ipv4);
  EXPECT_EQ(dst, c2->ipv4);
  EXPECT_EQ(memcmp(m2->ptr + 100, data.data(), 1000), 0);
}

TEST_F(RoutedUd, AWrongQkeyOrAnotherTenantsQpGetsNothing) {
  u2->post_recv(1, {m2->sge(0, 2048)});
  u3->post_recv(1, {m3->sge(0, 2048)});
  memset(m1->ptr, 0x42, 100);
  datagram(1, *u2, u2->opt.qkey ^ 1, 100);  // wrong Q_Key
  datagram(2, *u3, u3->opt.qkey, 100);      // a QP of tenant "other"
  ASSERT_TRUE(run_until([&] { return u1->outstanding() == 0; }));
  // A datagram's sender never hears whether it arrived.
  auto wcs = u1->poll_send();
  ASSERT_EQ(wcs.size(), 2u);
  for (auto& wc : wcs) EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  run(2000);
  EXPECT_TRUE(u2->poll_recv().empty());
  EXPECT_TRUE(u3->poll_recv().empty());
  EXPECT_NE(m3->ptr[40], 0x42);
  // The receive is still there for the right datagram.
  datagram(3, *u2, u2->opt.qkey, 100);
  std::vector<RecvCompletion> rcs;
  ASSERT_TRUE(run_until([&] {
    for (auto& r : u2->poll_recv()) rcs.push_back(r);
    return !rcs.empty();
  }));
  EXPECT_EQ(rcs[0].byte_len, 140u);
  EXPECT_EQ(m2->ptr[40], 0x42);
}

TEST_F(RoutedUd, ADatagramWithoutAReceiveIsDropped) {
  datagram(1, *u2, u2->opt.qkey, 64);
  ASSERT_TRUE(run_until([&] { return u1->outstanding() == 0; }));
  run(2000);
  // No hold for UD: a receive posted later gets nothing.
  u2->post_recv(1, {m2->sge(0, 2048)});
  run(2000);
  EXPECT_TRUE(u2->poll_recv().empty());
  EXPECT_TRUE(h2->router().held_by_owner().empty());
}

}  // namespace
}  // namespace vrdma::daemon::testing
