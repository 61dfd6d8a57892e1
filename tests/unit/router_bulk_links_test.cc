// Several bulk links per host pair (RouterConfig::bulk_links, vrdmad --router-links): bulk QPs
// connecting to a host take the links in turn, each QP's frames (requests and their responses)
// all on its own link and in order, and a lost link fails its own QPs only.
#include <string.h>

#include <set>

#include "transport/wire.h"
#include "router_fake.h"

namespace vrdma::daemon::testing {
namespace {

constexpr uint32_t kLinks = 3;

class RoutedBulkLinks : public RoutedRc {
 protected:
  void SetUp() override {
    bulk_links = kLinks;
    RoutedRc::SetUp();
    // a/b (from RoutedRc) and five more pairs: six bulk pairs over three links.
    pairs.push_back({a, b});
    for (int i = 0; i < 5; ++i) pairs.push_back(new_pair());
  }
  uint64_t frames_out(FakeHost& h, bool outbound, uint32_t lane) {
    auto l = link_of(h, outbound, lane);
    return l ? l->frames_out : 0;
  }
  // The lanes of h1's outbound links whose frame count grew while `f` ran.
  std::set<uint32_t> lanes_used(const std::function<void()>& f) {
    uint64_t before[kLinks];
    for (uint32_t k = 0; k < kLinks; ++k) before[k] = frames_out(*h1, true, wire::bulk_lane(k));
    f();
    std::set<uint32_t> used;
    for (uint32_t k = 0; k < kLinks; ++k)
      if (frames_out(*h1, true, wire::bulk_lane(k)) != before[k]) used.insert(wire::bulk_lane(k));
    return used;
  }
  void write_ok(FakeQp& q, uint64_t id, uint64_t off, uint32_t n) {
    post_rdma(q, id, IBV_WR_RDMA_WRITE, m1->sge(off, n), m2->addr() + off, m2->key);
    auto wcs = send_completions(q, 1);
    ASSERT_EQ(wcs.size(), 1u);
    EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
  }
  std::vector<std::pair<FakeQp*, FakeQp*>> pairs;
};

TEST_F(RoutedBulkLinks, BulkQpsTakeTheLinksInTurnEachOnOne) {
  std::vector<uint32_t> lane_of_pair;
  for (size_t i = 0; i < pairs.size(); ++i) {
    auto used = lanes_used([&] { write_ok(*pairs[i].first, i, i * 64, 64); });
    ASSERT_EQ(used.size(), 1u) << "pair " << i;  // one link per QP
    lane_of_pair.push_back(*used.begin());
    // And the same one again for its next request.
    EXPECT_EQ(lanes_used([&] { write_ok(*pairs[i].first, 100 + i, i * 64, 64); }), used);
  }
  // Six QPs over three links: two each.
  for (uint32_t k = 0; k < kLinks; ++k)
    EXPECT_EQ(std::count(lane_of_pair.begin(), lane_of_pair.end(), wire::bulk_lane(k)), 2)
        << wire::lane_label(wire::bulk_lane(k));
  // Responses come back on the link the requests went on (host 2's inbound end of it).
  for (uint32_t k = 0; k < kLinks; ++k)
    EXPECT_GE(frames_out(*h2, false, wire::bulk_lane(k)), 4u) << k;
  EXPECT_FALSE(link_of(*h1, true, wire::kLatencyLane));
}

TEST_F(RoutedBulkLinks, WorkOnEveryLinkAtOnceArrivesInOrderAndIntact) {
  // Every pair writes 16 blocks of 8 KiB, then reads them back, all posted at once; block j of
  // pair i is filled with its own byte.
  constexpr int kBlocks = 16;
  constexpr uint32_t kBlock = 8192;
  const uint64_t area = kBlocks * kBlock;
  for (size_t i = 0; i < pairs.size(); ++i)
    for (int j = 0; j < kBlocks; ++j)
      memset(m1->ptr + i * area + j * kBlock, int(1 + i * kBlocks + j), kBlock);
  for (size_t i = 0; i < pairs.size(); ++i)
    for (int j = 0; j < kBlocks; ++j) {
      const uint64_t off = i * area + j * kBlock;
      post_rdma(*pairs[i].first, j, IBV_WR_RDMA_WRITE, m1->sge(off, kBlock), m2->addr() + off,
                m2->key);
    }
  for (size_t i = 0; i < pairs.size(); ++i) {
    auto wcs = send_completions(*pairs[i].first, kBlocks, 200000);
    ASSERT_EQ(wcs.size(), size_t(kBlocks)) << i;
    for (int j = 0; j < kBlocks; ++j) {
      EXPECT_EQ(wcs[j].status, IBV_WC_SUCCESS);
      EXPECT_EQ(wcs[j].wr_id, uint64_t(j)) << "pair " << i;  // in order
    }
  }
  EXPECT_EQ(memcmp(m1->ptr, m2->ptr, pairs.size() * area), 0);
  // Back: READ each block into a cleared area.
  memset(m1->ptr + (1 << 20), 0, pairs.size() * area);
  for (size_t i = 0; i < pairs.size(); ++i)
    for (int j = 0; j < kBlocks; ++j) {
      const uint64_t off = i * area + j * kBlock;
      post_rdma(*pairs[i].first, 1000 + j, IBV_WR_RDMA_READ, m1->sge((1 << 20) + off, kBlock),
                m2->addr() + off, m2->key);
    }
  for (size_t i = 0; i < pairs.size(); ++i) {
    auto wcs = send_completions(*pairs[i].first, kBlocks, 200000);
    ASSERT_EQ(wcs.size(), size_t(kBlocks));
    for (auto& wc : wcs) EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  }
  EXPECT_EQ(memcmp(m1->ptr + (1 << 20), m2->ptr, pairs.size() * area), 0);
}

TEST_F(RoutedBulkLinks, ACutBulkLinkFailsItsQpsAndNoOthers) {
  std::vector<uint32_t> lane(pairs.size());
  for (size_t i = 0; i < pairs.size(); ++i)
    lane[i] = *lanes_used([&] { write_ok(*pairs[i].first, i, 0, 8); }).begin();
  // Work posted on every pair, then lane bulk1's links are cut (both directions).
  for (auto& [q, r] : pairs)
    post_rdma(*q, 50, IBV_WR_RDMA_WRITE, m1->sge(0, 8), m2->addr(), m2->key);
  cut_bulk_links(1);
  const uint32_t cut = wire::bulk_lane(1);
  ASSERT_EQ(std::count(lane.begin(), lane.end(), cut), 2);
  for (size_t i = 0; i < pairs.size(); ++i) {
    FakeQp& q = *pairs[i].first;
    auto wcs = send_completions(q, 1);
    ASSERT_EQ(wcs.size(), 1u);
    if (lane[i] == cut) {
      EXPECT_EQ(wcs[0].status, IBV_WC_RETRY_EXC_ERR) << i;
      EXPECT_TRUE(has_fatal(*h2, pairs[i].second->qpn, proto::FatalReason::kPeerGone)) << i;
    } else {
      EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS) << i;
    }
  }
  // rdma_cm's state with the host stays: it lives on the main links.
  EXPECT_TRUE(h1->hosts_gone.empty());
  EXPECT_TRUE(h2->hosts_gone.empty());
  EXPECT_TRUE(link_of(*h1, true, wire::kMainLane));
  EXPECT_FALSE(link_of(*h1, true, cut));
}

TEST(BulkLanes, NumberedAfterTheLatencyLaneAndNamed) {
  EXPECT_EQ(wire::bulk_lane(0), wire::kMainLane);
  EXPECT_EQ(wire::bulk_lane(1), 2u);
  EXPECT_EQ(wire::bulk_lane(wire::kMaxBulkLinks - 1), wire::kLanes - 1);
  EXPECT_EQ(wire::lane_label(wire::kMainLane), "main");
  EXPECT_EQ(wire::lane_label(wire::kLatencyLane), "latency");
  EXPECT_EQ(wire::lane_label(wire::bulk_lane(3)), "bulk3");
}

}  // namespace
}  // namespace vrdma::daemon::testing
