// Lanes between two hosts (wire.h, router_lanes.cc): the latency class's QPs have a link of
// their own each way, so their frames never wait behind bulk bytes already in the main link's
// stream; each QP's frames all take one link, in order; a lost link fails its own QPs only.
#include <arpa/inet.h>
#include <string.h>

#include "transport/frame_check.h"
#include "transport/wire.h"
#include "router_fake.h"

namespace vrdma::daemon::testing {
namespace {

constexpr uint32_t kSl1 = 1u << 8;          // SL 1 (QpShared::traffic_class: SL << 8 | TC)
constexpr uint32_t kDscpEf = 46u << 2;      // GRH traffic class with DSCP 46
constexpr uint32_t kBulkWrite = 256 << 10;  // bytes per bulk WRITE

// Client 10.1.0.5 on host 1 and 10.2.0.5 on host 2 with a bulk RC pair (a, b) and a pair in the
// latency class (la, lb), both connected, the hosts joined by both lanes.
class RoutedLanes : public RoutedRc {
 protected:
  void SetUp() override {
    latency_lane = true;
    RoutedRc::SetUp();
    FakeQp::Options lat;
    lat.traffic_class = kSl1;
    auto [x, y] = new_pair(lat, lat);
    la = x;
    lb = y;
  }
  uint64_t frames_out(FakeHost& h, bool outbound, uint32_t lane) {
    auto l = link_of(h, outbound, lane);
    return l ? l->frames_out : 0;
  }
  uint64_t bytes_in(FakeHost& h, bool outbound, uint32_t lane) {
    auto l = link_of(h, outbound, lane);
    return l ? l->bytes_in : 0;
  }
  FakeQp *la = nullptr, *lb = nullptr;
};

TEST_F(RoutedLanes, LatencyClassQpsTakeTheirOwnLinkBothWays) {
  const uint64_t out_main = frames_out(*h1, true, wire::kMainLane);
  const uint64_t out_lat = frames_out(*h1, true, wire::kLatencyLane);
  const uint64_t resp_main = frames_out(*h2, false, wire::kMainLane);
  const uint64_t resp_lat = frames_out(*h2, false, wire::kLatencyLane);
  for (uint64_t i = 0; i < 5; ++i)
    post_rdma(*la, i, IBV_WR_RDMA_WRITE, m1->sge(i * 8, 8), m2->addr() + i * 8, m2->key);
  auto wcs = send_completions(*la, 5);
  ASSERT_EQ(wcs.size(), 5u);
  for (auto& wc : wcs) EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  // Requests out on host 1's latency link, responses back on it (host 2's inbound end).
  EXPECT_GE(frames_out(*h1, true, wire::kLatencyLane) - out_lat, 5u);
  EXPECT_GE(frames_out(*h2, false, wire::kLatencyLane) - resp_lat, 5u);
  EXPECT_EQ(frames_out(*h1, true, wire::kMainLane), out_main);
  EXPECT_EQ(frames_out(*h2, false, wire::kMainLane), resp_main);

  // The other way (lb's requests on host 2's latency link), and the bulk pair on the main one.
  const uint64_t back_lat = frames_out(*h2, true, wire::kLatencyLane);
  const uint64_t back_main = frames_out(*h2, true, wire::kMainLane);
  post_rdma(*lb, 9, IBV_WR_RDMA_WRITE, m2->sge(0, 8), m1->addr(), m1->key);
  ASSERT_EQ(send_completions(*lb, 1).size(), 1u);
  EXPECT_GE(frames_out(*h2, true, wire::kLatencyLane) - back_lat, 1u);
  EXPECT_EQ(frames_out(*h2, true, wire::kMainLane), back_main);

  const uint64_t lat_before = frames_out(*h1, true, wire::kLatencyLane);
  const uint64_t main_before = frames_out(*h1, true, wire::kMainLane);
  post_rdma(*a, 20, IBV_WR_RDMA_WRITE, m1->sge(0, 8), m2->addr(), m2->key);
  ASSERT_EQ(send_completions(*a, 1).size(), 1u);
  EXPECT_GE(frames_out(*h1, true, wire::kMainLane) - main_before, 1u);
  EXPECT_EQ(frames_out(*h1, true, wire::kLatencyLane), lat_before);
}

TEST_F(RoutedLanes, DscpExpeditedForwardingIsTheLatencyClass) {
  FakeQp::Options ef;
  ef.traffic_class = kDscpEf;
  auto [x, y] = new_pair(ef, ef);
  const uint64_t lat = frames_out(*h1, true, wire::kLatencyLane);
  const uint64_t main = frames_out(*h1, true, wire::kMainLane);
  post_rdma(*x, 1, IBV_WR_RDMA_WRITE, m1->sge(0, 8), m2->addr(), m2->key);
  auto wcs = send_completions(*x, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
  EXPECT_GE(frames_out(*h1, true, wire::kLatencyLane) - lat, 1u);
  EXPECT_EQ(frames_out(*h1, true, wire::kMainLane), main);
  (void)y;
}

TEST_F(RoutedLanes, LatencyWorkOvertakesBulkBytesQueuedAheadOfIt) {
  // The bulk pair queues 2 MiB of WRITEs; only host 1 runs, so its main link fills (the
  // socket, then its ring up to the link window) and host 2 has read nothing.
  const uint64_t base = frames_out(*h1, true, wire::kMainLane);
  const uint64_t read_base = bytes_in(*h2, false, wire::kMainLane);
  for (uint64_t i = 0; i < 8; ++i)
    post_rdma(*a, i, IBV_WR_RDMA_WRITE, m1->sge(i * kBulkWrite, kBulkWrite),
              m2->addr() + i * kBulkWrite, m2->key);
  run_only_h1(5'000'000);
  const uint64_t queued = (frames_out(*h1, true, wire::kMainLane) - base) * kBulkWrite;
  ASSERT_GE(queued, uint64_t(1) << 20) << "the main link should hold a window of bulk bytes";
  ASSERT_EQ(bytes_in(*h2, false, wire::kMainLane), read_base);

  memcpy(m1->ptr + (1 << 20) + 100, "latency!", 8);
  post_rdma(*la, 99, IBV_WR_RDMA_WRITE, m1->sge((1 << 20) + 100, 8), m2->addr() + (2 << 20) - 8,
            m2->key);
  std::vector<ibv_wc> wcs;
  int passes = 0;
  ASSERT_TRUE(run_until(
      [&] {
        for (auto& wc : la->poll_send()) wcs.push_back(wc);
        return !wcs.empty() || ++passes > 50;
      },
      100))
      << "no completion";
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(memcmp(m2->ptr + (2 << 20) - 8, "latency!", 8), 0);
  // Host 2 had read less of the main link than was queued on it before the latency WRITE: the
  // WRITE did not wait behind those bytes. (One link would have made it wait for all of them.)
  const uint64_t read_main = bytes_in(*h2, false, wire::kMainLane) - read_base;
  EXPECT_LT(read_main, queued) << "completed after " << passes << " passes";
  EXPECT_GT(a->outstanding(), 0u);
  // The bulk WRITEs all complete, in order, and their data is whole.
  auto bulk = send_completions(*a, 8, 200000);
  ASSERT_EQ(bulk.size(), 8u);
  for (uint64_t i = 0; i < 8; ++i) {
    EXPECT_EQ(bulk[i].status, IBV_WC_SUCCESS);
    EXPECT_EQ(bulk[i].wr_id, i);
  }
  EXPECT_EQ(memcmp(m2->ptr, m1->ptr, 1 << 20), 0);
}

TEST_F(RoutedLanes, ALatencyQpsWorkStaysInOrderBesideBulkTraffic) {
  // Sends with distinct payloads, a WRITE and a READ of what it wrote, and an atomic, on the
  // latency pair while the bulk pair writes: every response comes back on the latency link in
  // the order the requests went.
  constexpr int kSends = 16;
  for (int i = 0; i < kSends; ++i) lb->post_recv(100 + i, {m2->sge((1 << 20) + i * 64, 64)});
  for (uint64_t i = 0; i < 4; ++i)
    post_rdma(*a, 1000 + i, IBV_WR_RDMA_WRITE, m1->sge(i * kBulkWrite, kBulkWrite),
              m2->addr() + i * kBulkWrite, m2->key);
  for (int i = 0; i < kSends; ++i) {
    uint8_t* p = m1->ptr + (1 << 20) + i * 64;
    memset(p, 'a' + i, 64);
    ibv_sge sge = m1->sge((1 << 20) + i * 64, 64);
    la->post_send(make_wr(i, IBV_WR_SEND, &sge, 1));
  }
  memcpy(m1->ptr + (1 << 20) + 4096, "ordered!", 8);
  post_rdma(*la, 50, IBV_WR_RDMA_WRITE, m1->sge((1 << 20) + 4096, 8), m2->addr() + (1 << 20) + 8192,
            m2->key);
  post_rdma(*la, 51, IBV_WR_RDMA_READ, m1->sge((1 << 20) + 8192, 8), m2->addr() + (1 << 20) + 8192,
            m2->key);
  memset(m2->ptr + (1 << 20) + 12288, 0, 8);
  post_rdma(*la, 52, IBV_WR_ATOMIC_FETCH_AND_ADD, m1->sge((1 << 20) + 12288, 8),
            m2->addr() + (1 << 20) + 12288, m2->key);
  auto wcs = send_completions(*la, kSends + 3);
  ASSERT_EQ(wcs.size(), size_t(kSends + 3));
  for (int i = 0; i < kSends; ++i) EXPECT_EQ(wcs[i].wr_id, uint64_t(i));
  EXPECT_EQ(wcs[kSends].wr_id, 50u);
  EXPECT_EQ(wcs[kSends + 1].wr_id, 51u);
  EXPECT_EQ(wcs[kSends + 2].wr_id, 52u);
  for (auto& wc : wcs) EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(memcmp(m1->ptr + (1 << 20) + 8192, "ordered!", 8), 0) << "the READ passed the WRITE";
  uint64_t added = 0;
  memcpy(&added, m2->ptr + (1 << 20) + 12288, 8);
  EXPECT_EQ(added, 1u);
  auto rcs = recv_completions(*lb, kSends);
  ASSERT_EQ(rcs.size(), size_t(kSends));
  for (int i = 0; i < kSends; ++i) {
    EXPECT_EQ(rcs[i].wr_id, uint64_t(100 + i));
    EXPECT_EQ(m2->ptr[(1 << 20) + i * 64], 'a' + i);
    EXPECT_EQ(m2->ptr[(1 << 20) + i * 64 + 63], 'a' + i);
  }
  EXPECT_EQ(send_completions(*a, 4, 100000).size(), 4u);
}

TEST_F(RoutedLanes, ACutLatencyLinkFailsItsQpsAndNoOthers) {
  post_rdma(*la, 1, IBV_WR_RDMA_WRITE, m1->sge(0, 8), m2->addr(), m2->key);
  cut_latency_links();
  auto wcs = send_completions(*la, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_RETRY_EXC_ERR);
  EXPECT_TRUE(has_fatal(*h1, la->qpn, proto::FatalReason::kRouted));
  EXPECT_TRUE(has_fatal(*h2, lb->qpn, proto::FatalReason::kPeerGone));
  EXPECT_EQ(lb->state(), IBV_QPS_ERR);
  // The bulk pair carries on, both ways; rdma_cm's state with the host stays (its messages go
  // on the main links).
  post_rdma(*a, 2, IBV_WR_RDMA_WRITE, m1->sge(0, 8), m2->addr(), m2->key);
  wcs = send_completions(*a, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
  post_rdma(*b, 3, IBV_WR_RDMA_WRITE, m2->sge(0, 8), m1->addr(), m1->key);
  wcs = send_completions(*b, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
  for (FakeHost* h : {h1.get(), h2.get()})
    for (const Fatal& f : h->fatals) EXPECT_TRUE(f.qpn == la->qpn || f.qpn == lb->qpn) << f.qpn;
  EXPECT_TRUE(h1->hosts_gone.empty());
  EXPECT_TRUE(h2->hosts_gone.empty());
  EXPECT_FALSE(link_of(*h1, true, wire::kLatencyLane));
  EXPECT_TRUE(link_of(*h1, true, wire::kMainLane));
}

TEST_F(RoutedLanes, ACutMainLinkLeavesTheLatencyPairWorking) {
  post_rdma(*a, 1, IBV_WR_RDMA_WRITE, m1->sge(0, 8), m2->addr(), m2->key);
  cut_links();
  auto wcs = send_completions(*a, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_RETRY_EXC_ERR);
  EXPECT_TRUE(has_fatal(*h1, a->qpn, proto::FatalReason::kRouted));
  EXPECT_TRUE(has_fatal(*h2, b->qpn, proto::FatalReason::kPeerGone));
  // rdma_cm's state with the host went with its main links.
  ASSERT_FALSE(h1->hosts_gone.empty());
  for (uint32_t host : h1->hosts_gone) EXPECT_EQ(host, 2u);
  for (FakeQp* q : {la, lb}) {
    FakeMr* from = q == la ? m1 : m2;
    FakeMr* to = q == la ? m2 : m1;
    post_rdma(*q, 7, IBV_WR_RDMA_WRITE, from->sge(0, 8), to->addr(), to->key);
    wcs = send_completions(*q, 1);
    ASSERT_EQ(wcs.size(), 1u);
    EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
  }
  EXPECT_FALSE(has_fatal(*h1, la->qpn, proto::FatalReason::kPeerGone));
  EXPECT_FALSE(has_fatal(*h2, lb->qpn, proto::FatalReason::kPeerGone));
}

TEST_F(RoutedLanes, APeerGoneTravelsOnTheQpsLane) {
  // The latency pair's destination client dies: its PeerGone comes on the latency link (the
  // one the pair's requests came on) and fails the requester; the bulk pair is untouched.
  FakeClient& c3 = h2->client("10.2.0.9");
  FakeMr& m3 = c3.reg_mr(1 << 16, kAllAccess);
  FakeQp::Options lat;
  lat.traffic_class = kSl1;
  FakeQp& x = h1->qp(*c1, IBV_QPT_RC, lat);
  FakeQp& y = h2->qp(c3, IBV_QPT_RC, lat);
  connect(x, y);
  const uint64_t lat_in = frames_out(*h2, false, wire::kLatencyLane);
  h2->client_gone(c3);
  ASSERT_TRUE(run_until([&] { return has_fatal(*h1, x.qpn, proto::FatalReason::kPeerGone); }));
  EXPECT_GE(frames_out(*h2, false, wire::kLatencyLane) - lat_in, 1u);
  EXPECT_FALSE(has_fatal(*h1, a->qpn, proto::FatalReason::kPeerGone));
  EXPECT_FALSE(has_fatal(*h1, la->qpn, proto::FatalReason::kPeerGone));
  (void)m3;
}

TEST(LaneWire, HelloNamesAKnownLane) {
  const char* why = nullptr;
  wire::Hello hello{wire::kMagic, wire::kVersion, 1, wire::kLatencyLane, 0};
  EXPECT_TRUE(wire::check_frame(wire::Type::kHello, reinterpret_cast<const uint8_t*>(&hello), 0,
                                &why));
  hello.lane = wire::kLanes;
  EXPECT_FALSE(wire::check_frame(wire::Type::kHello, reinterpret_cast<const uint8_t*>(&hello), 0,
                                 &why));
}

// A UD QP in the latency class sends its datagrams on the latency link.
class RoutedUdLanes : public RouterPair {
 protected:
  void SetUp() override {
    latency_lane = true;
    start();
    c1 = &h1->client("10.1.0.5");
    c2 = &h2->client("10.2.0.7");
    m1 = &c1->reg_mr(1 << 16, kAllAccess);
    m2 = &c2->reg_mr(1 << 16, kAllAccess);
    FakeQp::Options lat;
    lat.traffic_class = kSl1;
    u1 = &h1->qp(*c1, IBV_QPT_UD, lat);
    u2 = &h2->qp(*c2, IBV_QPT_UD);
    for (FakeQp* q : {u1, u2}) q->set_state(IBV_QPS_RTS);
    ASSERT_EQ(connect_one(*u1, *u2), 0);
  }
  FakeClient *c1, *c2;
  FakeMr *m1, *m2;
  FakeQp *u1, *u2;
};

TEST_F(RoutedUdLanes, DatagramsOfALatencyClassQpTakeTheLatencyLink) {
  auto before = link_of(*h1, true, wire::kLatencyLane);
  auto main_before = link_of(*h1, true, wire::kMainLane);
  ASSERT_TRUE(before && main_before);
  u2->post_recv(8, {m2->sge(0, 40), m2->sge(100, 100)});
  memcpy(m1->ptr, "datagram", 8);
  ibv_sge sge = m1->sge(0, 8);
  ibv_send_wr wr = make_wr(1, IBV_WR_SEND, &sge, 1);
  wr.wr.ud.remote_qpn = u2->qpn;
  wr.wr.ud.remote_qkey = u2->opt.qkey;
  u1->post_send(wr, u2->client->ipv4);
  std::vector<RecvCompletion> rcs;
  ASSERT_TRUE(run_until([&] {
    for (auto& r : u2->poll_recv()) rcs.push_back(r);
    return !rcs.empty();
  }));
  EXPECT_EQ(rcs[0].byte_len, 40u + 8u);
  EXPECT_EQ(memcmp(m2->ptr + 100, "datagram", 8), 0);
  EXPECT_GE(link_of(*h1, true, wire::kLatencyLane)->frames_out - before->frames_out, 1u);
  EXPECT_EQ(link_of(*h1, true, wire::kMainLane)->frames_out, main_before->frames_out);
}

}  // namespace
}  // namespace vrdma::daemon::testing
