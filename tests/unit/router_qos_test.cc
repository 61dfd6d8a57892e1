// The router's QoS tables over time: a container's state and counters stay while it has routed
// QPs and for qos_linger_ns after the last one went, then leave (ids are given again), and an
// address that passes to a container of another tenant is another container.
#include <algorithm>

#include "router_fake.h"

namespace vrdma::daemon::testing {
namespace {

constexpr int64_t kMs = 1'000'000;

class RoutedQosTables : public RoutedRc {
 protected:
  void SetUp() override {
    limits.qos_linger_ns = 1000 * kMs;
    RoutedRc::SetUp();
  }
  // h1's QoS flows of `addr` (bulk class, which every container that routed has).
  std::vector<Router::QosFlowInfo> flows_of(const char* addr) {
    std::vector<Router::QosFlowInfo> out;
    for (auto& f : h1->router().qos_flows())
      if (f.ipv4 == ip(addr)) out.push_back(f);
    return out;
  }
  void write_some(FakeQp& q, FakeMr& local, FakeMr& remote, int n) {
    for (int i = 0; i < n; ++i)
      post_rdma(q, i, IBV_WR_RDMA_WRITE, local.sge(0, 4096), remote.addr(), remote.key);
    auto wcs = send_completions(q, n);
    ASSERT_EQ(wcs.size(), size_t(n));
    for (auto& wc : wcs) ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
  }
};

TEST_F(RoutedQosTables, AContainersCountersLingerThenItLeaves) {
  write_some(*a, *m1, *m2, 8);
  auto f = flows_of("10.1.0.5");
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].tenant, "t");
  EXPECT_GE(f[0].counters.bytes, 8u * 4096);

  // Its last QP goes: its counters are still shown for a while.
  h1->router().qp_freed(a->qpn);
  run(5, 100 * kMs);
  f = flows_of("10.1.0.5");
  ASSERT_EQ(f.size(), 1u);
  EXPECT_GE(f[0].counters.bytes, 8u * 4096);
  // Then it leaves.
  run(10, 100 * kMs);
  EXPECT_TRUE(flows_of("10.1.0.5").empty());
}

TEST_F(RoutedQosTables, AContainerWithAQpLeftStays) {
  auto [x, y] = new_pair();
  (void)y;
  write_some(*x, *m1, *m2, 2);
  h1->router().qp_freed(a->qpn);
  run(30, 100 * kMs);
  EXPECT_EQ(flows_of("10.1.0.5").size(), 1u);
  write_some(*x, *m1, *m2, 2);
}

TEST_F(RoutedQosTables, AnAddressGivenToAnotherTenantIsAnotherContainer) {
  write_some(*a, *m1, *m2, 4);
  h1->router().qp_freed(a->qpn);
  // The address passes to a container of tenant "u" before the old one's state has gone.
  FakeClient& u1 = h1->client("10.1.0.5", "u");
  FakeClient& u2 = h2->client("10.2.0.6", "u");
  FakeMr& n1 = u1.reg_mr(1 << 20, kAllAccess);
  FakeMr& n2 = u2.reg_mr(1 << 20, kAllAccess);
  FakeQp& x = h1->qp(u1, IBV_QPT_RC);
  FakeQp& y = h2->qp(u2, IBV_QPT_RC);
  connect(x, y);
  write_some(x, n1, n2, 3);
  auto f = flows_of("10.1.0.5");
  ASSERT_EQ(f.size(), 2u);
  auto u = std::find_if(f.begin(), f.end(), [](auto& e) { return e.tenant == "u"; });
  ASSERT_NE(u, f.end());
  EXPECT_EQ(u->counters.bytes, 3u * 4096);
  // A rule for the address reaches it (and the lingering one).
  qos::NamedRule r;
  r.kind = qos::NamedRule::Kind::kContainer;
  r.ipv4 = ip("10.1.0.5");
  r.rule.weight = 7;
  h1->router().set_qos(r);
  for (auto& e : flows_of("10.1.0.5")) EXPECT_EQ(e.container.weight, 7u);
  // The old one leaves; the new one, with its QP, stays.
  run(15, 100 * kMs);
  f = flows_of("10.1.0.5");
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].tenant, "u");
}

// (A short linger: Router::connect_qp's deadline is on the real clock, which the simulated one
// must not outrun by seconds.)
class RoutedQosShortLinger : public RoutedQosTables {
 protected:
  void SetUp() override {
    limits.qos_linger_ns = 150 * kMs;
    RoutedRc::SetUp();
  }
};

TEST_F(RoutedQosShortLinger, IdsOfContainersThatLeftAreGivenAgain) {
  // Five containers come, send and go, one after the other: the scheduler's tables stay small.
  for (int i = 0; i < 5; ++i) {
    const std::string addr = "10.1.1." + std::to_string(i + 1);
    FakeClient& c = h1->client(addr.c_str());
    FakeMr& mr = c.reg_mr(1 << 20, kAllAccess);
    FakeQp& x = h1->qp(c, IBV_QPT_RC);
    FakeQp& y = h2->qp(*c2, IBV_QPT_RC);
    connect(x, y);
    write_some(x, mr, *m2, 1);
    h1->router().qp_freed(x.qpn);
    h2->router().qp_freed(y.qpn);
    run(3, 100 * kMs);
    EXPECT_TRUE(flows_of(addr.c_str()).empty());
  }
  // a's container and one other at a time: the five took turns in one row.
  EXPECT_EQ(h1->router().qos_table_size(), 2u);
  write_some(*a, *m1, *m2, 1);
}

}  // namespace
}  // namespace vrdma::daemon::testing
