// The router's work list (router_worklist.cc): a pass serves the routed QPs with work; idle
// ones leave the list with their doorbell armed and come back when their owner rings it; a QP
// freed while on the list is gone from it.
#include <cstring>

#include "router_fake.h"

namespace vrdma::daemon::testing {
namespace {

class WorkList : public RoutedRc {
 protected:
  void SetUp() override {
    RoutedRc::SetUp();
    for (int i = 0; i < 20; ++i) pairs.push_back(new_pair());
  }
  // A signaled WRITE of `n` bytes from q's client's MR into the other side's.
  void write(FakeQp& q, uint64_t wr_id, uint32_t n = 4096) {
    post_rdma(q, wr_id, IBV_WR_RDMA_WRITE, m1->sge(0, n), m2->addr(), m2->key);
  }
  std::vector<std::pair<FakeQp*, FakeQp*>> pairs;
};

TEST_F(WorkList, IdleQpsLeaveTheListAndAreNotVisited) {
  write(*a, 1);
  ASSERT_EQ(send_completions(*a, 1).size(), 1u);
  run(500);  // longer than a QP stays on the list idle
  EXPECT_EQ(h1->router().routed_qps(), 21u);
  EXPECT_EQ(h1->router().active_qps(), 0u);
  EXPECT_EQ(h2->router().active_qps(), 0u);
  const uint64_t v1 = h1->router().qp_visits(), v2 = h2->router().qp_visits();
  run(2000);
  EXPECT_EQ(h1->router().qp_visits(), v1) << "no idle QP is looked at";
  EXPECT_EQ(h2->router().qp_visits(), v2);
  // Every idle QP's doorbell is armed: its owner's next post rings.
  EXPECT_EQ(a->sq->doorbell.load(), 1u);
  for (auto& [x, y] : pairs) EXPECT_EQ(x->sq->doorbell.load(), 1u);
}

TEST_F(WorkList, APostRingsTheDoorbellAndOnlyThatQpIsServed) {
  run(500);
  ASSERT_EQ(h1->router().active_qps(), 0u);
  FakeQp& q = *pairs[7].first;
  const uint64_t before = h1->router().qp_visits();
  auto data = random_bytes(4096, 5);
  memcpy(m1->ptr, data.data(), data.size());
  write(q, 42);
  EXPECT_EQ(q.sq->doorbell.load(), 0u) << "the post took the armed doorbell";
  run(1);
  EXPECT_EQ(h1->router().active_qps(), 1u);
  auto wcs = send_completions(q, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].wr_id, 42u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(memcmp(m2->ptr, data.data(), data.size()), 0);
  run(500);
  EXPECT_EQ(h1->router().active_qps(), 0u);
  // One QP visited once a pass while it was on the list, not 21.
  EXPECT_LT(h1->router().qp_visits() - before, 700u);
}

TEST_F(WorkList, PostsWhileQpsAreListedNeedNoDoorbell) {
  write(*a, 1);
  run(1);
  ASSERT_GE(h1->router().active_qps(), 1u);
  EXPECT_EQ(a->sq->doorbell.load(), 0u);
  // More posts while it is served: nothing to ring, all complete in order.
  for (uint64_t i = 2; i <= 40; ++i) write(*a, i, 512);
  auto wcs = send_completions(*a, 40);
  ASSERT_EQ(wcs.size(), 40u);
  for (size_t i = 0; i < wcs.size(); ++i) {
    EXPECT_EQ(wcs[i].wr_id, i + 1);
    EXPECT_EQ(wcs[i].status, IBV_WC_SUCCESS);
  }
}

TEST_F(WorkList, QpsFreedWhileListedAreGoneFromIt) {
  run(500);
  // Three QPs with work; the middle one and the last one are freed while on the list.
  FakeQp* q[3] = {pairs[2].first, pairs[3].first, pairs[4].first};
  for (int i = 0; i < 3; ++i)
    for (uint64_t k = 0; k < 8; ++k) write(*q[i], 100 * i + k, 8192);
  run(1);
  ASSERT_EQ(h1->router().active_qps(), 3u);
  h1->router().qp_freed(q[1]->qpn);
  EXPECT_EQ(h1->router().active_qps(), 2u);
  EXPECT_EQ(h1->router().routed_qps(), 20u);
  auto wcs = send_completions(*q[0], 8);
  EXPECT_EQ(wcs.size(), 8u);
  h1->router().qp_freed(q[2]->qpn);
  run(500);
  EXPECT_EQ(h1->router().active_qps(), 0u);
  // The list still works: a QP after them is served.
  write(*pairs[5].first, 7);
  wcs = send_completions(*pairs[5].first, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
  // And the freed one's client going away leaves nothing behind.
  h1->client_gone(*c1);
  run(100);
  EXPECT_EQ(h1->router().active_qps(), 0u);
  EXPECT_EQ(h1->router().routed_qps(), 0u);
}

// A ring looks at its client's routed QPs only (a list per client); that list keeps up with QPs
// freed from its head and its middle, and with a client that goes away.
TEST_F(WorkList, ARingServesItsClientsArmedQpsAfterOthersOfItWereFreed) {
  FakeClient& c3 = h1->client("10.1.0.6");
  FakeMr& m3 = c3.reg_mr(1 << 20, kAllAccess);
  FakeQp* x[4];
  for (FakeQp*& q : x) {
    q = &h1->qp(c3, IBV_QPT_RC);
    connect(*q, h2->qp(*c2, IBV_QPT_RC));
  }
  run(500);
  ASSERT_EQ(h1->router().active_qps(), 0u);
  ASSERT_EQ(h1->router().routed_qps(), 25u);
  // The last QP made and one in the middle are freed while idle.
  h1->router().qp_freed(x[3]->qpn);
  h1->router().qp_freed(x[1]->qpn);
  // Posts on the two left ring c3's doorbell: both are served within a few passes (the
  // sweep that would find them anyway comes every 100 ms of the simulated clock, not 2).
  for (FakeQp* q : {x[0], x[2]})
    post_rdma(*q, q->qpn, IBV_WR_RDMA_WRITE, m3.sge(0, 4096), m2->addr(), m2->key);
  for (FakeQp* q : {x[0], x[2]}) {
    auto wcs = send_completions(*q, 1, 2000);
    ASSERT_EQ(wcs.size(), 1u) << "QP " << q->qpn;
    EXPECT_EQ(wcs[0].wr_id, q->qpn);
    EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
  }
  // c1's QPs were not woken by c3's ring.
  EXPECT_EQ(h1->router().active_qps(), 2u);
  // c3 goes away with its two QPs; c1's ring still serves c1's.
  h1->client_gone(c3);
  run(500);
  EXPECT_EQ(h1->router().routed_qps(), 21u);
  EXPECT_EQ(h1->router().active_qps(), 0u);
  write(*pairs[11].first, 5);
  auto wcs = send_completions(*pairs[11].first, 1, 2000);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
}

TEST_F(WorkList, AStateChangeNobodyRangForIsSeenBySweep) {
  run(500);
  ASSERT_EQ(h1->router().active_qps(), 0u);
  // Entries posted without a ring (an owner that found the doorbell unarmed a moment before
  // the router armed it cannot do that; a state change rings nothing at all): the periodic
  // sweep still finds them.
  a->sq->doorbell.store(0);
  const int fd = c1->doorbell;
  c1->doorbell = -1;
  write(*a, 9);
  c1->doorbell = fd;
  run(50);
  EXPECT_EQ(h1->router().active_qps(), 0u);
  auto wcs = send_completions(*a, 1, 2000, 100'000);  // 200 ms of simulated time
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
}

// The QPs of one flow share its link turn by turn, one request each, and a pass that fills the
// link leaves the next to start where it stopped: QPs late on the list are not always the ones
// the full link turns away (as a NIC serves its QPs, and as programs that wait for the slowest
// of their QPs, perftest's, need).
class WorkListTurns : public RoutedRc {
 protected:
  void SetUp() override {
    limits.link_window_bytes = 64 << 10;  // a full link after 16 writes of 4 KiB
    RoutedRc::SetUp();
    for (int i = 0; i < 7; ++i) qps.push_back(new_pair(FakeQp::Options{.sq_cap = 256}).first);
  }
  std::vector<FakeQp*> qps;
};

TEST_F(WorkListTurns, AFullLinkTurnsAwayEveryQpInTurn) {
  constexpr uint64_t kWrites = 200;
  for (FakeQp* q : qps)
    for (uint64_t i = 0; i < kWrites; ++i)
      post_rdma(*q, i, IBV_WR_RDMA_WRITE, m1->sge(0, 4096), m2->addr(), m2->key,
                i + 1 == kWrites ? IBV_SEND_SIGNALED : 0);
  auto done = [&](FakeQp* q) { return q->sq->done.load(); };
  ASSERT_TRUE(run_until([&] {
    for (FakeQp* q : qps)
      if (done(q) == kWrites) return true;
    return false;
  }));
  // When the first QP is through, every other one is within a few rounds of it.
  for (FakeQp* q : qps) EXPECT_GE(done(q), kWrites - 24) << "QP " << q->qpn;
  for (FakeQp* q : qps) EXPECT_EQ(send_completions(*q, 1).size(), 1u);
}

// A link whose socket is full (its peer reads nothing for now) is written to again only once
// the socket says it has room: meanwhile the router may sleep, though its QPs have requests
// queued for that link, and their doorbells stay unarmed (the room wakes the router, which
// serves them then). Once the peer reads, everything arrives intact; a peer that never reads
// again fails the link after tx_stall_ns.
class FullLink : public RoutedRc {
 protected:
  void SetUp() override {
    limits.tx_stall_ns = 200'000'000;  // before the QPs' own timeout (550 ms)
    RoutedRc::SetUp();
  }
  static constexpr uint32_t kWrite = 64 << 10;
  static constexpr uint64_t kWrites = 32;  // 2 MiB: far more than a socket holds
  std::vector<uint8_t> post_writes() {
    auto data = random_bytes(kWrites * kWrite, 11);
    memcpy(m1->ptr, data.data(), data.size());
    for (uint64_t i = 0; i < kWrites; ++i)
      post_rdma(*a, i, IBV_WR_RDMA_WRITE, m1->sge(i * kWrite, kWrite), m2->addr() + i * kWrite,
                m2->key, i + 1 == kWrites ? IBV_SEND_SIGNALED : 0);
    return data;
  }
};

TEST_F(FullLink, TheRouterSleepsUntilTheSocketHasRoom) {
  auto data = post_writes();
  run_only_h1(20'000'000, 1'000'000);  // host 2 reads nothing: h1's socket fills
  const uint64_t out = link_of(*h1, true, wire::kMainLane)->bytes_out;
  ASSERT_GT(out, 0u);
  ASSERT_LT(out, kWrites * kWrite) << "the socket took everything: nothing to wait for";
  ASSERT_LT(a->sq->done.load(), kWrites);
  EXPECT_TRUE(h1->router().prepare_sleep()) << "a full link keeps the router awake";
  EXPECT_EQ(a->sq->doorbell.load(), 0u) << "the QP waiting for room was armed";
  run_only_h1(20'000'000, 1'000'000);
  EXPECT_EQ(link_of(*h1, true, wire::kMainLane)->bytes_out, out) << "written to a full socket";
  // Host 2 reads again: the room it makes wakes host 1's writes.
  auto wcs = send_completions(*a, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(memcmp(m2->ptr, data.data(), data.size()), 0);
  EXPECT_TRUE(link_of(*h1, true, wire::kMainLane).has_value());
}

TEST_F(FullLink, APeerThatNeverReadsFailsTheLink) {
  post_writes();
  run_only_h1(150'000'000, 10'000'000);
  ASSERT_TRUE(link_of(*h1, true, wire::kMainLane).has_value()) << "failed before tx_stall_ns";
  run_only_h1(200'000'000, 10'000'000);
  EXPECT_FALSE(link_of(*h1, true, wire::kMainLane).has_value()) << "still waiting for room";
  auto wcs = send_completions(*a, 1);  // every write fails: the first with the link's error
  ASSERT_FALSE(wcs.empty());
  EXPECT_NE(wcs[0].status, IBV_WC_SUCCESS);
}

}  // namespace
}  // namespace vrdma::daemon::testing
