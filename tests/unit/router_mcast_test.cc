// UD multicast between two routers over the fake transport: a group's datagrams reach the
// members of the sender's tenant on the other host, and a QP released right after posting still
// has its datagrams sent (as mckey does: unsignaled sends, then leave and destroy at once).
#include <arpa/inet.h>
#include <string.h>

#include "router_fake.h"

namespace vrdma::daemon::testing {
namespace {

constexpr uint32_t kMcastQpn = 0xffffff;

class RoutedMcast : public RouterPair {
 protected:
  void SetUp() override {
    start();
    group = ip("224.1.2.3");
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
    h2->join(*u2, group);
    h2->join(*u3, group);
    // The library hands the sender's QP to the router with its first datagram to a group.
    ASSERT_EQ(h1->router().attach_multicast(u1->qpn, u1->info()), 0);
  }
  // Datagram i: `len` bytes of m1 at i * kStride, unsignaled (as mckey sends).
  void send(uint64_t i, uint32_t len) {
    ibv_sge sge = m1->sge(i * kStride, len);
    ibv_send_wr wr = make_wr(i, IBV_WR_SEND, &sge, 1, 0);
    wr.wr.ud.remote_qpn = kMcastQpn;
    wr.wr.ud.remote_qkey = u2->opt.qkey;
    u1->post_send(wr, group);
  }
  std::vector<RecvCompletion> receive(FakeQp& q, size_t n) {
    std::vector<RecvCompletion> rcs;
    run_until([&] {
      for (auto& r : q.poll_recv()) rcs.push_back(r);
      return rcs.size() >= n;
    });
    return rcs;
  }

  static constexpr uint64_t kStride = 2048;
  uint32_t group = 0;
  FakeClient *c1, *c2, *c3;
  FakeMr *m1, *m2, *m3;
  FakeQp *u1, *u2, *u3;
};

TEST_F(RoutedMcast, TheSendersTenantsMembersOnTheOtherHostGetEveryDatagram) {
  constexpr int kCount = 20;
  auto data = random_bytes(kCount * kStride, 7);
  memcpy(m1->ptr, data.data(), data.size());
  for (int i = 0; i < kCount; ++i) {
    u2->post_recv(i, {m2->sge(i * 1024, 1024)});
    u3->post_recv(i, {m3->sge(i * 1024, 1024)});
  }
  for (int i = 0; i < kCount; ++i) send(i, 100 + i);
  ASSERT_TRUE(run_until([&] { return u1->outstanding() == 0; }));
  EXPECT_TRUE(u1->poll_send().empty()) << "an unsignaled send completed in error";
  auto rcs = receive(*u2, kCount);
  ASSERT_EQ(rcs.size(), size_t(kCount));
  for (int i = 0; i < kCount; ++i) {
    EXPECT_EQ(rcs[i].wr_id, uint64_t(i));
    EXPECT_EQ(rcs[i].byte_len, 40u + 100 + i);
    EXPECT_EQ(rcs[i].src_qp, u1->qpn);
    EXPECT_EQ(memcmp(m2->ptr + i * 1024 + 40, data.data() + i * kStride, 100 + i), 0) << i;
  }
  run(2000);
  EXPECT_TRUE(u3->poll_recv().empty()) << "a member of another tenant received";
}

TEST_F(RoutedMcast, DatagramsPostedRightBeforeTheQpIsReleasedStillGoOut) {
  constexpr int kCount = 5;
  auto data = random_bytes(kCount * kStride, 8);
  memcpy(m1->ptr, data.data(), data.size());
  for (int i = 0; i < kCount; ++i) u2->post_recv(i, {m2->sge(i * 1024, 1024)});
  // Posted, and the QP released before the router's next pass: vrdmad's release reaches the
  // router before the router took a single request from the queue.
  for (int i = 0; i < kCount; ++i) send(i, 200);
  h1->router().qp_freed(u1->qpn);
  // Once vrdmad answered the release, the application may reuse or free its memory.
  memset(m1->ptr, 0, kCount * kStride);
  auto rcs = receive(*u2, kCount);
  ASSERT_EQ(rcs.size(), size_t(kCount)) << "datagrams posted before the release were lost";
  EXPECT_TRUE(u1->poll_send().empty()) << "an unsignaled send completed in error";
  for (int i = 0; i < kCount; ++i) {
    EXPECT_EQ(rcs[i].byte_len, 240u);
    EXPECT_EQ(memcmp(m2->ptr + i * 1024 + 40, data.data() + i * kStride, 200), 0) << i;
  }
}

}  // namespace
}  // namespace vrdma::daemon::testing
