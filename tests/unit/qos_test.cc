// The QoS scheduler with simulated time: a link of a fixed speed serves whatever pick() says.
#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <random>
#include <thread>
#include <vector>

#include "daemon/qos/limits.h"
#include "daemon/qos/rules.h"
#include "daemon/qos/scheduler.h"
#include "daemon/qos/token_bucket.h"

namespace vrdma::qos {
namespace {

constexpr int64_t kSecond = 1'000'000'000;

// A link of `bytes_per_s` that always has something to send for every backlogged flow; each
// flow sends messages of its own size. Returns the bytes each flow sent in `duration`.
struct SimLink {
  Scheduler& s;
  double bytes_per_s;
  std::vector<uint64_t> msg_size;  // per flow id
  int64_t now = 0;
  std::vector<uint64_t> sent;

  void run(int64_t duration) {
    sent.assign(msg_size.size(), 0);
    const int64_t end = now + duration;
    while (now < end) {
      int64_t f = s.pick(now);
      if (f < 0) {
        int64_t next = s.next_ready(now);
        if (next < 0) return;
        now = std::max(next, now + 1);
        continue;
      }
      uint64_t n = msg_size[f];
      s.charge(static_cast<uint32_t>(f), n, 1, 0);
      sent[f] += n;
      now += static_cast<int64_t>(static_cast<double>(n) / bytes_per_s * 1e9) + 1;
    }
  }
};

uint32_t bulk(uint32_t container) {
  return Scheduler::flow(container, kBulk);
}

TEST(QosTokenBucket, GivesItsRateAndNoMoreThanABurstAfterIdle) {
  TokenBucket b;
  b.set_rate(100'000'000, 0);  // 100 MB/s
  // Idle for ten seconds: still only one burst of credit.
  int64_t now = 10 * kSecond;
  b.refill(now);
  EXPECT_DOUBLE_EQ(b.tokens(), b.burst());
  EXPECT_LE(b.burst(), 100e6 * 0.05);
  uint64_t taken = 0;
  while (b.open()) {
    b.take(65536);
    taken += 65536;
  }
  EXPECT_LE(taken, static_cast<uint64_t>(b.burst()) + 65536);
  // Then the rate, over a second of 64 KiB messages.
  uint64_t second = 0;
  const int64_t end = now + kSecond;
  while (now < end) {
    b.refill(now);
    if (b.open()) {
      b.take(65536);
      second += 65536;
    } else {
      now = b.opens_at(now);
    }
  }
  EXPECT_NEAR(static_cast<double>(second), 100e6, 100e6 * 0.01);
}

TEST(QosScheduler, WeightsOneToThreeGiveOneToThreeBytes) {
  Scheduler s;
  uint32_t t = s.add_tenant({}, 0);
  uint32_t a = s.add_container(t, Rule{1, 0, 0}, 0);
  uint32_t b = s.add_container(t, Rule{3, 0, 0}, 0);
  s.backlog(bulk(a));
  s.backlog(bulk(b));
  // Different message sizes on purpose: shares are in bytes, not messages.
  SimLink link{s, 1e9, {0, 0, 0, 0}};
  link.msg_size[bulk(a)] = 65536;
  link.msg_size[bulk(b)] = 4096;
  link.run(kSecond);
  double ratio = double(link.sent[bulk(b)]) / double(link.sent[bulk(a)]);
  EXPECT_NEAR(ratio, 3.0, 0.03) << link.sent[bulk(a)] << " vs " << link.sent[bulk(b)];
}

TEST(QosScheduler, RemovedContainersAndTenantsGiveTheirIdsAgainFresh) {
  Scheduler s;
  uint32_t t = s.add_tenant({}, 0);
  uint32_t a = s.add_container(t, Rule{1, 0, 0}, 0);
  uint32_t b = s.add_container(t, Rule{1, 1000, 0}, 0);  // 1000 B/s
  s.backlog(bulk(b));
  s.charge(bulk(b), 5000, 1, 0);
  EXPECT_EQ(s.containers_of(t), 2u);
  s.remove_container(b);
  EXPECT_FALSE(s.live(b));
  EXPECT_FALSE(s.backlogged(bulk(b)));
  EXPECT_EQ(s.containers_of(t), 1u);
  s.remove_tenant(t);  // still has a container: stays
  uint32_t u = s.add_tenant({}, 0);
  EXPECT_NE(u, t);
  // b's id again, with nothing of b: no counters, no limit, no debt in its bucket.
  uint32_t c = s.add_container(u, Rule{3, 0, 0}, 0);
  EXPECT_EQ(c, b);
  EXPECT_TRUE(s.live(c));
  EXPECT_EQ(s.tenant_of(c), u);
  EXPECT_EQ(s.counters(bulk(c)).bytes, 0u);
  EXPECT_EQ(s.containers(), 2u);
  // The tables work as before with the id given again: weights 1 and 3 across tenants of
  // equal weight give 1:1 between the tenants.
  s.backlog(bulk(a));
  s.backlog(bulk(c));
  SimLink link{s, 1e9, {4096, 4096, 4096, 4096}};
  link.run(kSecond / 10);
  EXPECT_NEAR(double(link.sent[bulk(c)]) / double(link.sent[bulk(a)]), 1.0, 0.03);
  // A tenant without containers leaves; its id is given again.
  s.idle(bulk(a));
  s.remove_container(a);
  s.remove_tenant(t);
  EXPECT_EQ(s.add_tenant({}, 0), t);
}

TEST(QosScheduler, TenantsShareByWeightWhateverTheirContainers) {
  Scheduler s;
  uint32_t t1 = s.add_tenant(Rule{1, 0, 0}, 0);
  uint32_t t2 = s.add_tenant(Rule{1, 0, 0}, 0);
  // Tenant 1 has three containers, tenant 2 one: still half each.
  std::vector<uint32_t> cs{s.add_container(t1, {}, 0), s.add_container(t1, {}, 0),
                           s.add_container(t1, {}, 0), s.add_container(t2, {}, 0)};
  SimLink link{s, 1e9, std::vector<uint64_t>(s.containers() * kClasses, 8192)};
  for (uint32_t c : cs) s.backlog(bulk(c));
  link.run(kSecond);
  uint64_t t1_bytes = link.sent[bulk(cs[0])] + link.sent[bulk(cs[1])] + link.sent[bulk(cs[2])];
  EXPECT_NEAR(double(t1_bytes) / double(link.sent[bulk(cs[3])]), 1.0, 0.01);
  // And the three share tenant 1's half equally.
  EXPECT_NEAR(double(link.sent[bulk(cs[0])]) / double(link.sent[bulk(cs[2])]), 1.0, 0.01);
}

TEST(QosScheduler, ARateLimitGivesItsRate) {
  Scheduler s;
  uint32_t t = s.add_tenant({}, 0);
  uint32_t limited = s.add_container(t, Rule{1, 100'000'000, 0}, 0);
  uint32_t free = s.add_container(t, Rule{1, 0, 0}, 0);
  s.backlog(bulk(limited));
  s.backlog(bulk(free));
  SimLink link{s, 1e9, std::vector<uint64_t>(s.containers() * kClasses, 65536)};
  link.run(2 * kSecond);
  // 100 MB/s for two seconds (plus at most the first burst), the rest to the other.
  EXPECT_NEAR(double(link.sent[bulk(limited)]), 200e6, 200e6 * 0.02);
  EXPECT_GT(link.sent[bulk(free)], 1'700'000'000u);
  EXPECT_GT(s.counters(bulk(limited)).holds, 0u);
}

// Two router threads' schedulers, each with its own link, carry QPs of one container limited
// to 100 MB/s: holding the same limits (LimitTable), they give it 100 MB/s together, not each.
TEST(QosLimits, SchedulersOfTwoThreadsShareOneBudget) {
  LimitTable table;
  const uint32_t ip = inet_addr("10.1.0.2");
  Scheduler a, b;
  const Rule limited{1, 100'000'000, 0};
  uint32_t ca = a.add_container(a.add_tenant({}, 0, table.tenant("red")), limited, 0,
                                table.container(ip, "red"));
  uint32_t cb = b.add_container(b.add_tenant({}, 0, table.tenant("red")), limited, 0,
                                table.container(ip, "red"));
  a.backlog(bulk(ca));
  b.backlog(bulk(cb));
  // Both links 1 GB/s, served in turn a message at a time, on one simulated clock.
  uint64_t sent = 0;
  int64_t now = 0, at_a = 0, at_b = 0;
  const uint64_t kMsg = 65536;
  // Which thread looks first is a coin toss each turn, as two threads' passes interleave.
  std::minstd_rand coin(7);
  while (now < 2 * kSecond) {
    const bool a_first = coin() & 1;
    bool any = false;
    auto ta = std::tuple{&a, ca, &at_a}, tb = std::tuple{&b, cb, &at_b};
    for (auto [s, c, at] : {a_first ? ta : tb, a_first ? tb : ta}) {
      if (*at > now || s->pick(now) < 0) continue;
      s->charge(bulk(c), kMsg, 1, 0);
      sent += kMsg;
      *at = now + static_cast<int64_t>(kMsg);  // 1 ns per byte
      any = true;
    }
    int64_t next = std::min(at_a, at_b);
    if (!any) next = std::max(next, std::min(a.next_ready(now), b.next_ready(now)));
    now = std::max(now + 1, next);
  }
  EXPECT_NEAR(double(sent), 200e6, 200e6 * 0.02);
  EXPECT_GT(a.counters(bulk(ca)).bytes, 50'000'000u);  // both carried a share
  EXPECT_GT(b.counters(bulk(cb)).bytes, 50'000'000u);
  // A container or tenant no scheduler holds any more leaves the table: the next is fresh.
  a.remove_container(ca);
  b.remove_container(cb);
  EXPECT_TRUE(table.container(ip, "red")->bytes.rate() == 0);
}

// Two threads taking from one bucket at once, on the real clock: never more than its rate over
// the time, plus a burst and a message each.
TEST(QosTokenBucket, TwoThreadsTakingAtOnceGetNoMoreThanItsRate) {
  TokenBucket b;
  const uint64_t kRate = 50'000'000, kMsg = 65536;
  auto clock = [] {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  };
  const int64_t start = clock();
  b.set_rate(kRate, start);
  std::atomic<uint64_t> taken{0};
  auto work = [&] {
    for (int64_t now = clock(); now - start < 300'000'000; now = clock()) {
      b.refill(now);
      if (b.open()) {
        b.take(kMsg);
        taken += kMsg;
      }
    }
  };
  std::thread t1(work), t2(work);
  t1.join();
  t2.join();
  const double seconds = double(clock() - start) / 1e9;
  EXPECT_GT(taken.load(), 0u);
  EXPECT_LE(double(taken.load()), kRate * seconds + b.burst() + 2 * kMsg);
}

TEST(QosScheduler, AMessageRateLimitGivesItsRate) {
  Scheduler s;
  uint32_t t = s.add_tenant({}, 0);
  uint32_t c = s.add_container(t, Rule{1, 0, 10'000}, 0);
  s.backlog(bulk(c));
  SimLink link{s, 1e9, std::vector<uint64_t>(s.containers() * kClasses, 64)};
  link.run(kSecond);
  EXPECT_NEAR(double(s.counters(bulk(c)).msgs), 10'000, 10'000 * 0.02);
}

TEST(QosScheduler, ATenantLimitCoversItsContainers) {
  Scheduler s;
  uint32_t t = s.add_tenant(Rule{1, 50'000'000, 0}, 0);
  uint32_t a = s.add_container(t, {}, 0), b = s.add_container(t, {}, 0);
  s.backlog(bulk(a));
  s.backlog(bulk(b));
  SimLink link{s, 1e9, std::vector<uint64_t>(s.containers() * kClasses, 16384)};
  link.run(2 * kSecond);
  EXPECT_NEAR(double(link.sent[bulk(a)] + link.sent[bulk(b)]), 100e6, 100e6 * 0.03);
}

TEST(QosScheduler, TheLatencyClassAlwaysGoesFirst) {
  Scheduler s;
  uint32_t t = s.add_tenant({}, 0);
  uint32_t heavy = s.add_container(t, Rule{1000, 0, 0}, 0);
  uint32_t light = s.add_container(t, Rule{1, 0, 0}, 0);
  const uint32_t lat = Scheduler::flow(light, kLatency);
  s.backlog(bulk(heavy));
  int64_t now = 0;
  for (int i = 0; i < 1000; ++i) {
    // Every few bulk messages the latency flow gets one message to send: it is picked at once,
    // although its container's weight is a thousandth of the other's.
    if (i % 7 == 0) s.backlog(lat);
    int64_t f = s.pick(now);
    ASSERT_GE(f, 0);
    if (i % 7 == 0) {
      ASSERT_EQ(f, lat) << "at message " << i;
      s.charge(lat, 64, 1, 0);
      s.idle(lat);
    } else {
      ASSERT_EQ(f, bulk(heavy));
      s.charge(bulk(heavy), 65536, 1, 0);
    }
    now += 1000;
  }
}

TEST(QosScheduler, IdleFlowsDoNotAccumulateCredit) {
  Scheduler s;
  uint32_t t = s.add_tenant({}, 0);
  uint32_t busy = s.add_container(t, {}, 0), sleeper = s.add_container(t, {}, 0);
  s.backlog(bulk(busy));
  SimLink link{s, 1e9, std::vector<uint64_t>(s.containers() * kClasses, 65536)};
  link.run(kSecond);  // the sleeper is idle for a whole second
  s.backlog(bulk(sleeper));
  // From now on the two share equally from the first message: the sleeper does not get the
  // link to itself to make up for the second it was idle.
  uint64_t in_a_row = 0;
  for (int i = 0; i < 1000; ++i) {
    int64_t f = s.pick(link.now);
    s.charge(static_cast<uint32_t>(f), 65536, 1, 0);
    if (f == bulk(sleeper)) {
      if (++in_a_row > 2) FAIL() << "the sleeper took " << in_a_row << " messages in a row";
    } else {
      in_a_row = 0;
    }
    link.now += 65536;
  }
  EXPECT_NEAR(double(s.counters(bulk(sleeper)).msgs), 500, 2);
}

TEST(QosScheduler, IdleRateLimitedFlowsGetOneBurstOnly) {
  Scheduler s;
  uint32_t t = s.add_tenant({}, 0);
  uint32_t c = s.add_container(t, Rule{1, 100'000'000, 0}, 0);
  // Idle for a minute, then a flood: what goes at once is one burst, not a minute's worth.
  int64_t now = 60 * kSecond;
  s.backlog(bulk(c));
  uint64_t sent = 0;
  while (s.pick(now) >= 0) {
    s.charge(bulk(c), 65536, 1, 0);
    sent += 65536;
    ASSERT_LT(sent, 100'000'000u);
  }
  EXPECT_LE(sent, 100e6 * TokenBucket::kBurstNs / 1e9 + 65536);
  EXPECT_GT(s.next_ready(now), now);
}

TEST(QosScheduler, EqualFlowsAreFair) {
  Scheduler s;
  uint32_t t = s.add_tenant({}, 0);
  std::vector<uint32_t> cs;
  for (int i = 0; i < 8; ++i) cs.push_back(s.add_container(t, {}, 0));
  SimLink link{s, 1e9, std::vector<uint64_t>(s.containers() * kClasses, 0)};
  // Mixed message sizes, equal weights.
  for (size_t i = 0; i < cs.size(); ++i) {
    link.msg_size[bulk(cs[i])] = 1024u << (i % 7);
    s.backlog(bulk(cs[i]));
  }
  link.run(kSecond);
  double sum = 0, sq = 0;
  for (uint32_t c : cs) {
    double x = double(link.sent[bulk(c)]);
    sum += x;
    sq += x * x;
  }
  double jain = sum * sum / (double(cs.size()) * sq);
  EXPECT_GE(jain, 0.999);
}

TEST(QosScheduler, ChangedWeightsApplyAtOnce) {
  Scheduler s;
  uint32_t t = s.add_tenant({}, 0);
  uint32_t a = s.add_container(t, {}, 0), b = s.add_container(t, {}, 0);
  s.backlog(bulk(a));
  s.backlog(bulk(b));
  SimLink link{s, 1e9, std::vector<uint64_t>(s.containers() * kClasses, 8192)};
  link.run(kSecond / 2);
  EXPECT_NEAR(double(link.sent[bulk(a)]) / double(link.sent[bulk(b)]), 1.0, 0.02);
  s.set_container_rule(a, Rule{4, 0, 0}, link.now);
  link.run(kSecond / 2);
  EXPECT_NEAR(double(link.sent[bulk(a)]) / double(link.sent[bulk(b)]), 4.0, 0.1);
}

TEST(QosScheduler, CountsDelayAndMessages) {
  Scheduler s;
  uint32_t t = s.add_tenant({}, 0);
  uint32_t c = s.add_container(t, {}, 0);
  s.backlog(bulk(c));
  s.charge(bulk(c), 100, 2, 3000);
  const FlowCounters& k = s.counters(bulk(c));
  EXPECT_EQ(k.bytes, 100u);
  EXPECT_EQ(k.msgs, 2u);
  EXPECT_EQ(k.delay_ns_sum, 3000u);
  EXPECT_EQ(k.delay_ns_max, 1500u);
  s.idle(bulk(c));
  EXPECT_EQ(s.pick(0), -1);
  EXPECT_EQ(s.next_ready(0), -1);
}

TEST(QosRules, ParseAndPrint) {
  std::string err;
  auto r = parse_rule("container=10.0.0.2:weight=3,rate=100M,msgs=50k", &err);
  ASSERT_TRUE(r) << err;
  EXPECT_EQ(r->kind, NamedRule::Kind::kContainer);
  EXPECT_EQ(r->ipv4, inet_addr("10.0.0.2"));
  EXPECT_EQ(r->rule, (Rule{3, 100'000'000, 50'000}));
  EXPECT_EQ(rule_text(*r), "container=10.0.0.2:weight=3,rate=100M,msgs=50k");
  r = parse_rule("tenant=blue:weight=2", &err);
  ASSERT_TRUE(r) << err;
  EXPECT_EQ(r->tenant, "blue");
  EXPECT_EQ(r->rule.weight, 2u);
  r = parse_rule("tenant=blue", &err);
  ASSERT_TRUE(r) << err;
  EXPECT_EQ(r->rule, Rule{});
  for (const char* bad :
       {"", "container", "container=10.0.0.300:weight=1", "pod=x:weight=1", "tenant=:weight=1",
        "tenant=a:weight=0", "tenant=a:weight=1001", "tenant=a:rate=fast", "tenant=a:speed=1",
        "tenant=a:weight", "tenant=a:rate=99999999999999999999", "tenant=a b:weight=1",
        "tenant=a:rate=1Q"}) {
    EXPECT_FALSE(parse_rule(bad, &err)) << bad;
    EXPECT_NE(err.find("QoS rule"), std::string::npos);
  }
}

TEST(QosRules, TheLastRuleForOneNameWins) {
  RuleSet set;
  std::string err;
  set.put(*parse_rule("container=10.0.0.2:weight=3", &err));
  set.put(*parse_rule("tenant=blue:rate=1G", &err));
  set.put(*parse_rule("container=10.0.0.2:weight=5", &err));
  EXPECT_EQ(set.rules().size(), 2u);
  EXPECT_EQ(set.container(inet_addr("10.0.0.2")).weight, 5u);
  EXPECT_EQ(set.container(inet_addr("10.0.0.3")), Rule{});
  EXPECT_EQ(set.tenant("blue").bytes_per_s, 1'000'000'000u);
  EXPECT_EQ(set.tenant("red"), Rule{});
}

}  // namespace
}  // namespace vrdma::qos
