// Same-host rate limits: the meters of a pacing page (shm/pacing.h) with simulated time, shared
// between threads, and vrdmad's table of pages (daemon/core/pacing_table.h).
#include "shm/pacing.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <thread>
#include <vector>

#include "daemon/core/pacing_table.h"

namespace vrdma {
namespace {

constexpr int64_t kSecond = 1'000'000'000;

// Sends `bytes`-sized requests as fast as the page allows for `seconds` of simulated time;
// returns the bytes that went.
uint64_t send_for(shm::PacingPage& p, uint64_t bytes, int64_t start, int64_t seconds) {
  uint64_t sent = 0;
  int64_t now = start;
  for (int i = 0; i < 10'000'000 && now < start + seconds * kSecond; ++i) {
    int64_t wait = shm::pace(p, bytes, now);
    if (wait == 0)
      sent += bytes;
    else
      now += wait;
  }
  return sent;
}

TEST(Pacing, NoLimitLetsEverythingGo) {
  shm::PacingPage p{};
  EXPECT_FALSE(shm::limited(p));
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(shm::pace(p, 1 << 20, 5 * kSecond), 0);
  EXPECT_EQ(p.holds.load(), 0u);
}

TEST(Pacing, ByteRateHoldsOverTimeWithOneBurst) {
  shm::PacingPage p{};
  p.bytes_per_s = 100'000'000;  // 100 MB/s
  for (uint64_t size : {64u, 4096u, 65536u, 4u << 20}) {
    shm::PacingPage q{};
    q.bytes_per_s = p.bytes_per_s.load();
    uint64_t sent = send_for(q, size, 7 * kSecond, 3);
    // 3 s at 100 MB/s, plus what the 5 ms burst and the last request that went let by.
    EXPECT_GE(sent, 300'000'000u - size) << size;
    EXPECT_LE(sent, 300'000'000u + 500'000u + 2 * size) << size;
    EXPECT_GT(q.holds.load(), 0u);
  }
}

TEST(Pacing, MessageRateAndByteRateBothHold) {
  shm::PacingPage p{};
  p.msgs_per_s = 10'000;
  p.bytes_per_s = 1'000'000'000;  // not the one that binds with 8-byte messages
  uint64_t sent = send_for(p, 8, kSecond, 2);
  // 2 s at 10 k/s, and the 5 ms burst (50 messages).
  EXPECT_GE(sent / 8, 20'000u);
  EXPECT_LE(sent / 8, 20'051u);
  // With large messages the byte rate binds, and a message held by it does not use up the
  // message meter (the charge is given back).
  shm::PacingPage q{};
  q.msgs_per_s = 10'000;
  q.bytes_per_s = 1'000'000;
  sent = send_for(q, 10'000, kSecond, 2);
  EXPECT_NEAR(double(sent), 2'000'000.0, 20'000.0);
}

TEST(Pacing, AnIdleMeterDoesNotSaveUpMoreThanItsBurst) {
  shm::PacingPage p{};
  p.bytes_per_s = 1'000'000;  // 1 MB/s: the burst is 5 ms, 5000 bytes
  EXPECT_EQ(shm::pace(p, 100, kSecond), 0);
  // Ten seconds idle, then as much as goes at once.
  int64_t now = 11 * kSecond;
  uint64_t at_once = 0;
  while (shm::pace(p, 100, now) == 0) at_once += 100;
  EXPECT_LE(at_once, 5100u);
  EXPECT_GE(at_once, 5000u);
}

TEST(Pacing, ASenderWokenLateCatchesUp) {
  shm::PacingPage p{};
  p.bytes_per_s = 100'000'000;  // 65536 bytes: one per 655 us
  // A sender that looks again 1 ms after it was told to (a loaded host) still gets the rate.
  uint64_t sent = 0;
  int64_t now = kSecond;
  while (now < 2 * kSecond) {
    int64_t wait = shm::pace(p, 65536, now);
    if (wait == 0)
      sent += 65536;
    else
      now += wait + 1'000'000;
  }
  EXPECT_GE(sent, 100'000'000u - 65536);
  EXPECT_LE(sent, 100'000'000u + 500'000u + 2 * 65536);
}

TEST(Pacing, UnpaceGivesTheChargeBack) {
  shm::PacingPage p{};
  p.bytes_per_s = 1'000'000;
  const int64_t now = kSecond;
  int went = 0;
  while (shm::pace(p, 1000, now) == 0 && went < 100) ++went;
  EXPECT_EQ(went, 6);  // the 5 ms burst and the request that spent it
  shm::unpace(p, 1000);
  EXPECT_EQ(shm::pace(p, 1000, now), 0);
  EXPECT_GT(shm::pace(p, 1000, now), 0);
}

TEST(Pacing, ThreadsSharingAPageShareItsRate) {
  shm::PacingPage p{};
  p.msgs_per_s = 1000;  // 1 ms per message; the burst lets 6 by at one instant
  std::atomic<uint64_t> went{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      // Every thread tries at the same simulated instants: 100 ms of them, one per 0.1 ms.
      for (int64_t now = kSecond; now < kSecond + 100'000'000; now += 100'000)
        if (shm::pace(p, 1, now) == 0) went.fetch_add(1);
    });
  for (auto& th : threads) th.join();
  // One message per ms over 100 ms (and the burst), whatever the number of threads.
  EXPECT_GE(went.load(), 100u);
  EXPECT_LE(went.load(), 107u);
}

TEST(PacingTable, PagesPerContainerAndTenantWithTheRulesLimits) {
  daemon::PacingTable table;
  qos::RuleSet rules;
  std::string error;
  rules.put(*qos::parse_rule("container=10.0.0.2:rate=100M,msgs=5k", &error));
  rules.put(*qos::parse_rule("tenant=blue:rate=1G", &error));
  table.apply(rules);
  const uint32_t a = htonl(0x0a000002), b = htonl(0x0a000003);
  int fa[2], fa2[2], fb[2];
  ASSERT_EQ(table.acquire(a, "blue", fa), 0);
  ASSERT_EQ(table.acquire(a, "blue", fa2), 0);  // a second process of the same container
  ASSERT_EQ(table.acquire(b, "blue", fb), 0);
  EXPECT_EQ(fa[0], fa2[0]);
  EXPECT_EQ(fa[1], fa2[1]);
  EXPECT_NE(fa[0], fb[0]);
  EXPECT_EQ(fa[1], fb[1]);  // one tenant page
  EXPECT_EQ(table.pages(), 3u);
  // What a client maps is what vrdmad wrote.
  void* m = ::mmap(nullptr, shm::kPacingPageSize, PROT_READ | PROT_WRITE, MAP_SHARED, fa[0], 0);
  ASSERT_NE(m, MAP_FAILED);
  auto* page = static_cast<shm::PacingPage*>(m);
  EXPECT_EQ(page->magic, shm::PacingPage::kMagic);
  EXPECT_EQ(page->bytes_per_s.load(), 100'000'000u);
  EXPECT_EQ(page->msgs_per_s.load(), 5'000u);
  EXPECT_EQ(table.container_page(b, "blue")->bytes_per_s.load(), 0u);
  // A rule changed at run time reaches the page at once.
  rules.put(*qos::parse_rule("container=10.0.0.2:rate=1M", &error));
  table.apply(rules);
  EXPECT_EQ(page->bytes_per_s.load(), 1'000'000u);
  EXPECT_EQ(page->msgs_per_s.load(), 0u);
  ::munmap(m, shm::kPacingPageSize);
  // Pages go with their last client.
  table.release(a, "blue");
  EXPECT_EQ(table.pages(), 3u);
  table.release(a, "blue");
  EXPECT_EQ(table.pages(), 2u);
  EXPECT_EQ(table.container_page(a, "blue"), nullptr);
  table.release(b, "blue");
  EXPECT_EQ(table.pages(), 0u);
}

}  // namespace
}  // namespace vrdma
