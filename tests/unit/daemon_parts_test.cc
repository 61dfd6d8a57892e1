// Unit tests of the daemon's pure parts: decode, registry, tenants, status rendering.
#include <arpa/inet.h>
#include <errno.h>
#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "common/cpu_list.h"
#include "common/log.h"
#include "daemon/identity/client_identity.h"
#include "daemon/core/config.h"
#include "daemon/core/decode.h"
#include "daemon/registry/registry.h"
#include "daemon/core/status.h"
#include "shm/layout.h"

namespace vrdma::daemon {
namespace {

using proto::Op;

std::vector<uint8_t> wire(Op op, const void* payload, size_t len, uint32_t magic = proto::kMagic) {
  proto::Header h{magic, static_cast<uint16_t>(op), 0, 42, 0, static_cast<uint32_t>(len)};
  std::vector<uint8_t> out(sizeof(h) + len);
  std::memcpy(out.data(), &h, sizeof(h));
  if (len) std::memcpy(out.data() + sizeof(h), payload, len);
  return out;
}

template <typename T>
Decoded dec(Op op, const T& body, int nfds = 0) {
  auto w = wire(op, &body, sizeof(body));
  return decode_wire(w, nfds, false);
}

TEST(DaemonDecode, AcceptsEveryRequest) {
  proto::HelloReq hello{proto::kVersion, 1};
  Decoded d = dec(Op::kHello, hello);
  ASSERT_EQ(d.verdict, DecodeVerdict::kOk);
  EXPECT_EQ(d.seq, 42u);
  EXPECT_EQ(d.op, Op::kHello);
  uint32_t kind = 0;
  d.visit([&](const auto& req) {
    if constexpr (std::is_same_v<std::decay_t<decltype(req)>, proto::HelloReq>) kind = req.kind;
  });
  EXPECT_EQ(kind, 1u);

  proto::PutFdReq put{0, 1, shm::kArenaSize};
  EXPECT_EQ(dec(Op::kPutFd, put, 1).verdict, DecodeVerdict::kOk);
  EXPECT_EQ(dec(Op::kGetFd, proto::GetFdReq{1, 2}).verdict, DecodeVerdict::kOk);
  EXPECT_EQ(dec(Op::kAllocQpn, proto::AllocQpnReq{4, 128, 2}).verdict, DecodeVerdict::kOk);
  EXPECT_EQ(dec(Op::kSetQpObject, proto::SetQpObjectReq{0x100, 3}).verdict, DecodeVerdict::kOk);
  EXPECT_EQ(dec(Op::kGetMr, proto::GetMrReq{1, 0x100, 5, IBV_ACCESS_REMOTE_READ}).verdict,
            DecodeVerdict::kOk);
  EXPECT_EQ(dec(Op::kFreeQpn, proto::FreeQpnReq{0x100}).verdict, DecodeVerdict::kOk);
  EXPECT_EQ(dec(Op::kConnectQp, proto::ConnectQpReq{}).verdict, DecodeVerdict::kOk);
  EXPECT_EQ(dec(Op::kAllocKey, proto::AllocKeyReq{4095, 0, 1}).verdict, DecodeVerdict::kOk);
  EXPECT_EQ(dec(Op::kFreeKey, proto::FreeKeyReq{1}).verdict, DecodeVerdict::kOk);
  EXPECT_EQ(dec(Op::kDropFd, proto::DropFdReq{3}).verdict, DecodeVerdict::kOk);
  auto st = wire(Op::kStatus, nullptr, 0);
  EXPECT_EQ(decode_wire(st, 0, false).verdict, DecodeVerdict::kOk);
}

TEST(DaemonDecode, FramingErrorsDrop) {
  auto ok = wire(Op::kStatus, nullptr, 0);
  EXPECT_EQ(decode_wire(ok, 0, true).verdict, DecodeVerdict::kDrop) << "truncated";
  auto bad_magic = wire(Op::kStatus, nullptr, 0, 0x12345678);
  EXPECT_EQ(decode_wire(bad_magic, 0, false).verdict, DecodeVerdict::kDrop);
  EXPECT_EQ(decode_wire(std::span<const uint8_t>(ok.data(), 10), 0, false).verdict, DecodeVerdict::kDrop);
  auto lying = ok;
  lying[16] = 8;  // len = 8 with no payload
  EXPECT_EQ(decode_wire(lying, 0, false).verdict, DecodeVerdict::kDrop);
  std::vector<uint8_t> big(proto::kMaxMessage, 0);
  auto huge = wire(Op::kStatus, big.data(), big.size());
  EXPECT_EQ(decode_wire(huge, 0, false).verdict, DecodeVerdict::kDrop);
}

TEST(DaemonDecode, ProtocolErrors) {
  uint8_t three[3] = {};
  auto w = wire(Op::kHello, three, 3);
  Decoded d = decode_wire(w, 0, false);
  EXPECT_EQ(d.verdict, DecodeVerdict::kMalformed);
  EXPECT_EQ(d.error, EINVAL);
  EXPECT_EQ(d.seq, 42u);
  auto unknown = wire(static_cast<Op>(999), nullptr, 0);
  EXPECT_EQ(decode_wire(unknown, 0, false).verdict, DecodeVerdict::kMalformed);
  auto fatal = wire(Op::kQpFatal, nullptr, 0);
  EXPECT_EQ(decode_wire(fatal, 0, false).verdict, DecodeVerdict::kMalformed);
  proto::PutFdReq put{0, 1, shm::kArenaSize};
  EXPECT_EQ(dec(Op::kPutFd, put, 0).verdict, DecodeVerdict::kMalformed) << "no descriptor";
  EXPECT_EQ(dec(Op::kPutFd, put, 2).verdict, DecodeVerdict::kMalformed) << "two descriptors";
  EXPECT_EQ(dec(Op::kFreeKey, proto::FreeKeyReq{1}, 1).verdict, DecodeVerdict::kMalformed);
}

TEST(DaemonDecode, FieldValidation) {
  EXPECT_EQ(dec(Op::kHello, proto::HelloReq{proto::kVersion + 1, 1}).error, EPROTONOSUPPORT);
  EXPECT_EQ(dec(Op::kHello, proto::HelloReq{proto::kVersion - 1, 1}).error, EPROTONOSUPPORT);
  EXPECT_EQ(dec(Op::kHello, proto::HelloReq{proto::kVersion, 3}).verdict,
            DecodeVerdict::kInvalid);
  EXPECT_EQ(dec(Op::kPutFd, proto::PutFdReq{0, 2, 10}, 1).verdict, DecodeVerdict::kInvalid);
  EXPECT_EQ(dec(Op::kPutFd, proto::PutFdReq{1, 1, 4096}, 1).verdict, DecodeVerdict::kInvalid);
  EXPECT_EQ(dec(Op::kPutFd, proto::PutFdReq{0, 1, shm::kMaxArenaSize + 1}, 1).verdict,
            DecodeVerdict::kInvalid);
  EXPECT_EQ(dec(Op::kPutFd, proto::PutFdReq{1, 2, 4096}, 1).verdict, DecodeVerdict::kInvalid)
      << "fd 1 is the key table";
  EXPECT_EQ(dec(Op::kPutFd, proto::PutFdReq{2, 6, 4096}, 1).verdict, DecodeVerdict::kInvalid)
      << "the key table is fd 1";
  EXPECT_EQ(dec(Op::kPutFd, proto::PutFdReq{2, 3, 0, proto::kSealWrites}, 1).verdict,
            DecodeVerdict::kInvalid)
      << "only memory is sealed against writes";
  EXPECT_EQ(dec(Op::kPutFd, proto::PutFdReq{0, 1, 8}, 1).verdict, DecodeVerdict::kInvalid);
  EXPECT_EQ(dec(Op::kPutFd, proto::PutFdReq{3, 9, 8}, 1).verdict, DecodeVerdict::kInvalid);
  EXPECT_EQ(dec(Op::kAllocQpn, proto::AllocQpnReq{1, 128}).verdict, DecodeVerdict::kInvalid);
  EXPECT_EQ(dec(Op::kAllocQpn, proto::AllocQpnReq{2, 100}).verdict, DecodeVerdict::kInvalid);
  EXPECT_EQ(dec(Op::kAllocQpn, proto::AllocQpnReq{2, 128, 1}).verdict, DecodeVerdict::kInvalid)
      << "the key table is no QP object";
  EXPECT_EQ(dec(Op::kAllocKey, proto::AllocKeyReq{shm::kMrSlots, 0, 1}).verdict, DecodeVerdict::kInvalid);
  EXPECT_EQ(dec(Op::kGetMr, proto::GetMrReq{1, 0x100, 5, 0}).verdict, DecodeVerdict::kInvalid);
  EXPECT_EQ(dec(Op::kGetMr,
                proto::GetMrReq{1, 0x100, 5, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ})
                .verdict,
            DecodeVerdict::kInvalid);
  EXPECT_EQ(dec(Op::kGetMr, proto::GetMrReq{1, 0x100, 0, IBV_ACCESS_REMOTE_READ}).verdict,
            DecodeVerdict::kInvalid);
}

TEST(DaemonRegistry, QpnsAreRandomUniqueAndOwned) {
  Registry r;
  uint32_t a = 0, b = 0;
  ASSERT_EQ(r.alloc_qpn(1, 2, 64, 100, &a), 0);
  ASSERT_EQ(r.alloc_qpn(2, 2, 64, 100, &b), 0);
  EXPECT_EQ(r.free_qpn(2, a), EPERM);
  EXPECT_EQ(r.free_qpn(1, a), 0);
  EXPECT_EQ(r.free_qpn(1, a), ENOENT);
  uint32_t q = 0;
  ASSERT_EQ(r.alloc_qpn(3, 2, 64, 2, &q), 0);
  ASSERT_EQ(r.alloc_qpn(3, 2, 64, 2, &q), 0);
  EXPECT_EQ(r.alloc_qpn(3, 2, 64, 2, &q), EDQUOT);

  // 2000 QPNs: all in range and distinct, and no two in a row are neighbours: the next QPN
  // cannot be told from the last one.
  std::set<uint32_t> seen;
  uint32_t prev = 0;
  int neighbours = 0;
  for (int i = 0; i < 2000; ++i) {
    ASSERT_EQ(r.alloc_qpn(4, 2, 64, 1 << 30, &q), 0);
    EXPECT_GE(q, Registry::kFirstQpn);
    EXPECT_LE(q, Registry::kLastQpn);
    EXPECT_TRUE(seen.insert(q).second) << "duplicate QPN " << q;
    if (i && (q == prev + 1 || q + 1 == prev)) ++neighbours;
    prev = q;
  }
  EXPECT_LE(neighbours, 1);
  // They spread over the whole space.
  EXPECT_LT(*seen.begin(), Registry::kFirstQpn + (Registry::kLastQpn >> 4));
  EXPECT_GT(*seen.rbegin(), Registry::kLastQpn - (Registry::kLastQpn >> 4));
}

TEST(DaemonRegistry, RandomQpnsSkipLiveOnesAndGiveUpBounded) {
  // A source that keeps drawing the same numbers: live ones are skipped, and after
  // kQpnDraws draws of live numbers the allocation fails instead of scanning.
  std::vector<uint32_t> draws;
  size_t pos = 0;
  Registry r([&] { return pos < draws.size() ? draws[pos++] : 7u; });
  constexpr uint32_t kSpace = Registry::kLastQpn - Registry::kFirstQpn + 1;
  uint32_t q = 0;
  draws = {5};
  ASSERT_EQ(r.alloc_qpn(1, 2, 64, 100, &q), 0);
  EXPECT_EQ(q, Registry::kFirstQpn + 5);
  draws = {5, 5 + kSpace, 9};  // both map to the live QPN
  pos = 0;
  ASSERT_EQ(r.alloc_qpn(1, 2, 64, 100, &q), 0);
  EXPECT_EQ(q, Registry::kFirstQpn + 9);
  EXPECT_EQ(pos, 3u);
  draws.assign(Registry::kQpnDraws, 5);
  pos = 0;
  EXPECT_EQ(r.alloc_qpn(1, 2, 64, 100, &q), ENOSPC);
  EXPECT_EQ(pos, static_cast<size_t>(Registry::kQpnDraws));
}

TEST(DaemonRegistry, LinksAndDeathNotices) {
  vrdma::daemon::Registry r;
  uint32_t a1, a2, b1, b2, c1;
  r.alloc_qpn(1, 2, 64, 100, &a1);
  r.alloc_qpn(1, 4, 128, 100, &a2);
  r.alloc_qpn(2, 2, 64, 100, &b1);
  r.alloc_qpn(2, 4, 128, 100, &b2);
  r.alloc_qpn(3, 4, 64, 100, &c1);
  r.link(b1, a1);
  r.link(a1, b1);
  r.link(b2, a2);
  r.link(c1, a2);
  r.link(c1, b2);  // UD: several destinations
  r.link(a2, a2);  // loopback to itself
  EXPECT_TRUE(r.has_link_to(2, 1));
  EXPECT_TRUE(r.has_link_to(3, 1));
  EXPECT_TRUE(r.has_link_to(3, 2));
  EXPECT_FALSE(r.has_link_to(1, 3));
  auto notices = r.notices_for_death(1);
  std::set<std::pair<uint32_t, uint32_t>> got;
  for (auto n : notices) got.emplace(n.client, n.qpn);
  // Only the connected QP fails: UD QPs (b2, c1) lose nothing when a destination goes.
  EXPECT_EQ(got, (std::set<std::pair<uint32_t, uint32_t>>{{2, b1}}));
  r.remove_client(1);
  EXPECT_EQ(r.find_qp(a1), nullptr);
  EXPECT_FALSE(r.has_link_to(2, 1));
  EXPECT_FALSE(r.has_link_to(3, 1));
  EXPECT_TRUE(r.has_link_to(3, 2));
  EXPECT_TRUE(r.find_qp(b1)->out.empty());
  EXPECT_TRUE(r.find_qp(b1)->in.empty());
  EXPECT_EQ(r.qp_count(), 3u);
}

TEST(DaemonRegistry, KeysUseTheGivenRandomBits) {
  uint32_t next = 0;
  Registry r([&] { return next++; });  // 0, 1, 2...: 0 is never a key
  uint32_t k = 0;
  ASSERT_EQ(r.alloc_key(1, 7, 0, 0, 10, &k), 0);
  EXPECT_EQ(k, 1u) << "the key is the random word itself, the slot is not in it";
  EXPECT_EQ(r.find_key(k)->index, 7u);
  next = 1;  // the same bits again: must not produce a duplicate
  ASSERT_EQ(r.alloc_key(1, 7, 0, 0, 10, &k), 0);
  EXPECT_EQ(k, 2u);
  EXPECT_EQ(r.free_key(2, k), ENOENT);
  EXPECT_EQ(r.free_key(1, k), 0);
  EXPECT_EQ(r.alloc_key(1, shm::kMrSlots, 0, 0, 10, &k), EINVAL);
  EXPECT_EQ(r.alloc_key(1, 0, 0, 0, 10, &k), EINVAL) << "slot 0 is never used";
  for (int i = 0; i < 9; ++i) ASSERT_EQ(r.alloc_key(1, 1, 0, 0, 10, &k), 0);
  EXPECT_EQ(r.alloc_key(1, 1, 0, 0, 10, &k), EDQUOT);
}

TEST(DaemonConfig, TenantRules) {
  std::string err;
  auto t = parse_tenant_rule("blue=10.1.0.0/16", &err);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->name, "blue");
  EXPECT_TRUE(t->contains(ntohl(inet_addr("10.1.200.3"))));
  EXPECT_FALSE(t->contains(ntohl(inet_addr("10.2.0.1"))));
  auto host = parse_tenant_rule("one=192.0.2.9", &err);
  ASSERT_TRUE(host);
  EXPECT_EQ(host->mask, 0xffffffffu);
  auto all = parse_tenant_rule("all=0.0.0.0/0", &err);
  ASSERT_TRUE(all);
  EXPECT_TRUE(all->contains(12345));
  for (const char* bad : {"noequals", "=10.0.0.0/8", "x=10.0.0.0/33", "x=10.0.0/8", "x=1.2.3.4/",
                          "x y=1.2.3.4", "x=1.2.3.4/8x"})
    EXPECT_FALSE(parse_tenant_rule(bad, &err)) << bad;
  std::vector<TenantRule> rules{*t, *all};
  EXPECT_EQ(tenant_for(rules, inet_addr("10.1.0.1")), "blue");
  EXPECT_EQ(tenant_for(rules, inet_addr("10.9.0.1")), "all");
  EXPECT_EQ(tenant_for({}, inet_addr("10.9.0.1")), "@10.9.0.1") << "a tenant of its own";
  EXPECT_EQ(own_tenant(inet_addr("10.9.0.2")), "@10.9.0.2");
  EXPECT_FALSE(parse_tenant_rule("@10.9.0.1=10.9.0.1/32", &err)) << "'@' marks own tenants";
}

TEST(DaemonIdentity, NodeGuidFromAddress) {
  uint64_t g = node_guid_for(inet_addr("10.0.1.2"));
  uint8_t b[8];
  std::memcpy(b, &g, 8);
  const uint8_t want[8] = {0x02, 0x76, 0x72, 0x64, 10, 0, 1, 2};
  EXPECT_EQ(std::memcmp(b, want, 8), 0);
}

TEST(DaemonStatus, NamesAndTruncation) {
  EXPECT_STREQ(qp_state_name(IBV_QPS_RTS), "RTS");
  EXPECT_STREQ(qp_state_name(IBV_QPS_ERR), "ERR");
  EXPECT_STREQ(qp_state_name(99), "UNKNOWN");
  EXPECT_STREQ(qp_type_name(3), "UC");

  StatusInput in;
  in.socket = "/x";
  for (uint32_t c = 1; c <= 3000; ++c) {
    StatusClient sc;
    sc.id = c;
    sc.container = "container-with-a-long-name-" + std::to_string(c);
    sc.tenant = "t";
    sc.kind = "verbs";
    for (uint32_t q = 0; q < 3; ++q) sc.qps.push_back({c * 8 + q, 2, true, 3});
    in.clients.push_back(sc);
  }
  std::string text = render_status(in, 4000);
  ASSERT_LE(text.size(), 4000u);
  auto j = nlohmann::json::parse(text);
  EXPECT_EQ(j["truncated"], true);
  EXPECT_EQ(j["totals"]["clients"], 3000);
  EXPECT_EQ(j["totals"]["qps"], 9000);
  EXPECT_GT(j["clients"].size(), 0u);

  StatusInput small;
  small.clients.push_back({});
  auto s = nlohmann::json::parse(render_status(small, 4000));
  EXPECT_EQ(s["truncated"], false);
}

TEST(DaemonRegistry, RecordsWhatAQpsRtrNames) {
  vrdma::daemon::Registry r;
  uint32_t a = 0, b = 0;
  ASSERT_EQ(r.alloc_qpn(1, 2, 64, 100, &a), 0);
  ASSERT_EQ(r.alloc_qpn(2, 2, 64, 100, &b), 0);
  const uint32_t ip = inet_addr("10.77.1.10");
  EXPECT_FALSE(r.names_peer(a, ip, 0x777)) << "nothing named yet";
  r.set_peer(a, ip, 0x777);
  EXPECT_TRUE(r.names_peer(a, ip, 0x777));
  EXPECT_FALSE(r.names_peer(a, ip, 0x778)) << "another QPN";
  EXPECT_FALSE(r.names_peer(a, inet_addr("10.77.1.11"), 0x777)) << "another address";
  EXPECT_FALSE(r.names_peer(b, ip, 0x777)) << "another QP";
  r.set_peer(a, ip, 0x778);  // an RTR again, to another destination
  EXPECT_FALSE(r.names_peer(a, ip, 0x777));
  EXPECT_TRUE(r.names_peer(a, ip, 0x778));
  r.remove_client(1);
  EXPECT_FALSE(r.names_peer(a, ip, 0x778)) << "the QP is gone";
}

// CPU lists (--router-cpus): the kernel's list format in, ascending CPUs out, and back.
TEST(CpuList, ParsesItemsAndRangesAscendingWithoutRepeats) {
  std::string error;
  auto cpus = parse_cpu_list("6,0-3,2,10-11", &error);
  ASSERT_TRUE(cpus) << error;
  EXPECT_EQ(*cpus, (std::vector<uint32_t>{0, 1, 2, 3, 6, 10, 11}));
  EXPECT_EQ(cpu_list_text(*cpus), "0-3,6,10-11");
  EXPECT_EQ(cpu_list_text({5}), "5");
  EXPECT_EQ(cpu_list_text({}), "");
  EXPECT_EQ(*parse_cpu_list("1023", &error), (std::vector<uint32_t>{1023}));
}

TEST(CpuList, RefusesWhatIsNotAList) {
  struct Case {
    const char* text;
    const char* what;
  };
  const Case cases[] = {
      {"", "an empty CPU list"},       {"0,", "not ''"},         {",1", "not ''"},
      {"a", "not 'a'"},                {"1-", "not '1-'"},       {"-1", "not '-1'"},
      {"3-1", "runs backwards"},       {"0-1-2", "not '0-1-2'"}, {"1024", "below 1024"},
      {"0-99999", "not '0-99999'"},    {" 1", "not ' 1'"},       {"+1", "not '+1'"},
  };
  for (const auto& c : cases) {
    std::string error;
    EXPECT_FALSE(parse_cpu_list(c.text, &error)) << c.text;
    EXPECT_NE(error.find(c.what), std::string::npos) << c.text << ": " << error;
  }
}

TEST(CpuList, AllowedCpusIncludeTheOneThisThreadRunsOn) {
  const std::vector<uint32_t> allowed = allowed_cpus();
  ASSERT_FALSE(allowed.empty());
  const int cpu = sched_getcpu();
  ASSERT_GE(cpu, 0);
  EXPECT_TRUE(std::binary_search(allowed.begin(), allowed.end(), static_cast<uint32_t>(cpu)));
}

}  // namespace
}  // namespace vrdma::daemon

// A log statement a client can provoke writes a burst per window, then holds back and counts;
// the first line of the next window says how many were held back.
TEST(LogLimit, BurstThenCountThenReport) {
  vrdma::LogLimit limit;
  uint64_t held = 99;
  const int64_t t0 = 5'000'000'000;
  for (uint32_t i = 0; i < vrdma::LogLimit::kBurst; ++i) {
    ASSERT_TRUE(limit.admit(t0 + i, &held)) << i;
    EXPECT_EQ(held, 0u);
  }
  for (int i = 0; i < 1000; ++i) EXPECT_FALSE(limit.admit(t0 + 100 + i, &held));
  // Still the same window just before its end.
  EXPECT_FALSE(limit.admit(t0 + vrdma::LogLimit::kWindowNs - 1, &held));
  ASSERT_TRUE(limit.admit(t0 + vrdma::LogLimit::kWindowNs, &held));
  EXPECT_EQ(held, 1001u);
  ASSERT_TRUE(limit.admit(t0 + vrdma::LogLimit::kWindowNs + 1, &held));
  EXPECT_EQ(held, 0u);
}
