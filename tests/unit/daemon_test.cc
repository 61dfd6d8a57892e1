// End-to-end tests of vrdmad over its socket: a Daemon runs in a thread, the tests speak the
// protocol with raw connections.
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>

#include <atomic>
#include <nlohmann/json.hpp>
#include <set>

#include "daemon_test_util.h"

namespace vrdma::daemon::testing {
namespace {

using nlohmann::json;
using proto::Op;

constexpr uint32_t kRc = static_cast<uint32_t>(proto::QpType::kRc);
constexpr uint32_t kUd = static_cast<uint32_t>(proto::QpType::kUd);

void mapped_gid(uint32_t ipv4, uint8_t* gid) {
  std::memset(gid, 0, 16);
  gid[10] = gid[11] = 0xff;
  std::memcpy(gid + 12, &ipv4, 4);
}

// A client that said Hello and handed over an arena.
struct Client {
  Conn conn;
  TestArena arena;
  proto::HelloRep hello{};
  explicit Client(const std::string& path) : conn(Conn::open(path)) {
    hello = conn.hello();
    EXPECT_EQ(put_arena(conn, arena), 0);
  }
  uint32_t id() const { return hello.client_id; }
};

const json* find_client(const json& status, uint32_t id) {
  for (const auto& c : status["clients"])
    if (c["id"] == id) return &c;
  return nullptr;
}

TEST(DaemonTest, HelloReportsHostIdentity) {
  DaemonFixture f;
  Conn c = Conn::open(f.socket());
  proto::HelloRep rep = c.hello();
  EXPECT_EQ(rep.version, proto::kVersion);
  EXPECT_NE(rep.client_id, 0u);
  EXPECT_EQ(rep.ipv4, expected_ipv4());
  EXPECT_EQ(rep.host_id, 7u);
  EXPECT_EQ(rep.daemon_boot, f.daemon().boot_id());
  EXPECT_NE(rep.daemon_boot, 0u);
  EXPECT_STREQ(rep.container, "host");
  EXPECT_STREQ(rep.device_name, "vrdma0");
  uint8_t guid[8];
  std::memcpy(guid, &rep.node_guid, 8);
  EXPECT_EQ(guid[0], 0x02);
  EXPECT_EQ(guid[1], 0x76);
  EXPECT_EQ(guid[2], 0x72);
  EXPECT_EQ(guid[3], 0x64);
  EXPECT_EQ(std::memcmp(guid + 4, &rep.ipv4, 4), 0);

  // Client ids increase; a second Hello on the same connection is refused.
  Conn c2 = Conn::open(f.socket());
  EXPECT_GT(c2.hello().client_id, rep.client_id);
  auto p = std::make_unique<Packet>();
  proto::HelloReq again{proto::kVersion, 1};
  ASSERT_TRUE(c.call(Op::kHello, again, *p));
  EXPECT_EQ(p->header.status, EALREADY);
}

TEST(DaemonTest, SocketIsNotWorldWritableAndRemovedOnStop) {
  DaemonFixture f;
  struct stat st {};
  ASSERT_EQ(::stat(f.socket().c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0660u);
  EXPECT_EQ(st.st_uid, ::geteuid());
  EXPECT_EQ(st.st_gid, ::getegid());

  // A second daemon must not take over the socket of a live one.
  DaemonConfig cfg;
  cfg.socket_path = f.socket();
  Daemon second(cfg);
  EXPECT_EQ(second.start(), EADDRINUSE);

  Conn c = Conn::open(f.socket());
  c.hello();
  f.stop();
  EXPECT_NE(::access(f.socket().c_str(), F_OK), 0);
  EXPECT_TRUE(c.closed_by_daemon());
}

TEST(DaemonTest, RequestBeforeHelloIsRefusedAndDropped) {
  DaemonFixture f;
  Conn c = Conn::open(f.socket());
  auto p = std::make_unique<Packet>();
  ASSERT_TRUE(c.call(Op::kStatus, nullptr, 0, *p));
  EXPECT_EQ(p->header.status, EPROTO);
  EXPECT_TRUE(c.closed_by_daemon());
}

TEST(DaemonTest, HelloWithWrongVersionOrKindIsRejected) {
  DaemonFixture f;
  Conn c = Conn::open(f.socket());
  auto p = std::make_unique<Packet>();
  proto::HelloReq bad_version{proto::kVersion + 1, 1};
  ASSERT_TRUE(c.call(Op::kHello, bad_version, *p));
  EXPECT_EQ(p->header.status, EPROTONOSUPPORT);
  proto::HelloReq bad_kind{proto::kVersion, 9};
  ASSERT_TRUE(c.call(Op::kHello, bad_kind, *p));
  EXPECT_EQ(p->header.status, EINVAL);
  EXPECT_NE(c.hello().client_id, 0u);  // still usable
}

TEST(DaemonTest, PutFdArenaAndItsErrors) {
  DaemonFixture f;
  Conn c = Conn::open(f.socket());
  c.hello();
  auto p = std::make_unique<Packet>();

  TestArena bad(1 << 20, 0xdeadbeef);
  proto::PutFdReq bad_req{0, static_cast<uint32_t>(proto::FdKind::kArena), bad.size()};
  int bad_fd = bad.fd();
  ASSERT_TRUE(c.call(Op::kPutFd, bad_req, *p, std::span<const int>(&bad_fd, 1)));
  EXPECT_EQ(p->header.status, EINVAL) << "bad magic";

  TestArena small(1 << 20);
  proto::PutFdReq too_big{0, static_cast<uint32_t>(proto::FdKind::kArena), 2 << 20};
  int small_fd = small.fd();
  ASSERT_TRUE(c.call(Op::kPutFd, too_big, *p, std::span<const int>(&small_fd, 1)));
  EXPECT_EQ(p->header.status, EINVAL) << "announced size larger than the file";

  TestArena arena;
  proto::PutFdReq req{0, static_cast<uint32_t>(proto::FdKind::kArena), arena.size()};
  ASSERT_TRUE(c.call(Op::kPutFd, req, *p));
  EXPECT_EQ(p->header.status, EINVAL) << "no descriptor";
  int two[2] = {arena.fd(), arena.fd()};
  ASSERT_TRUE(c.call(Op::kPutFd, req, *p, std::span<const int>(two, 2)));
  EXPECT_EQ(p->header.status, EINVAL) << "two descriptors";
  proto::PutFdReq wrong_kind{0, static_cast<uint32_t>(proto::FdKind::kMemory), arena.size()};
  int afd = arena.fd();
  ASSERT_TRUE(c.call(Op::kPutFd, wrong_kind, *p, std::span<const int>(&afd, 1)));
  EXPECT_EQ(p->header.status, EINVAL) << "fd_id 0 must be the arena";

  EXPECT_EQ(put_arena(c, arena), 0);
  EXPECT_EQ(put_arena(c, arena), EEXIST);

  // Other kinds: memory must be a file as large as announced, events must be eventfds.
  proto::PutFdReq mem{1, static_cast<uint32_t>(proto::FdKind::kMemory), 4096};
  ASSERT_TRUE(c.call(Op::kPutFd, mem, *p, std::span<const int>(&afd, 1)));
  EXPECT_EQ(p->header.status, 0);
  int efd = ::eventfd(0, EFD_CLOEXEC);
  proto::PutFdReq ev{2, static_cast<uint32_t>(proto::FdKind::kEvent), 0};
  ASSERT_TRUE(c.call(Op::kPutFd, ev, *p, std::span<const int>(&efd, 1)));
  EXPECT_EQ(p->header.status, 0);
  proto::PutFdReq ev_not_eventfd{3, static_cast<uint32_t>(proto::FdKind::kEvent), 0};
  ASSERT_TRUE(c.call(Op::kPutFd, ev_not_eventfd, *p, std::span<const int>(&afd, 1)));
  EXPECT_EQ(p->header.status, EINVAL);
  proto::PutFdReq mem_too_big{4, static_cast<uint32_t>(proto::FdKind::kMemory), 1ull << 40};
  ASSERT_TRUE(c.call(Op::kPutFd, mem_too_big, *p, std::span<const int>(&efd, 1)));
  EXPECT_EQ(p->header.status, EINVAL);
  ::close(efd);

  json s = json::parse(c.status());
  const json* me = find_client(s, 1);
  ASSERT_NE(me, nullptr);
  EXPECT_EQ((*me)["fds"], 3);

  // DropFd: the id can then be used again; the arena cannot be dropped.
  proto::DropFdReq drop{1};
  ASSERT_TRUE(c.call(Op::kDropFd, drop, *p));
  EXPECT_EQ(p->header.status, 0);
  ASSERT_TRUE(c.call(Op::kDropFd, drop, *p));
  EXPECT_EQ(p->header.status, ENOENT);
  ASSERT_TRUE(c.call(Op::kPutFd, mem, *p, std::span<const int>(&afd, 1)));
  EXPECT_EQ(p->header.status, 0);
  proto::DropFdReq drop_arena{0};
  ASSERT_TRUE(c.call(Op::kDropFd, drop_arena, *p));
  EXPECT_EQ(p->header.status, EBUSY);
}

TEST(DaemonTest, PutFdQuota) {
  DaemonFixture f([](DaemonConfig& c) { c.quotas[Resource::kFds] = 3; });
  Conn c = Conn::open(f.socket());
  c.hello();
  int efd = ::eventfd(0, EFD_CLOEXEC);
  auto p = std::make_unique<Packet>();
  for (uint32_t id = 1; id <= 4; ++id) {
    proto::PutFdReq req{id, static_cast<uint32_t>(proto::FdKind::kEvent), 0};
    ASSERT_TRUE(c.call(Op::kPutFd, req, *p, std::span<const int>(&efd, 1)));
    EXPECT_EQ(p->header.status, id <= 3 ? 0 : EMFILE) << "fd " << id;
  }
  ::close(efd);
}

TEST(DaemonTest, AllocQpnValidatesAndNumbersUniquely) {
  DaemonFixture f;
  Conn bare = Conn::open(f.socket());
  bare.hello();
  uint32_t qpn = 0;
  EXPECT_EQ(alloc_qpn(bare, kRc, TestArena::qp_offset(0), &qpn), EINVAL) << "no arena yet";

  Client a(f.socket());
  EXPECT_EQ(alloc_qpn(a.conn, 1, TestArena::qp_offset(0), &qpn), EINVAL) << "type 1";
  EXPECT_EQ(alloc_qpn(a.conn, 5, TestArena::qp_offset(0), &qpn), EINVAL) << "type 5";
  EXPECT_EQ(alloc_qpn(a.conn, kRc, 0, &qpn), EINVAL) << "offset in the header";
  EXPECT_EQ(alloc_qpn(a.conn, kRc, TestArena::qp_offset(0) + 8, &qpn), EINVAL) << "unaligned";
  EXPECT_EQ(alloc_qpn(a.conn, kRc, static_cast<uint32_t>(shm::kArenaSize - 64), &qpn), EINVAL)
      << "past the end";

  Client b(f.socket());
  std::set<uint32_t> seen;
  for (int i = 0; i < 50; ++i) {
    Client& owner = i % 2 ? a : b;
    ASSERT_EQ(alloc_qpn(owner.conn, 2 + i % 3, TestArena::qp_offset(i), &qpn), 0);
    EXPECT_GE(qpn, 0x100u);
    EXPECT_LE(qpn, 0xFFFFFFu);
    EXPECT_TRUE(seen.insert(qpn).second) << "duplicate QPN " << qpn;
  }
}

TEST(DaemonTest, ConnectQpLinksAndGrantsGetFd) {
  DaemonFixture f;
  Client a(f.socket());
  Client b(f.socket());
  uint32_t qa = 0, qb = 0, qa_ud = 0;
  ASSERT_EQ(alloc_qpn(a.conn, kRc, TestArena::qp_offset(0), &qa), 0);
  ASSERT_EQ(alloc_qpn(a.conn, kUd, TestArena::qp_offset(1), &qa_ud), 0);
  ASSERT_EQ(alloc_qpn(b.conn, kRc, TestArena::qp_offset(3), &qb), 0);

  int fd = -1;
  EXPECT_EQ(get_fd(b.conn, a.id(), 0, &fd), EACCES) << "no link yet";
  EXPECT_EQ(get_fd(b.conn, 9999, 0, &fd), ENOENT) << "no such client";
  EXPECT_EQ(get_fd(a.conn, a.id(), 0, &fd), 0) << "own fd";
  ::close(fd);

  EXPECT_EQ(connect_qp(b.conn, qa, qb, nullptr), EPERM) << "local QP of another client";
  EXPECT_EQ(connect_qp(b.conn, qb, 0xFFFFF0, nullptr), ENOENT) << "unknown destination";
  EXPECT_EQ(connect_qp(b.conn, qb, qa_ud, nullptr), EINVAL) << "RC to UD";

  proto::ConnectQpRep rep{};
  ASSERT_EQ(connect_qp(b.conn, qb, qa, nullptr, &rep), 0);
  EXPECT_EQ(rep.peer_client, a.id());
  EXPECT_EQ(rep.peer_arena_offset, TestArena::qp_offset(0));
  EXPECT_EQ(rep.peer_qp_type, kRc);

  ASSERT_EQ(get_fd(b.conn, a.id(), 0, &fd), 0);
  struct stat got {
  }, want{};
  ASSERT_EQ(::fstat(fd, &got), 0);
  ASSERT_EQ(::fstat(a.arena.fd(), &want), 0);
  EXPECT_EQ(got.st_ino, want.st_ino) << "the owner's arena memfd";
  ::close(fd);
  EXPECT_EQ(get_fd(b.conn, a.id(), 42, &fd), ENOENT) << "unknown fd id";
  // The link is one way: A has no link to B.
  EXPECT_EQ(get_fd(a.conn, b.id(), 0, &fd), EACCES);

  // By GID: B's address is A's (same namespace), so the GID resolves.
  uint8_t gid[16];
  mapped_gid(a.hello.ipv4, gid);
  EXPECT_EQ(connect_qp(b.conn, qb, qa, gid), 0);
  mapped_gid(inet_addr("198.51.100.77"), gid);
  EXPECT_EQ(connect_qp(b.conn, qb, qa, gid), EHOSTUNREACH) << "another host's address";
  uint8_t not_mapped[16] = {0xfe, 0x80};
  EXPECT_EQ(connect_qp(b.conn, qb, qa, not_mapped), ENOENT);

  // Freeing: only the owner; the link goes with the QP.
  auto p = std::make_unique<Packet>();
  proto::FreeQpnReq fr{qa};
  ASSERT_TRUE(b.conn.call(Op::kFreeQpn, fr, *p));
  EXPECT_EQ(p->header.status, EPERM);
  ASSERT_TRUE(a.conn.call(Op::kFreeQpn, fr, *p));
  EXPECT_EQ(p->header.status, 0);
  ASSERT_TRUE(a.conn.call(Op::kFreeQpn, fr, *p));
  EXPECT_EQ(p->header.status, ENOENT);
  EXPECT_EQ(get_fd(b.conn, a.id(), 0, &fd), EACCES) << "link removed with the QP";
}

TEST(DaemonTest, UdQpLinksToManyDestinations) {
  DaemonFixture f;
  Client a(f.socket()), b(f.socket()), c(f.socket());
  uint32_t ua = 0, ub = 0, uc = 0;
  ASSERT_EQ(alloc_qpn(a.conn, kUd, TestArena::qp_offset(0), &ua), 0);
  ASSERT_EQ(alloc_qpn(b.conn, kUd, TestArena::qp_offset(0), &ub), 0);
  ASSERT_EQ(alloc_qpn(c.conn, kUd, TestArena::qp_offset(0), &uc), 0);
  ASSERT_EQ(connect_qp(a.conn, ua, ub, nullptr), 0);
  ASSERT_EQ(connect_qp(a.conn, ua, uc, nullptr), 0);
  int fd = -1;
  EXPECT_EQ(get_fd(a.conn, b.id(), 0, &fd), 0);
  ::close(fd);
  EXPECT_EQ(get_fd(a.conn, c.id(), 0, &fd), 0);
  ::close(fd);
}

TEST(DaemonTest, RcReconnectReplacesLink) {
  DaemonFixture f;
  Client a(f.socket()), b(f.socket()), c(f.socket());
  uint32_t qa = 0, qb = 0, qc = 0;
  ASSERT_EQ(alloc_qpn(a.conn, kRc, TestArena::qp_offset(0), &qa), 0);
  ASSERT_EQ(alloc_qpn(b.conn, kRc, TestArena::qp_offset(0), &qb), 0);
  ASSERT_EQ(alloc_qpn(c.conn, kRc, TestArena::qp_offset(0), &qc), 0);
  ASSERT_EQ(connect_qp(a.conn, qa, qb, nullptr), 0);
  ASSERT_EQ(connect_qp(a.conn, qa, qc, nullptr), 0);
  int fd = -1;
  EXPECT_EQ(get_fd(a.conn, b.id(), 0, &fd), EACCES);
  EXPECT_EQ(get_fd(a.conn, c.id(), 0, &fd), 0);
  ::close(fd);
}

TEST(DaemonTest, AllocKeyFormatUniquenessAndOwnership) {
  DaemonFixture f;
  Client a(f.socket()), b(f.socket());
  std::set<uint32_t> keys;
  for (uint32_t i = 0; i < 300; ++i) {
    uint32_t index = (i * 37) % shm::kMrSlots;
    uint32_t key = 0;
    ASSERT_EQ(alloc_key(i % 2 ? a.conn : b.conn, index, &key), 0);
    EXPECT_NE(key, 0u);
    EXPECT_EQ(key & (shm::kMrSlots - 1), index);
    EXPECT_TRUE(keys.insert(key).second) << "duplicate key " << key;
  }
  // The random high bits must actually vary.
  std::set<uint32_t> highs;
  for (uint32_t k : keys) highs.insert(k >> shm::kMrSlotBits);
  EXPECT_GT(highs.size(), 290u);

  uint32_t key = 0;
  EXPECT_EQ(alloc_key(a.conn, shm::kMrSlots, &key), EINVAL);
  ASSERT_EQ(alloc_key(a.conn, 5, &key), 0);
  auto p = std::make_unique<Packet>();
  proto::FreeKeyReq fr{key};
  ASSERT_TRUE(b.conn.call(Op::kFreeKey, fr, *p));
  EXPECT_EQ(p->header.status, ENOENT) << "not the owner: indistinguishable from unknown";
  ASSERT_TRUE(a.conn.call(Op::kFreeKey, fr, *p));
  EXPECT_EQ(p->header.status, 0);
  ASSERT_TRUE(a.conn.call(Op::kFreeKey, fr, *p));
  EXPECT_EQ(p->header.status, ENOENT);
}

TEST(DaemonTest, StatusListsClientsQpsAndKeys) {
  DaemonFixture f;
  Client a(f.socket());
  Conn cli = Conn::open(f.socket());
  cli.hello(proto::ClientKind::kCli);
  uint32_t qa = 0, qa2 = 0, key = 0;
  ASSERT_EQ(alloc_qpn(a.conn, kRc, TestArena::qp_offset(0), &qa), 0);
  ASSERT_EQ(alloc_qpn(a.conn, kUd, TestArena::qp_offset(1), &qa2), 0);
  auto* qp = a.arena.qp_at(TestArena::qp_offset(0));
  qp->state.store(IBV_QPS_RTS);
  qp->counters.tx_ops.store(11);
  qp->counters.tx_bytes.store(2200);
  qp->counters.rx_ops.store(3);
  qp->counters.rx_bytes.store(300);
  qp->counters.errors.store(1);
  ASSERT_EQ(alloc_key(a.conn, 17, &key), 0);

  std::string text = cli.status();
  ASSERT_FALSE(text.empty());
  ASSERT_LE(text.size(), proto::kMaxStatusText);
  json s = json::parse(text);
  EXPECT_EQ(s["daemon"]["pid"], ::getpid());
  EXPECT_EQ(s["daemon"]["socket"], f.socket());
  EXPECT_EQ(s["daemon"]["host_id"], 7);
  EXPECT_EQ(s["daemon"]["clients"], 2);
  EXPECT_TRUE(s["daemon"]["uptime_s"].is_number());
  EXPECT_EQ(s["truncated"], false);
  EXPECT_EQ(s["totals"]["qps"], 2);
  EXPECT_EQ(s["totals"]["mrs"], 1);
  EXPECT_EQ(s["totals"]["clients"], 2);

  const json* ja = find_client(s, a.id());
  ASSERT_NE(ja, nullptr);
  EXPECT_EQ((*ja)["pid"], ::getpid());
  EXPECT_EQ((*ja)["container"], "host");
  EXPECT_EQ((*ja)["tenant"], "@host");
  EXPECT_EQ((*ja)["kind"], "verbs");
  EXPECT_EQ((*ja)["fds"], 1);
  in_addr ip{a.hello.ipv4};
  EXPECT_EQ((*ja)["ip"], inet_ntoa(ip));
  ASSERT_EQ((*ja)["qps"].size(), 2u);
  // Listed in QPN order; QPNs are random.
  const size_t rc_at = (*ja)["qps"][0]["qpn"] == qa ? 0 : 1;
  const json& q0 = (*ja)["qps"][rc_at];
  EXPECT_EQ(q0["qpn"], qa);
  EXPECT_EQ(q0["type"], "RC");
  EXPECT_EQ(q0["state"], "RTS");
  EXPECT_EQ(q0["tx_ops"], 11);
  EXPECT_EQ(q0["tx_bytes"], 2200);
  EXPECT_EQ(q0["rx_ops"], 3);
  EXPECT_EQ(q0["rx_bytes"], 300);
  EXPECT_EQ(q0["errors"], 1);
  EXPECT_EQ((*ja)["qps"][1 - rc_at]["qpn"], qa2);
  EXPECT_EQ((*ja)["qps"][1 - rc_at]["type"], "UD");
  EXPECT_EQ((*ja)["qps"][1 - rc_at]["state"], "RESET");
  ASSERT_EQ((*ja)["mrs"].size(), 1u);
  char hex[16];
  std::snprintf(hex, sizeof(hex), "0x%08x", key);
  EXPECT_EQ((*ja)["mrs"][0]["key"], hex);
  EXPECT_EQ((*ja)["mrs"][0]["length"], 4096);
  bool saw_cli = false;
  for (const auto& c : s["clients"]) saw_cli |= c["kind"] == "cli";
  EXPECT_TRUE(saw_cli);
}

TEST(DaemonTest, StatusIsTruncatedToFit) {
  DaemonFixture f;
  Client a(f.socket());
  // ~4096 MRs render to far more than kMaxStatusText.
  for (uint32_t i = 0; i < 1500; ++i) {
    uint32_t key;
    ASSERT_EQ(alloc_key(a.conn, i, &key), 0);
  }
  std::string text = a.conn.status();
  ASSERT_FALSE(text.empty());
  EXPECT_LE(text.size(), proto::kMaxStatusText);
  json s = json::parse(text);
  EXPECT_EQ(s["truncated"], true);
  EXPECT_EQ(s["totals"]["mrs"], 1500);
  const json* ja = find_client(s, a.id());
  ASSERT_NE(ja, nullptr);
  EXPECT_LT((*ja)["mrs"].size(), 1500u);
  EXPECT_GT((*ja)["mrs"].size(), 100u);
}

TEST(DaemonTest, DisconnectNotifiesLinkedPeersAndForgetsTheClient) {
  DaemonFixture f;
  auto a = std::make_unique<Client>(f.socket());
  Client b(f.socket()), c(f.socket());
  uint32_t qa = 0, qa2 = 0, qb = 0, qb2 = 0, qc = 0, key = 0;
  ASSERT_EQ(alloc_qpn(a->conn, kRc, TestArena::qp_offset(0), &qa), 0);
  ASSERT_EQ(alloc_qpn(a->conn, kRc, TestArena::qp_offset(1), &qa2), 0);
  ASSERT_EQ(alloc_qpn(b.conn, kRc, TestArena::qp_offset(0), &qb), 0);
  ASSERT_EQ(alloc_qpn(b.conn, kRc, TestArena::qp_offset(1), &qb2), 0);
  ASSERT_EQ(alloc_qpn(c.conn, kRc, TestArena::qp_offset(0), &qc), 0);
  ASSERT_EQ(alloc_key(a->conn, 3, &key), 0);
  ASSERT_EQ(connect_qp(b.conn, qb, qa, nullptr), 0);
  ASSERT_EQ(connect_qp(a->conn, qa, qb, nullptr), 0);
  ASSERT_EQ(connect_qp(b.conn, qb2, qa2, nullptr), 0);
  ASSERT_EQ(connect_qp(c.conn, qc, qb2, nullptr), 0);  // C is linked to B, not to A
  uint32_t a_id = a->id();
  a->arena.qp_at(TestArena::qp_offset(0))->state.store(IBV_QPS_RTS);

  // Keep A's arena mapped to look at what the daemon wrote into it.
  TestArena* arena = &a->arena;
  a->conn.close();

  auto p = std::make_unique<Packet>();
  std::set<uint32_t> fatal;
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(b.conn.take_async(*p)) << "QpFatal " << i;
    EXPECT_EQ(p->header.op, static_cast<uint16_t>(Op::kQpFatal));
    EXPECT_EQ(p->header.seq, 0u);
    const auto* ev = p->as<proto::QpFatalEvent>();
    ASSERT_NE(ev, nullptr);
    EXPECT_EQ(ev->reason, static_cast<uint32_t>(proto::FatalReason::kPeerGone));
    fatal.insert(ev->qpn);
  }
  EXPECT_EQ(fatal, (std::set<uint32_t>{qb, qb2}));
  EXPECT_FALSE(b.conn.take_async(*p, 200)) << "one notice per local QP";
  EXPECT_FALSE(c.conn.take_async(*p, 200)) << "C was not linked to A";

  // Status (which also proves the daemon processed the drop) no longer shows A.
  json s = json::parse(b.conn.status());
  EXPECT_EQ(find_client(s, a_id), nullptr);
  EXPECT_EQ(s["totals"]["qps"], 3);
  EXPECT_EQ(s["totals"]["mrs"], 0);
  EXPECT_EQ(s["daemon"]["clients"], 2);

  EXPECT_EQ(arena->header()->dead.load(), 1u);
  for (int i = 0; i < 2; ++i) {
    auto* qp = arena->qp_at(TestArena::qp_offset(i));
    EXPECT_EQ(qp->gone.load(), 1u);
    EXPECT_EQ(qp->state.load(), static_cast<uint32_t>(IBV_QPS_ERR));
  }
  // A's QPNs are gone: B cannot connect to them again, nor fetch A's fds.
  EXPECT_EQ(connect_qp(b.conn, qb, qa, nullptr), ENOENT);
  int fd = -1;
  EXPECT_EQ(get_fd(b.conn, a_id, 0, &fd), ENOENT);
  a.reset();
}

TEST(DaemonTest, ShrunkArenaDoesNotHurtTheDaemon) {
  DaemonFixture f;
  auto a = std::make_unique<Client>(f.socket());
  Client b(f.socket());
  uint32_t qa = 0, qb = 0;
  ASSERT_EQ(alloc_qpn(a->conn, kRc, TestArena::qp_offset(0), &qa), 0);
  ASSERT_EQ(alloc_qpn(b.conn, kRc, TestArena::qp_offset(0), &qb), 0);
  ASSERT_EQ(connect_qp(b.conn, qb, qa, nullptr), 0);
  // A hostile client shrinks its memfd under the daemon's mapping.
  ASSERT_EQ(::ftruncate(a->arena.fd(), 0), 0);
  json s = json::parse(b.conn.status());
  const json* ja = find_client(s, a->id());
  ASSERT_NE(ja, nullptr);
  EXPECT_EQ((*ja)["qps"][0]["state"], "UNKNOWN");
  a.reset();  // death: the daemon writes into the (now missing) arena pages
  auto p = std::make_unique<Packet>();
  ASSERT_TRUE(b.conn.take_async(*p));
  EXPECT_EQ(p->header.op, static_cast<uint16_t>(Op::kQpFatal));
  EXPECT_FALSE(b.conn.status().empty());
}

// Sends raw bytes as one packet, with optional descriptors.
void send_raw(int fd, const void* data, size_t len) {
  ASSERT_EQ(::send(fd, data, len, MSG_NOSIGNAL), static_cast<ssize_t>(len));
}

TEST(DaemonTest, BrokenFramingDropsOnlyThatClient) {
  DaemonFixture f;
  Conn good = Conn::open(f.socket());
  good.hello();

  struct Case {
    const char* name;
    std::vector<uint8_t> bytes;
  };
  proto::Header h{proto::kMagic, static_cast<uint16_t>(Op::kStatus), 0, 1, 0, 0};
  std::vector<Case> cases;
  cases.push_back({"garbage", {0xde, 0xad, 0xbe, 0xef, 1,  2,  3,  4,  5,  6,  7,  8,  9,
                               10,   11,   12,   13,   14, 15, 16, 17, 18, 19, 20, 21, 22}});
  cases.push_back({"truncated header", std::vector<uint8_t>(reinterpret_cast<uint8_t*>(&h),
                                                            reinterpret_cast<uint8_t*>(&h) + 10)});
  {
    proto::Header bad = h;
    bad.len = 100;  // claims a payload that is not there
    cases.push_back(
        {"length mismatch", std::vector<uint8_t>(reinterpret_cast<uint8_t*>(&bad),
                                                 reinterpret_cast<uint8_t*>(&bad) + sizeof(bad))});
  }
  {
    std::vector<uint8_t> big(proto::kMaxMessage + 4096, 0);
    proto::Header bh = h;
    bh.len = static_cast<uint32_t>(big.size() - sizeof(bh));
    std::memcpy(big.data(), &bh, sizeof(bh));
    cases.push_back({"oversized", std::move(big)});
  }
  {
    std::vector<uint8_t> exact(proto::kMaxMessage + 8, 0);  // fits the buffer, over the limit
    proto::Header bh = h;
    bh.len = static_cast<uint32_t>(exact.size() - sizeof(bh));
    std::memcpy(exact.data(), &bh, sizeof(bh));
    cases.push_back({"over kMaxMessage", std::move(exact)});
  }
  for (bool after_hello : {false, true}) {
    for (const Case& c : cases) {
      SCOPED_TRACE(std::string(c.name) + (after_hello ? " after Hello" : " before Hello"));
      Conn bad = Conn::open(f.socket());
      if (after_hello) bad.hello();
      send_raw(bad.fd(), c.bytes.data(), c.bytes.size());
      EXPECT_TRUE(bad.closed_by_daemon());
      // The well-behaved client is unaffected.
      EXPECT_FALSE(good.status().empty());
    }
  }
}

TEST(DaemonTest, ProtocolErrorsGetEinvalThenDrop) {
  DaemonFixture f;
  Conn good = Conn::open(f.socket());
  good.hello();
  Conn c = Conn::open(f.socket());
  c.hello();
  auto p = std::make_unique<Packet>();

  uint8_t junk[3] = {1, 2, 3};
  ASSERT_TRUE(c.call(Op::kAllocQpn, junk, sizeof(junk), *p));
  EXPECT_EQ(p->header.status, EINVAL) << "wrong payload size";
  ASSERT_TRUE(c.call(Op::kStatus, junk, sizeof(junk), *p));
  EXPECT_EQ(p->header.status, EINVAL) << "Status takes no payload";
  ASSERT_TRUE(c.call(static_cast<Op>(77), nullptr, 0, *p));
  EXPECT_EQ(p->header.status, EINVAL) << "unknown op";
  ASSERT_TRUE(c.call(Op::kQpFatal, nullptr, 0, *p));
  EXPECT_EQ(p->header.status, EINVAL) << "clients do not send QpFatal";
  int efd = ::eventfd(0, EFD_CLOEXEC);
  ASSERT_TRUE(c.call(Op::kStatus, nullptr, 0, *p, std::span<const int>(&efd, 1)));
  EXPECT_EQ(p->header.status, EINVAL) << "unexpected descriptor";
  ::close(efd);
  EXPECT_FALSE(c.status().empty()) << "still served after 5 errors";

  // Errors up to the limit are answered; the 16th drops the client.
  for (int i = 5; i < 16; ++i) {
    ASSERT_TRUE(c.call(Op::kFreeKey, junk, sizeof(junk), *p)) << i;
    EXPECT_EQ(p->header.status, EINVAL);
  }
  EXPECT_TRUE(c.closed_by_daemon());
  EXPECT_FALSE(good.status().empty());
}

TEST(DaemonTest, UnexpectedDescriptorsAreClosed) {
  DaemonFixture f;
  Conn c = Conn::open(f.socket());
  c.hello();
  int pipefd[2];
  ASSERT_EQ(::pipe2(pipefd, O_CLOEXEC), 0);
  auto p = std::make_unique<Packet>();
  proto::GetFdReq req{1, 0};
  ASSERT_TRUE(c.call(Op::kGetFd, req, *p, std::span<const int>(&pipefd[1], 1)));
  EXPECT_EQ(p->header.status, EINVAL);
  ::close(pipefd[1]);
  // If the daemon still held the write end, this read would block; it returns EOF instead.
  pollfd pfd{pipefd[0], POLLIN, 0};
  ASSERT_EQ(::poll(&pfd, 1, kTimeoutMs), 1);
  char b;
  EXPECT_EQ(::read(pipefd[0], &b, 1), 0);
  ::close(pipefd[0]);
}

TEST(DaemonTest, IdleDaemonUsesNoCpu) {
  DaemonFixture f;
  Conn c = Conn::open(f.socket());
  c.hello();
  clockid_t clock;
  ASSERT_EQ(pthread_getcpuclockid(f.thread().native_handle(), &clock), 0);
  timespec t0{}, t1{};
  ASSERT_EQ(clock_gettime(clock, &t0), 0);
  ::usleep(500 * 1000);
  ASSERT_EQ(clock_gettime(clock, &t1), 0);
  double used = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
  EXPECT_LT(used, 0.01) << "daemon thread burned CPU while idle";
}

TEST(DaemonTest, ManyClientsComeAndGo) {
  DaemonFixture f;
  Client keep(f.socket());
  uint32_t qk = 0;
  ASSERT_EQ(alloc_qpn(keep.conn, kUd, TestArena::qp_offset(0), &qk), 0);
  for (int round = 0; round < 20; ++round) {
    Client t(f.socket());
    uint32_t q = 0;
    ASSERT_EQ(alloc_qpn(t.conn, kUd, TestArena::qp_offset(0), &q), 0);
    ASSERT_EQ(connect_qp(t.conn, q, qk, nullptr), 0);
    ASSERT_EQ(connect_qp(keep.conn, qk, q, nullptr), 0);
  }
  // Each departed client's QP was linked from `keep`: it got one notice per departure, all
  // for the same local QP.
  auto p = std::make_unique<Packet>();
  int notices = 0;
  while (keep.conn.take_async(*p, 300)) {
    const auto* ev = p->as<proto::QpFatalEvent>();
    ASSERT_NE(ev, nullptr);
    EXPECT_EQ(ev->qpn, qk);
    ++notices;
  }
  EXPECT_EQ(notices, 20);
  json s = json::parse(keep.conn.status());
  EXPECT_EQ(s["totals"]["clients"], 1);
  EXPECT_EQ(s["totals"]["qps"], 1);
}

}  // namespace
}  // namespace vrdma::daemon::testing
