// vrdmad over its socket: who gets a device (the host's processes only when allowed; a
// status-only client asks for status and nothing else) and the per-container quotas. Every
// client here is a process of the host, so all of them are one container.
#include <arpa/inet.h>
#include <errno.h>
#include <gtest/gtest.h>
#include <sys/eventfd.h>

#include <nlohmann/json.hpp>
#include <vector>

#include "common/address.h"
#include "daemon_test_util.h"

namespace vrdma::daemon::testing {
namespace {

using nlohmann::json;
using proto::Op;

constexpr uint32_t kRc = static_cast<uint32_t>(proto::QpType::kRc);

int hello_status(Conn& c, proto::ClientKind kind = proto::ClientKind::kVerbs) {
  proto::HelloReq req{proto::kVersion, static_cast<uint32_t>(kind)};
  auto p = std::make_unique<Packet>();
  if (!c.call(Op::kHello, req, *p)) return -1;
  return p->header.status;
}

int key_of_length(Conn& c, uint32_t index, uint64_t length, uint32_t* key) {
  proto::AllocKeyReq req{index, 0x7, length};
  auto p = std::make_unique<Packet>();
  if (!c.call(Op::kAllocKey, req, *p)) return -1;
  if (p->header.status == 0) *key = p->as<proto::AllocKeyRep>()->key;
  return p->header.status;
}

int free_key(Conn& c, uint32_t key) {
  proto::FreeKeyReq req{key};
  auto p = std::make_unique<Packet>();
  if (!c.call(Op::kFreeKey, req, *p)) return -1;
  return p->header.status;
}

int put_eventfd(Conn& c, uint32_t id) {
  int efd = ::eventfd(0, EFD_CLOEXEC);
  proto::PutFdReq req{id, static_cast<uint32_t>(proto::FdKind::kEvent), 0};
  auto p = std::make_unique<Packet>();
  bool ok = c.call(Op::kPutFd, req, *p, std::span<const int>(&efd, 1));
  ::close(efd);
  return ok ? p->header.status : -1;
}

int cm_listen(Conn& c, uint16_t port) {
  proto::CmListenReq req{0, port, 0, port};
  auto p = std::make_unique<Packet>();
  if (!c.call(Op::kCmListen, req, *p)) return -1;
  return p->header.status;
}

int cm_connect(Conn& c, uint32_t qpn, uint32_t ip, uint16_t port) {
  proto::CmConnectReq req{};
  req.dst_ipv4 = ip;
  req.dst_port = port;
  req.src_port = 40000;
  req.local_qpn = qpn;
  req.qp_type = kRc;
  req.cookie = 1;
  auto p = std::make_unique<Packet>();
  if (!c.call(Op::kCmConnect, req, *p)) return -1;
  return p->header.status;
}

// The quota entry of the (only) container in a status reply, as resource -> [used, limit].
json quota_of(const json& status) {
  if (!status.contains("containers") || status["containers"].size() != 1) return json();
  return status["containers"][0]["quota"];
}

struct Verbs {
  Conn conn;
  TestArena arena;
  explicit Verbs(const std::string& path) : conn(Conn::open(path)) {
    conn.hello();
    EXPECT_EQ(put_arena(conn, arena), 0);
  }
};

TEST(DaemonAdmissionTest, HostProcessesGetNoDeviceUnlessAllowed) {
  DaemonFixture f([](DaemonConfig& c) { c.allow_host_clients = false; });
  Conn verbs = Conn::open(f.socket());
  EXPECT_EQ(hello_status(verbs), EACCES);
  EXPECT_TRUE(verbs.closed_by_daemon());

  // Status-only clients need no device: they get status and nothing else.
  Conn cli = Conn::open(f.socket());
  ASSERT_EQ(hello_status(cli, proto::ClientKind::kCli), 0);
  json s = json::parse(cli.status());
  EXPECT_EQ(s["scope"], "all") << "root on the host sees everything";
  uint32_t qpn = 0;
  EXPECT_EQ(alloc_qpn(cli, kRc, TestArena::qp_offset(0), &qpn), EPERM);
  EXPECT_EQ(cm_listen(cli, 7000), EPERM);
  EXPECT_FALSE(cli.status().empty()) << "still served";
}

TEST(DaemonAdmissionTest, ATenantRuleCoveringTheHostGivesItADevice) {
  const uint32_t ip = expected_ipv4();
  DaemonFixture f([ip](DaemonConfig& c) {
    c.allow_host_clients = false;
    std::string err;
    c.tenants.push_back(*parse_tenant_rule("ops=" + ipv4_text(ip) + "/32", &err));
  });
  Conn c = Conn::open(f.socket());
  EXPECT_EQ(c.hello().ipv4, ip);
  json s = json::parse(c.status());
  ASSERT_EQ(s["clients"].size(), 1u);
  EXPECT_EQ(s["clients"][0]["tenant"], "ops");
}

TEST(DaemonQuotaTest, ConnectionsPerContainer) {
  DaemonFixture f([](DaemonConfig& c) { c.quotas[Resource::kConnections] = 3; });
  Conn a = Conn::open(f.socket()), b = Conn::open(f.socket());
  Conn cli = Conn::open(f.socket());
  a.hello();
  b.hello();
  ASSERT_EQ(hello_status(cli, proto::ClientKind::kCli), 0);
  json s = json::parse(cli.status());
  EXPECT_EQ(quota_of(s)["connections"], json::array({3, 3}));

  Conn over = Conn::open(f.socket());
  EXPECT_EQ(hello_status(over), EMFILE);
  EXPECT_TRUE(over.closed_by_daemon());
  Conn over_cli = Conn::open(f.socket());
  EXPECT_EQ(hello_status(over_cli, proto::ClientKind::kCli), EMFILE) << "status clients count too";

  b.close();
  // Once the daemon has seen B go, there is room again.
  bool room = false;
  for (int i = 0; i < 50 && !room; ++i) {
    Conn again = Conn::open(f.socket());
    room = hello_status(again) == 0;
    if (!room) ::usleep(20000);
  }
  EXPECT_TRUE(room);
}

TEST(DaemonQuotaTest, RefusedConnectionsWaitingAreBounded) {
  DaemonFixture f([](DaemonConfig& c) {
    c.quotas[Resource::kConnections] = 1;
    c.max_refused_pending = 2;
  });
  Conn first = Conn::open(f.socket());
  first.hello();
  // Two over-quota connections wait for their Hello to be refused; a third is closed at once.
  Conn w1 = Conn::open(f.socket()), w2 = Conn::open(f.socket());
  EXPECT_FALSE(w1.closed_by_daemon(200));
  EXPECT_FALSE(w2.closed_by_daemon(200));
  Conn shed = Conn::open(f.socket());
  EXPECT_TRUE(shed.closed_by_daemon());
  EXPECT_EQ(hello_status(w1), EMFILE);
  EXPECT_EQ(hello_status(w2), EMFILE);
  EXPECT_FALSE(first.status().empty());
}

TEST(DaemonQuotaTest, QpsMrsBytesAndFdsAcrossConnections) {
  DaemonFixture f([](DaemonConfig& c) {
    c.quotas[Resource::kQps] = 4;
    c.quotas[Resource::kMrs] = 3;
    c.quotas[Resource::kRegisteredBytes] = 10000;
    // The two arenas, the QP objects put before each AllocQpn (a: 4, b: 3, refused ones
    // included: the object is put first), then two more.
    c.quotas[Resource::kFds] = 11;
  });
  auto a = std::make_unique<Verbs>(f.socket());
  Verbs b(f.socket());
  uint32_t q[5] = {};
  ASSERT_EQ(alloc_qpn(a->conn, kRc, TestArena::qp_offset(0), &q[0]), 0);
  ASSERT_EQ(alloc_qpn(a->conn, kRc, TestArena::qp_offset(1), &q[1]), 0);
  ASSERT_EQ(alloc_qpn(b.conn, kRc, TestArena::qp_offset(0), &q[2]), 0);
  ASSERT_EQ(alloc_qpn(b.conn, kRc, TestArena::qp_offset(1), &q[3]), 0);
  EXPECT_EQ(alloc_qpn(b.conn, kRc, TestArena::qp_offset(2), &q[4]), EDQUOT);
  EXPECT_EQ(alloc_qpn(a->conn, kRc, TestArena::qp_offset(2), &q[4]), EDQUOT);
  auto p = std::make_unique<Packet>();
  proto::FreeQpnReq fr{q[3]};
  ASSERT_TRUE(b.conn.call(Op::kFreeQpn, fr, *p));
  ASSERT_EQ(p->header.status, 0);
  EXPECT_EQ(alloc_qpn(a->conn, kRc, TestArena::qp_offset(2), &q[4]), 0) << "freed, room again";

  uint32_t k1 = 0, k2 = 0, k3 = 0, k4 = 0;
  ASSERT_EQ(key_of_length(a->conn, 1, 4096, &k1), 0);
  ASSERT_EQ(key_of_length(b.conn, 1, 4096, &k2), 0);
  EXPECT_EQ(key_of_length(b.conn, 2, 4096, &k3), EDQUOT) << "10000 bytes at most";
  ASSERT_EQ(key_of_length(b.conn, 2, 1000, &k3), 0);
  EXPECT_EQ(key_of_length(a->conn, 3, 10, &k4), EDQUOT) << "3 MRs at most";
  ASSERT_EQ(free_key(b.conn, k2), 0);
  EXPECT_EQ(key_of_length(a->conn, 3, 4096, &k4), 0);

  EXPECT_EQ(put_eventfd(a->conn, 1001), 0);  // ids of their own (0, 1 and the objects' taken)
  EXPECT_EQ(put_eventfd(b.conn, 1001), 0);
  EXPECT_EQ(put_eventfd(b.conn, 1002), EMFILE);
  EXPECT_EQ(put_eventfd(a->conn, 1002), EMFILE);

  Conn cli = Conn::open(f.socket());
  cli.hello(proto::ClientKind::kCli);
  json quota = quota_of(json::parse(cli.status()));
  EXPECT_EQ(quota["qps"], json::array({4, 4}));
  EXPECT_EQ(quota["mrs"], json::array({3, 3}));
  EXPECT_EQ(quota["registered_bytes"], json::array({4096 + 1000 + 4096, 10000}));
  EXPECT_EQ(quota["fds"], json::array({11, 11}));
  EXPECT_EQ(quota["connections"][0], 3);

  // A's death gives back everything A held.
  a.reset();
  json after;
  for (int i = 0; i < 50; ++i) {
    after = quota_of(json::parse(cli.status()));
    if (after["connections"][0] == 2) break;
    ::usleep(20000);
  }
  EXPECT_EQ(after["qps"], json::array({1, 4}));
  EXPECT_EQ(after["mrs"], json::array({1, 3}));
  EXPECT_EQ(after["registered_bytes"], json::array({1000, 10000}));
  EXPECT_EQ(after["fds"], json::array({5, 11}));  // b: arena, 3 objects, eventfd
}

TEST(DaemonQuotaTest, CmListenersConnectionsAndDirectoryEntries) {
  DaemonFixture f([](DaemonConfig& c) {
    c.quotas[Resource::kCmListeners] = 3;
    c.quotas[Resource::kCmConnections] = 2;
    c.quotas[Resource::kDirectoryEntries] = 3;  // the container's address and 2 listeners
  });
  Verbs a(f.socket()), b(f.socket());
  EXPECT_EQ(cm_listen(a.conn, 7001), 0);
  EXPECT_EQ(cm_listen(b.conn, 7002), 0);
  EXPECT_EQ(cm_listen(b.conn, 7003), EDQUOT) << "out of directory entries first";
  uint32_t qa = 0, qb = 0;
  ASSERT_EQ(alloc_qpn(a.conn, kRc, TestArena::qp_offset(0), &qa), 0);
  ASSERT_EQ(alloc_qpn(b.conn, kRc, TestArena::qp_offset(0), &qb), 0);
  const uint32_t ip = expected_ipv4();
  EXPECT_EQ(cm_connect(a.conn, qa, ip, 7002), 0);
  EXPECT_EQ(cm_connect(b.conn, qb, ip, 7001), 0);
  EXPECT_EQ(cm_connect(a.conn, qa, ip, 7002), EMFILE) << "2 rdma_cm connections at most";

  Conn cli = Conn::open(f.socket());
  cli.hello(proto::ClientKind::kCli);
  json quota = quota_of(json::parse(cli.status()));
  EXPECT_EQ(quota["cm_listeners"], json::array({2, 3}));
  EXPECT_EQ(quota["cm_connections"], json::array({2, 2}));
  EXPECT_EQ(quota["directory_entries"], json::array({3, 3}));
}

}  // namespace
}  // namespace vrdma::daemon::testing
