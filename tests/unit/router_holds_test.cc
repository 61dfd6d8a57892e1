// The responder's holds and refusals over the fake transport: RNR (no receive yet) and a
// destination not ready yet are held and delivered later, or fail as the requester's
// attributes say; held payloads stay within their bounds; remote access errors fail the
// request with REM_ACCESS_ERR and leave the target memory untouched; a QP moved to the error
// state flushes what it posted; an SRQ serves several QPs.
#include <cstring>
#include <set>

#include "router_fake.h"

namespace vrdma::daemon::testing {
namespace {

uint64_t held_requests(Router& r) {
  uint64_t n = 0;
  for (auto& [owner, v] : r.held_by_owner()) n += v.first;
  return n;
}

TEST_F(RoutedRc, ASendWithoutAReceiveIsHeldUntilOneIsPosted) {
  auto data = random_bytes(5000, 11);
  memcpy(m1->ptr, data.data(), data.size());
  ibv_sge sge = m1->sge(0, 5000);
  a->post_send(make_wr(1, IBV_WR_SEND, &sge, 1));
  // A WRITE behind it waits too: a connection's requests execute in order.
  post_rdma(*a, 2, IBV_WR_RDMA_WRITE, m1->sge(0, 16), m2->addr() + 1000000, m2->key);
  run(3000);  // 3 ms: many RNR timer periods (rnr_retry 7: forever)
  EXPECT_TRUE(a->poll_send().empty());
  EXPECT_EQ(held_requests(h2->router()), 2u);
  EXPECT_EQ(m2->ptr[1000000], 0) << "the WRITE behind the held SEND ran early";
  b->post_recv(9, {m2->sge(0, 8192)});
  auto wcs = send_completions(*a, 2);
  ASSERT_EQ(wcs.size(), 2u);
  EXPECT_EQ(wcs[0].wr_id, 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wcs[1].status, IBV_WC_SUCCESS);
  auto rcs = recv_completions(*b, 1);
  ASSERT_EQ(rcs.size(), 1u);
  EXPECT_EQ(rcs[0].byte_len, 5000u);
  EXPECT_EQ(memcmp(m2->ptr, data.data(), 5000), 0);
  EXPECT_EQ(memcmp(m2->ptr + 1000000, m1->ptr, 16), 0);
  EXPECT_EQ(held_requests(h2->router()), 0u);
}

TEST_F(RoutedRc, RnrRetriesExhaustedFailTheRequestAndFlushTheRest) {
  FakeQp::Options oa, ob;
  oa.rnr_retry = 2;
  ob.min_rnr_timer = 1;  // 10 us
  auto [x, y] = new_pair(oa, ob);
  ibv_sge sge = m1->sge(0, 64);
  x->post_send(make_wr(1, IBV_WR_SEND, &sge, 1));
  post_rdma(*x, 2, IBV_WR_RDMA_WRITE, m1->sge(0, 16), m2->addr() + 4096, m2->key);
  auto wcs = send_completions(*x, 2);
  ASSERT_EQ(wcs.size(), 2u);
  EXPECT_EQ(wcs[0].wr_id, 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_RNR_RETRY_EXC_ERR);
  EXPECT_EQ(wcs[1].wr_id, 2u);
  EXPECT_EQ(wcs[1].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(x->state(), IBV_QPS_ERR);
  EXPECT_TRUE(has_fatal(*h1, x->qpn, proto::FatalReason::kRouted));
  // Nothing of it arrives later.
  y->post_recv(5, {m2->sge(0, 64)});
  run(2000);
  EXPECT_TRUE(y->poll_recv().empty());
  EXPECT_EQ(m2->ptr[4096], 0);
  EXPECT_EQ(held_requests(h2->router()), 0u);
}

TEST_F(RoutedRc, ADestinationNotReadyYetGetsTheRequestsOnceReady) {
  auto [x, y] = new_pair({}, {}, false);
  // x's RTR names y and x connects; y has not reached RTR (nor named x) yet.
  x->peer_ipv4 = c2->ipv4;
  x->peer_qpn = y->qpn;
  x->set_state(IBV_QPS_RTS);
  ASSERT_EQ(connect_one(*x, *y), 0);
  auto data = random_bytes(777, 12);
  memcpy(m1->ptr, data.data(), data.size());
  post_rdma(*x, 1, IBV_WR_RDMA_WRITE, m1->sge(0, 777), m2->addr() + 64, m2->key);
  ibv_sge sge = m1->sge(0, 100);
  x->post_send(make_wr(2, IBV_WR_SEND, &sge, 1));
  run(3000);
  EXPECT_TRUE(x->poll_send().empty());
  EXPECT_EQ(m2->ptr[64], 0) << "written before the destination agreed";
  EXPECT_EQ(held_requests(h2->router()), 2u);
  y->post_recv(3, {m2->sge(10000, 100)});
  y->peer_ipv4 = c1->ipv4;
  y->peer_qpn = x->qpn;
  y->set_state(IBV_QPS_RTR);
  auto wcs = send_completions(*x, 2);
  ASSERT_EQ(wcs.size(), 2u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wcs[1].status, IBV_WC_SUCCESS);
  EXPECT_EQ(memcmp(m2->ptr + 64, data.data(), 777), 0);
  auto rcs = recv_completions(*y, 1);
  ASSERT_EQ(rcs.size(), 1u);
  EXPECT_EQ(rcs[0].wr_id, 3u);
  EXPECT_EQ(memcmp(m2->ptr + 10000, data.data(), 100), 0);
}

TEST_F(RoutedRc, ADestinationThatNeverGetsReadyFailsWithRetryExceeded) {
  FakeQp::Options oa;
  oa.timeout = 10;  // 4.2 ms
  oa.retry_cnt = 1;
  auto [x, y] = new_pair(oa, {}, false);
  x->peer_ipv4 = c2->ipv4;
  x->peer_qpn = y->qpn;
  x->set_state(IBV_QPS_RTS);
  ASSERT_EQ(connect_one(*x, *y), 0);
  post_rdma(*x, 1, IBV_WR_RDMA_WRITE, m1->sge(0, 8), m2->addr(), m2->key);
  post_rdma(*x, 2, IBV_WR_RDMA_WRITE, m1->sge(0, 8), m2->addr(), m2->key);
  auto wcs = send_completions(*x, 2, 200, 100'000);  // 20 ms
  ASSERT_EQ(wcs.size(), 2u);
  EXPECT_EQ(wcs[0].status, IBV_WC_RETRY_EXC_ERR);
  EXPECT_EQ(wcs[1].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(held_requests(h2->router()), 0u);
}

class SmallHolds : public RoutedRc {
 protected:
  void SetUp() override {
    limits.held_bytes_per_connection = 64 << 10;
    RoutedRc::SetUp();
  }
};

TEST_F(SmallHolds, HeldBytesStayWithinTheirBoundAndTheRequesterHearsOfIt) {
  ibv_sge sge = m1->sge(0, 30000);
  a->post_send(make_wr(0, IBV_WR_SEND, &sge, 1));
  a->post_send(make_wr(1, IBV_WR_SEND, &sge, 1));
  run(2000);
  // Both held, their payloads kept: 60 000 bytes of the 64 KiB the connection may hold.
  auto held = h2->router().held_by_owner();
  ASSERT_EQ(held.size(), 1u);
  EXPECT_EQ(held.begin()->second, std::make_pair(uint64_t(2), uint64_t(60000)));
  uint64_t link_bytes = 0;
  for (auto& l : h2->router().links()) link_bytes += l.held_bytes;
  EXPECT_EQ(link_bytes, 60000u);
  EXPECT_TRUE(a->poll_send().empty());
  // One more is over the bound: the connection fails, and the requester hears of it.
  a->post_send(make_wr(2, IBV_WR_SEND, &sge, 1));
  auto wcs = send_completions(*a, 3);
  ASSERT_EQ(wcs.size(), 3u) << "the requester waits forever for requests the responder dropped";
  EXPECT_EQ(wcs[0].wr_id, 0u);
  EXPECT_EQ(wcs[0].status, IBV_WC_RNR_RETRY_EXC_ERR);
  EXPECT_EQ(wcs[1].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(wcs[2].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_TRUE(h2->router().held_by_owner().empty());
  for (auto& l : h2->router().links()) EXPECT_EQ(l.held_bytes, 0u);
  // Nothing of them is delivered later.
  b->post_recv(1, {m2->sge(0, 65536)});
  run(2000);
  EXPECT_TRUE(b->poll_recv().empty());
}

// A request the target refuses: REM_ACCESS_ERR (or what `want` says), the request behind it
// flushed, the target memory as it was, the requester's QP in error.
struct AccessCase {
  const char* name;
  ibv_wr_opcode op;
  uint32_t mr_access;  // of the target MR
  uint32_t qp_access;  // of the target QP
  int64_t offset;      // into the target MR
  uint32_t len;
  bool bad_key, dereg;
  ibv_wc_status want;
};

TEST_F(RoutedRc, RemoteAccessErrorsLeaveTheTargetUntouched) {
  const uint32_t rw = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
  const AccessCase cases[] = {
      {"bad rkey", IBV_WR_RDMA_WRITE, kAllAccess, kAllAccess, 0, 64, true, false,
       IBV_WC_REM_ACCESS_ERR},
      {"past the end", IBV_WR_RDMA_WRITE, kAllAccess, kAllAccess, 8192 - 32, 64, false, false,
       IBV_WC_REM_ACCESS_ERR},
      {"before the start", IBV_WR_RDMA_WRITE, kAllAccess, kAllAccess, -16, 64, false, false,
       IBV_WC_REM_ACCESS_ERR},
      {"MR without remote write", IBV_WR_RDMA_WRITE,
       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ, kAllAccess, 0, 64, false, false,
       IBV_WC_REM_ACCESS_ERR},
      {"QP without remote write", IBV_WR_RDMA_WRITE, kAllAccess, IBV_ACCESS_REMOTE_READ, 0, 64,
       false, false, IBV_WC_REM_ACCESS_ERR},
      {"MR without remote read", IBV_WR_RDMA_READ, rw, kAllAccess, 0, 64, false, false,
       IBV_WC_REM_ACCESS_ERR},
      {"MR without remote atomic", IBV_WR_ATOMIC_FETCH_AND_ADD, rw | IBV_ACCESS_REMOTE_READ,
       kAllAccess, 0, 8, false, false, IBV_WC_REM_ACCESS_ERR},
      {"misaligned atomic", IBV_WR_ATOMIC_CMP_AND_SWP, kAllAccess, kAllAccess, 4, 8, false, false,
       IBV_WC_REM_INV_REQ_ERR},
      {"deregistered MR", IBV_WR_RDMA_WRITE, kAllAccess, kAllAccess, 0, 64, false, true,
       IBV_WC_REM_ACCESS_ERR},
  };
  for (const AccessCase& k : cases) {
    SCOPED_TRACE(k.name);
    FakeQp::Options ob;
    ob.access = k.qp_access;
    auto [x, y] = new_pair({}, ob);
    FakeMr& target = c2->reg_mr(8192, k.mr_access);
    auto before = random_bytes(8192, 13);
    memcpy(target.ptr, before.data(), 8192);
    memset(m1->ptr, 0xab, 64);
    const uint32_t key = k.bad_key ? target.key ^ 0x100 : target.key;
    if (k.dereg) c2->dereg_mr(target);
    post_rdma(*x, 1, k.op, m1->sge(0, k.len), target.addr() + k.offset, key);
    post_rdma(*x, 2, IBV_WR_RDMA_WRITE, m1->sge(0, 8), m2->addr(), m2->key);
    auto wcs = send_completions(*x, 2);
    ASSERT_EQ(wcs.size(), 2u);
    EXPECT_EQ(wcs[0].wr_id, 1u);
    EXPECT_EQ(wcs[0].status, k.want);
    EXPECT_EQ(wcs[1].status, IBV_WC_WR_FLUSH_ERR);
    EXPECT_EQ(x->state(), IBV_QPS_ERR);
    EXPECT_TRUE(has_fatal(*h1, x->qpn, proto::FatalReason::kRouted));
    EXPECT_EQ(memcmp(target.ptr, before.data(), 8192), 0) << "the target memory changed";
    EXPECT_NE(m2->ptr[0], 0xab) << "the request behind the failed one ran";
  }
}

TEST_F(RoutedRc, LocalMemoryDeregisteredAfterPostingFailsWithLocalProtection) {
  // The gather list's MR is gone before the router reads from it.
  FakeMr& gone = c1->reg_mr(4096, kAllAccess);
  post_rdma(*a, 1, IBV_WR_RDMA_WRITE, gone.sge(0, 64), m2->addr(), m2->key);
  post_rdma(*a, 2, IBV_WR_RDMA_WRITE, m1->sge(0, 64), m2->addr(), m2->key);
  c1->dereg_mr(gone);
  auto wcs = send_completions(*a, 2);
  ASSERT_EQ(wcs.size(), 2u);
  EXPECT_EQ(wcs[0].status, IBV_WC_LOC_PROT_ERR);
  EXPECT_EQ(wcs[1].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_TRUE(has_fatal(*h1, a->qpn, proto::FatalReason::kRouted));
}

TEST_F(RoutedRc, AReadWhoseLocalMemoryWentAwayMeanwhileFailsWithLocalProtection) {
  auto [x, y] = new_pair();
  FakeMr& dst = c1->reg_mr(4096, kAllAccess);
  memset(m2->ptr, 0x3c, 4096);
  post_rdma(*x, 1, IBV_WR_RDMA_READ, dst.sge(0, 4096), m2->addr(), m2->key);
  run(1);  // sent, and answered; the answer not read yet
  EXPECT_TRUE(x->poll_send().empty());
  c1->dereg_mr(dst);
  auto wcs = send_completions(*x, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_LOC_PROT_ERR);
  EXPECT_EQ(x->state(), IBV_QPS_ERR);
}

TEST_F(RoutedRc, ASendLongerThanTheReceiveFailsBothSides) {
  b->post_recv(4, {m2->sge(0, 100)});
  ibv_sge sge = m1->sge(0, 101);
  a->post_send(make_wr(1, IBV_WR_SEND, &sge, 1));
  auto wcs = send_completions(*a, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_REM_INV_REQ_ERR);
  auto rcs = recv_completions(*b, 1);
  ASSERT_EQ(rcs.size(), 1u);
  EXPECT_EQ(rcs[0].wr_id, 4u);
  EXPECT_EQ(rcs[0].status, shm::kRecvLenErr);
}

TEST_F(RoutedRc, AQpMovedToErrorFlushesWhatItPosted) {
  for (int i = 0; i < 5; ++i)
    post_rdma(*a, 10 + i, IBV_WR_RDMA_WRITE, m1->sge(0, 8), m2->addr() + 8 * i, m2->key, 0);
  memset(m1->ptr, 0x77, 8);
  a->set_state(IBV_QPS_ERR);  // before the router saw any of them
  auto wcs = send_completions(*a, 5);
  ASSERT_EQ(wcs.size(), 5u) << "flushed work requests complete even when unsignaled";
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(wcs[i].wr_id, uint64_t(10 + i));
    EXPECT_EQ(wcs[i].status, IBV_WC_WR_FLUSH_ERR);
  }
  run(1000);
  for (int i = 0; i < 40; ++i) EXPECT_EQ(m2->ptr[i], 0);
  EXPECT_TRUE(h1->fatals.empty()) << "the owner moved it to error itself";
  // Posted afterwards: flushed too.
  post_rdma(*a, 20, IBV_WR_RDMA_WRITE, m1->sge(0, 8), m2->addr(), m2->key);
  wcs = send_completions(*a, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_WR_FLUSH_ERR);
}

TEST_F(RoutedRc, AnSrqServesEveryQpThatUsesIt) {
  FakeSrq& srq = h2->srq(*c2);
  FakeQp::Options ob;
  ob.srq = &srq;
  auto [x1, y1] = new_pair({}, ob);
  auto [x2, y2] = new_pair({}, ob);
  for (int i = 0; i < 4; ++i) srq.post_recv(100 + i, {m2->sge(uint64_t(i) * 4096, 4096)});
  std::vector<std::vector<uint8_t>> data;
  for (int i = 0; i < 4; ++i) {
    data.push_back(random_bytes(1000 + i, 20 + i));
    memcpy(m1->ptr + uint64_t(i) * 4096, data[i].data(), data[i].size());
    ibv_sge sge = m1->sge(uint64_t(i) * 4096, 1000 + i);
    (i % 2 ? x2 : x1)->post_send(make_wr(i, IBV_WR_SEND, &sge, 1));
  }
  auto w1 = send_completions(*x1, 2);
  auto w2 = send_completions(*x2, 2);
  ASSERT_EQ(w1.size() + w2.size(), 4u);
  for (auto& wc : w1) EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  for (auto& wc : w2) EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  auto r1 = recv_completions(*y1, 2);
  auto r2 = recv_completions(*y2, 2);
  ASSERT_EQ(r1.size(), 2u);
  ASSERT_EQ(r2.size(), 2u);
  std::set<uint64_t> used;
  for (auto* rs : {&r1, &r2})
    for (auto& rc : *rs) {
      EXPECT_EQ(rc.src_qp, rs == &r1 ? x1->qpn : x2->qpn);
      used.insert(rc.wr_id);
      // Which message went into which receive: its length tells.
      int msg = static_cast<int>(rc.byte_len) - 1000;
      ASSERT_GE(msg, 0);
      ASSERT_LT(msg, 4);
      EXPECT_EQ(memcmp(m2->ptr + (rc.wr_id - 100) * 4096, data[msg].data(), rc.byte_len), 0);
    }
  EXPECT_EQ(used.size(), 4u) << "every SRQ receive taken once";
}

}  // namespace
}  // namespace vrdma::daemon::testing
