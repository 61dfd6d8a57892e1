// End-to-end tests of vrdmad over its socket: a Daemon runs in a thread, the tests speak the
// protocol with raw connections.
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

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

  // Other kinds: memory must be a sealed file as large as announced, events must be eventfds.
  proto::PutFdReq mem{2, static_cast<uint32_t>(proto::FdKind::kMemory), 4096};
  ASSERT_TRUE(c.call(Op::kPutFd, mem, *p, std::span<const int>(&afd, 1)));
  EXPECT_EQ(p->header.status, 0);
  int efd = ::eventfd(0, EFD_CLOEXEC);
  proto::PutFdReq ev{3, static_cast<uint32_t>(proto::FdKind::kEvent), 0};
  ASSERT_TRUE(c.call(Op::kPutFd, ev, *p, std::span<const int>(&efd, 1)));
  EXPECT_EQ(p->header.status, 0);
  proto::PutFdReq ev_not_eventfd{4, static_cast<uint32_t>(proto::FdKind::kEvent), 0};
  ASSERT_TRUE(c.call(Op::kPutFd, ev_not_eventfd, *p, std::span<const int>(&afd, 1)));
  EXPECT_EQ(p->header.status, EINVAL);
  proto::PutFdReq mem_not_file{5, static_cast<uint32_t>(proto::FdKind::kMemory), 4096};
  ASSERT_TRUE(c.call(Op::kPutFd, mem_not_file, *p, std::span<const int>(&efd, 1)));
  EXPECT_EQ(p->header.status, EBADF);
  proto::PutFdReq mem_too_big{5, static_cast<uint32_t>(proto::FdKind::kMemory), 1ull << 40};
  ASSERT_TRUE(c.call(Op::kPutFd, mem_too_big, *p, std::span<const int>(&afd, 1)));
  EXPECT_EQ(p->header.status, EINVAL) << "announced more than the file has";
  proto::PutFdReq mem_as_keys{2, static_cast<uint32_t>(proto::FdKind::kKeyTable), 4096};
  ASSERT_TRUE(c.call(Op::kPutFd, mem_as_keys, *p, std::span<const int>(&afd, 1)));
  EXPECT_EQ(p->header.status, EINVAL) << "fd_id 1 is the key table";
  ::close(efd);

  json s = json::parse(c.status());
  const json* me = find_client(s, 1);
  ASSERT_NE(me, nullptr);
  EXPECT_EQ((*me)["fds"], 3);

  // DropFd: the id can then be used again; the arena cannot be dropped.
  proto::DropFdReq drop{2};
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
  for (uint32_t id = 2; id <= 5; ++id) {
    proto::PutFdReq req{id, static_cast<uint32_t>(proto::FdKind::kEvent), 0};
    ASSERT_TRUE(c.call(Op::kPutFd, req, *p, std::span<const int>(&efd, 1)));
    EXPECT_EQ(p->header.status, id <= 4 ? 0 : EMFILE) << "fd " << id;
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

TEST(DaemonTest, ConnectQpNeedsConsentAndGrantsOnlyTheQpObject) {
  DaemonFixture f;
  Client a(f.socket());
  Client b(f.socket());
  std::vector<std::unique_ptr<TestObject>> objs;
  uint32_t qa = 0, qb = 0, qa_ud = 0, qa2 = 0, obj_a = 0, obj_a2 = 0, obj_b = 0;
  ASSERT_EQ(alloc_qpn(a.conn, kRc, TestArena::qp_offset(0), &qa, &objs, &obj_a), 0);
  ASSERT_EQ(alloc_qpn(a.conn, kUd, TestArena::qp_offset(1), &qa_ud), 0);
  ASSERT_EQ(alloc_qpn(a.conn, kRc, TestArena::qp_offset(2), &qa2, &objs, &obj_a2), 0);
  ASSERT_EQ(alloc_qpn(b.conn, kRc, TestArena::qp_offset(3), &qb, &objs, &obj_b), 0);

  int fd = -1;
  EXPECT_EQ(get_fd(b.conn, a.id(), obj_a, &fd, qb), EACCES) << "no connection yet";
  EXPECT_EQ(get_fd(b.conn, 9999, 0, &fd, qb), ENOENT) << "no such client";

  EXPECT_EQ(connect_qp(b.conn, qa, qb, nullptr), EPERM) << "local QP of another client";
  EXPECT_EQ(connect_qp(b.conn, qb, 0xFFFFF0, nullptr), ENOENT) << "unknown destination";
  EXPECT_EQ(connect_qp(b.conn, qb, qa_ud, nullptr), EINVAL) << "RC to UD";

  // B's RTR names A's QP, but A's does not name B's yet: not ready, nothing granted.
  EXPECT_EQ(connect_qp(b.conn, qb, qa, nullptr), EAGAIN);
  EXPECT_EQ(get_fd(b.conn, a.id(), obj_a, &fd, qb), EACCES);
  // A's RTR names another QP: still not B's.
  EXPECT_EQ(connect_qp(a.conn, qa, qa2, nullptr), EAGAIN);
  EXPECT_EQ(connect_qp(b.conn, qb, qa, nullptr), EAGAIN);
  // Now A names B: both sides agree.
  EXPECT_EQ(connect_qp(a.conn, qa, qb, nullptr), 0);
  proto::ConnectQpRep rep{};
  ASSERT_EQ(connect_qp(b.conn, qb, qa, nullptr, &rep), 0);
  EXPECT_EQ(rep.peer_client, a.id());
  EXPECT_EQ(rep.peer_object_fd_id, obj_a);
  EXPECT_EQ(rep.peer_qp_type, kRc);

  // B gets A's QP object over its QP, and nothing else of A's.
  ASSERT_EQ(get_fd(b.conn, a.id(), obj_a, &fd, qb), 0);
  struct stat got {
  }, want{};
  ASSERT_EQ(::fstat(fd, &got), 0);
  ASSERT_EQ(::fstat(objs[0]->fd(), &want), 0);
  EXPECT_EQ(got.st_ino, want.st_ino) << "the owner's QP object";
  ::close(fd);
  EXPECT_EQ(get_fd(b.conn, a.id(), shm::kArenaFdId, &fd, qb), EACCES) << "the arena: never";
  EXPECT_EQ(get_fd(b.conn, a.id(), obj_a2, &fd, qb), EACCES) << "another QP's object";
  EXPECT_EQ(get_fd(b.conn, a.id(), obj_a, &fd, 0), EACCES) << "not over a QP of B's";
  EXPECT_EQ(get_fd(b.conn, a.id(), 42, &fd, qb), EACCES) << "unknown fd id";
  EXPECT_EQ(get_fd(a.conn, b.id(), shm::kArenaFdId, &fd, qa), EACCES);

  // By GID: B's address is A's (same namespace), so the GID resolves.
  uint8_t gid[16];
  mapped_gid(a.hello.ipv4, gid);
  EXPECT_EQ(connect_qp(b.conn, qb, qa, gid), 0);
  mapped_gid(inet_addr("198.51.100.77"), gid);
  EXPECT_EQ(connect_qp(b.conn, qb, qa, gid), EHOSTUNREACH) << "another host's address";
  uint8_t not_mapped[16] = {0xfe, 0x80};
  EXPECT_EQ(connect_qp(b.conn, qb, qa, not_mapped), ENOENT);
  mapped_gid(a.hello.ipv4, gid);
  EXPECT_EQ(connect_qp(b.conn, qb, qa, gid), 0);

  // Freeing: only the owner; the connection goes with the QP.
  auto p = std::make_unique<Packet>();
  proto::FreeQpnReq fr{qa};
  ASSERT_TRUE(b.conn.call(Op::kFreeQpn, fr, *p));
  EXPECT_EQ(p->header.status, EPERM);
  ASSERT_TRUE(a.conn.call(Op::kFreeQpn, fr, *p));
  EXPECT_EQ(p->header.status, 0);
  ASSERT_TRUE(a.conn.call(Op::kFreeQpn, fr, *p));
  EXPECT_EQ(p->header.status, ENOENT);
  EXPECT_EQ(get_fd(b.conn, a.id(), obj_a, &fd, qb), EACCES) << "gone with the QP";
}

TEST(DaemonTest, UdQpReachesEveryDestinationItResolved) {
  DaemonFixture f;
  Client a(f.socket()), b(f.socket()), c(f.socket());
  uint32_t ua = 0, ub = 0, uc = 0, ob = 0, oc = 0;
  ASSERT_EQ(alloc_qpn(a.conn, kUd, TestArena::qp_offset(0), &ua), 0);
  ASSERT_EQ(alloc_qpn(b.conn, kUd, TestArena::qp_offset(0), &ub, nullptr, &ob), 0);
  ASSERT_EQ(alloc_qpn(c.conn, kUd, TestArena::qp_offset(0), &uc, nullptr, &oc), 0);
  int fd = -1;
  EXPECT_EQ(get_fd(a.conn, b.id(), ob, &fd, ua), EACCES) << "not resolved yet";
  ASSERT_EQ(connect_qp(a.conn, ua, ub, nullptr), 0);  // UD: no RTR names anyone
  ASSERT_EQ(connect_qp(a.conn, ua, uc, nullptr), 0);
  EXPECT_EQ(get_fd(a.conn, b.id(), ob, &fd, ua), 0);
  ::close(fd);
  EXPECT_EQ(get_fd(a.conn, c.id(), oc, &fd, ua), 0);
  ::close(fd);
  EXPECT_EQ(get_fd(a.conn, b.id(), shm::kArenaFdId, &fd, ua), EACCES);
}

TEST(DaemonTest, RcReconnectReplacesTheConnection) {
  DaemonFixture f;
  Client a(f.socket()), b(f.socket()), c(f.socket());
  uint32_t qa = 0, qb = 0, qc = 0, ob = 0, oc = 0;
  ASSERT_EQ(alloc_qpn(a.conn, kRc, TestArena::qp_offset(0), &qa), 0);
  ASSERT_EQ(alloc_qpn(b.conn, kRc, TestArena::qp_offset(0), &qb, nullptr, &ob), 0);
  ASSERT_EQ(alloc_qpn(c.conn, kRc, TestArena::qp_offset(0), &qc, nullptr, &oc), 0);
  EXPECT_EQ(connect_qp(b.conn, qb, qa, nullptr), EAGAIN);
  EXPECT_EQ(connect_qp(c.conn, qc, qa, nullptr), EAGAIN);
  ASSERT_EQ(connect_qp(a.conn, qa, qb, nullptr), 0);
  int fd = -1;
  EXPECT_EQ(get_fd(a.conn, b.id(), ob, &fd, qa), 0);
  ::close(fd);
  ASSERT_EQ(connect_qp(a.conn, qa, qc, nullptr), 0);
  EXPECT_EQ(get_fd(a.conn, b.id(), ob, &fd, qa), EACCES) << "A's RTR names C's QP now";
  EXPECT_EQ(get_fd(a.conn, c.id(), oc, &fd, qa), 0);
  ::close(fd);
  EXPECT_EQ(connect_qp(b.conn, qb, qa, nullptr), EAGAIN) << "B was dropped";
}

TEST(DaemonTest, AResetQpIsReachedByNobodyUntilItsNextRtr) {
  DaemonFixture f;
  Client a(f.socket()), b(f.socket());
  std::vector<std::unique_ptr<TestObject>> objs;
  uint32_t qa = 0, qb = 0, oa = 0;
  ASSERT_EQ(alloc_qpn(a.conn, kRc, TestArena::qp_offset(0), &qa, &objs, &oa), 0);
  ASSERT_EQ(alloc_qpn(b.conn, kRc, TestArena::qp_offset(0), &qb), 0);
  EXPECT_EQ(connect_qp(b.conn, qb, qa, nullptr), EAGAIN);
  ASSERT_EQ(connect_qp(a.conn, qa, qb, nullptr), 0);
  int fd = -1;
  ASSERT_EQ(get_fd(b.conn, a.id(), oa, &fd, qb), 0);
  ::close(fd);
  // A resets its QP: a new object, and its RTR names nobody any more.
  TestObject fresh(a.id());
  uint32_t on = a.conn.next_fd_id();
  ASSERT_EQ(put_fd(a.conn, on, proto::FdKind::kQpObject, fresh.fd(), 8192), 0);
  auto p = std::make_unique<Packet>();
  proto::SetQpObjectReq set{qa, on, 0, 0};
  ASSERT_TRUE(a.conn.call(Op::kSetQpObject, set, *p));
  EXPECT_EQ(p->header.status, 0);
  proto::SetQpObjectReq not_mine{qa, on, 0, 0};
  ASSERT_TRUE(b.conn.call(Op::kSetQpObject, not_mine, *p));
  EXPECT_EQ(p->header.status, EPERM);
  EXPECT_EQ(get_fd(b.conn, a.id(), on, &fd, qb), EACCES) << "the new object, before A's RTR";
  EXPECT_EQ(get_fd(b.conn, a.id(), oa, &fd, qb), EACCES) << "the old one is no QP's any more";
  EXPECT_EQ(connect_qp(b.conn, qb, qa, nullptr), EAGAIN);
  // A's next RTR names B again: B reaches the new object.
  ASSERT_EQ(connect_qp(a.conn, qa, qb, nullptr), 0);
  ASSERT_EQ(get_fd(b.conn, a.id(), on, &fd, qb), 0);
  ::close(fd);
}

// GetMr over raw connections, with MR descriptors and posted receives written by hand into the
// owner's arena.
struct MrGrantCase {
  int status = -1;
  proto::GetMrRep rep{};
  std::vector<int> fds;
  ~MrGrantCase() {
    for (int f : fds) ::close(f);
  }
};
void get_mr(Conn& c, uint32_t owner, uint32_t via, uint32_t key, uint32_t access,
            MrGrantCase& out) {
  proto::GetMrReq req{owner, via, key, access};
  auto p = std::make_unique<Packet>();
  ASSERT_TRUE(c.call(Op::kGetMr, req, *p));
  out.status = p->header.status;
  if (const auto* rep = p->as<proto::GetMrRep>()) out.rep = *rep;
  for (int i = 0; i < p->nfds; ++i) out.fds.push_back(p->fds[i]);
}

TEST(DaemonTest, GetMrGrantsByRightsDomainAndPostedReceives) {
  DaemonFixture f;
  Client a(f.socket()), b(f.socket()), c(f.socket());
  uint32_t qa = 0, qb = 0, qc = 0;
  ASSERT_EQ(alloc_qpn(a.conn, kRc, TestArena::qp_offset(0), &qa), 0);
  ASSERT_EQ(alloc_qpn(b.conn, kRc, TestArena::qp_offset(0), &qb), 0);
  ASSERT_EQ(alloc_qpn(c.conn, kRc, TestArena::qp_offset(0), &qc), 0);
  EXPECT_EQ(connect_qp(b.conn, qb, qa, nullptr), EAGAIN);
  ASSERT_EQ(connect_qp(a.conn, qa, qb, nullptr), 0);
  // Three backings of two pages each, handed over as memory.
  int files[3];
  for (int i = 0; i < 3; ++i) {
    files[i] = ::memfd_create("mr", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    ASSERT_EQ(::ftruncate(files[i], 8192), 0);
    ASSERT_EQ(::fcntl(files[i], F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), 0);
    ASSERT_EQ(put_fd(a.conn, 20 + i, proto::FdKind::kMemory, files[i], 8192), 0);
  }
  auto* table = reinterpret_cast<shm::MrEntry*>(reinterpret_cast<char*>(a.arena.header()) +
                                                a.arena.header()->mr_table_offset);
  auto describe = [&](uint32_t slot, uint32_t key, uint32_t fd_id, uint64_t seg_len) {
    shm::MrEntry& e = table[slot];
    e.access = 0;
    e.nseg = 1;
    e.iova = e.va = e.map_start = 0x10000 * slot;
    e.length = e.map_length = seg_len;
    e.seg[0] = shm::MrSegment{fd_id, 0, 0, seg_len};
    e.key_gen.store(uint64_t(key) | 1ull << 32);
  };
  uint32_t ro = 0, local = 0, other_pd = 0, too_long = 0;
  ASSERT_EQ(alloc_key(a.conn, 5, &ro, IBV_ACCESS_REMOTE_READ | IBV_ACCESS_LOCAL_WRITE, 1), 0);
  ASSERT_EQ(alloc_key(a.conn, 6, &local, IBV_ACCESS_LOCAL_WRITE, 1), 0);
  ASSERT_EQ(alloc_key(a.conn, 7, &other_pd, IBV_ACCESS_REMOTE_READ, 2), 0);
  ASSERT_EQ(alloc_key(a.conn, 8, &too_long, IBV_ACCESS_REMOTE_READ, 1), 0);
  describe(5, ro, 20, 8192);
  describe(6, local, 21, 8192);
  describe(7, other_pd, 22, 8192);
  describe(8, too_long, 22, 16384);  // more than the file holds

  {  // Read rights: a grant, read-only, of exactly the MR's backing.
    MrGrantCase g;
    get_mr(b.conn, a.id(), qb, ro, IBV_ACCESS_REMOTE_READ, g);
    ASSERT_EQ(g.status, 0);
    EXPECT_EQ(g.rep.writable, 0u);
    EXPECT_EQ(g.rep.slot, 5u);
    EXPECT_EQ(g.rep.gen, 1u);
    ASSERT_EQ(g.fds.size(), 1u);
    EXPECT_EQ(::mmap(nullptr, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, g.fds[0], 0), MAP_FAILED);
    void* r = ::mmap(nullptr, 8192, PROT_READ, MAP_SHARED, g.fds[0], 0);
    EXPECT_NE(r, MAP_FAILED);
    if (r != MAP_FAILED) ::munmap(r, 8192);
  }
  MrGrantCase g1, g2, g3, g4, g5, g6;
  get_mr(b.conn, a.id(), qb, ro, IBV_ACCESS_REMOTE_WRITE, g1);
  EXPECT_EQ(g1.status, EACCES) << "no write rights";
  get_mr(b.conn, a.id(), qb, local, IBV_ACCESS_REMOTE_READ, g2);
  EXPECT_EQ(g2.status, EACCES) << "LOCAL only";
  get_mr(b.conn, a.id(), qb, other_pd, IBV_ACCESS_REMOTE_READ, g3);
  EXPECT_EQ(g3.status, EACCES) << "another protection domain";
  get_mr(b.conn, a.id(), qb, too_long, IBV_ACCESS_REMOTE_READ, g4);
  EXPECT_EQ(g4.status, EACCES) << "a segment beyond its file";
  get_mr(c.conn, a.id(), qc, ro, IBV_ACCESS_REMOTE_READ, g5);
  EXPECT_EQ(g5.status, EACCES) << "no agreed connection";
  get_mr(b.conn, a.id(), qb, local, IBV_ACCESS_LOCAL_WRITE, g6);
  EXPECT_EQ(g6.status, EACCES) << "no receive points into it";
  for (auto* g : {&g1, &g2, &g3, &g4, &g5, &g6}) EXPECT_TRUE(g->fds.empty());

  // A receive of A's QP points into the LOCAL-only MR: the connected sender may fill it.
  const uint32_t table_off = 2 << 20;
  auto* qp = a.arena.qp_at(TestArena::qp_offset(0));
  qp->recv_table_offset = table_off;
  auto* t = reinterpret_cast<shm::RecvTable*>(reinterpret_cast<char*>(a.arena.header()) + table_off);
  t->capacity = 4;
  t->max_sge = 1;
  t->slot_size = shm::recv_slot_size(1);
  auto* slot = reinterpret_cast<shm::RecvSlot*>(t->slots + 2 * t->slot_size);
  slot->num_sge = 1;
  slot->sge[0] = ibv_sge{0x60000, 64, local};
  slot->tag.store(3);
  {
    MrGrantCase g;
    get_mr(b.conn, a.id(), qb, local, IBV_ACCESS_LOCAL_WRITE, g);
    ASSERT_EQ(g.status, 0);
    EXPECT_EQ(g.rep.writable, 1u);
    ASSERT_EQ(g.fds.size(), 1u);
    void* w = ::mmap(nullptr, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, g.fds[0], 0);
    EXPECT_NE(w, MAP_FAILED);
    if (w != MAP_FAILED) ::munmap(w, 8192);
    MrGrantCase other;
    get_mr(c.conn, a.id(), qc, local, IBV_ACCESS_LOCAL_WRITE, other);
    EXPECT_EQ(other.status, EACCES) << "only over the QP the receive was posted on";
  }
  slot->tag.store(0);  // completed
  MrGrantCase after;
  get_mr(b.conn, a.id(), qb, local, IBV_ACCESS_LOCAL_WRITE, after);
  EXPECT_EQ(after.status, EACCES);
  for (int fd : files) ::close(fd);
}

TEST(DaemonTest, AllocKeyFormatUniquenessAndOwnership) {
  DaemonFixture f;
  Client a(f.socket()), b(f.socket());
  std::set<uint32_t> keys;
  int slot_in_key = 0;
  std::set<uint32_t> lows, highs;
  for (uint32_t i = 0; i < 300; ++i) {
    uint32_t index = 1 + (i * 37) % (shm::kMrSlots - 1);
    uint32_t key = 0;
    ASSERT_EQ(alloc_key(i % 2 ? a.conn : b.conn, index, &key), 0);
    EXPECT_NE(key, 0u);
    slot_in_key += (key & (shm::kMrSlots - 1)) == index;
    EXPECT_TRUE(keys.insert(key).second) << "duplicate key " << key;
    lows.insert(key & 0xffff);
    highs.insert(key >> 16);
  }
  // 32 random bits: nothing in a key says where its MR is.
  EXPECT_LT(slot_in_key, 5);
  EXPECT_GT(lows.size(), 290u);
  EXPECT_GT(highs.size(), 290u);

  uint32_t key = 0;
  EXPECT_EQ(alloc_key(a.conn, shm::kMrSlots, &key), EINVAL);
  EXPECT_EQ(alloc_key(a.conn, 0, &key), EINVAL);
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
  std::vector<std::unique_ptr<TestObject>> objs;
  ASSERT_EQ(alloc_qpn(a.conn, kRc, TestArena::qp_offset(0), &qa, &objs), 0);
  ASSERT_EQ(alloc_qpn(a.conn, kUd, TestArena::qp_offset(1), &qa2), 0);
  auto* qp = a.arena.qp_at(TestArena::qp_offset(0));
  qp->state.store(IBV_QPS_RTS);
  qp->counters.tx_ops.store(11);
  qp->counters.tx_bytes.store(2200);
  objs[0]->object()->rx_ops.store(3);  // kept by the senders, in the QP object
  objs[0]->object()->rx_bytes.store(300);
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
  EXPECT_EQ((*ja)["fds"], 3);  // the arena and two QP objects
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

TEST(DaemonTest, StatusShowsHowEachClientKeepsWritesWhilePagesMove) {
  DaemonFixture f;
  const std::pair<uint32_t, const char*> cases[] = {
      {shm::kGuardNone, "none"},
      {shm::kGuardUserOnly, "userfaultfd-user-only"},
      {shm::kGuardSyscall, "userfaultfd"},
      {shm::kGuardDevice, "/dev/userfaultfd"},
      {shm::kGuardUnknown, "unknown"},
      {77, "unknown"},  // a word no library writes
  };
  std::vector<std::unique_ptr<Client>> clients;
  for (const auto& [guard, name] : cases) {
    clients.push_back(std::make_unique<Client>(f.socket()));
    clients.back()->arena.header()->page_move_guard.store(guard);
  }
  Conn cli = Conn::open(f.socket());
  cli.hello(proto::ClientKind::kCli);
  json s = json::parse(cli.status());
  for (size_t i = 0; i < clients.size(); ++i) {
    const json* j = find_client(s, clients[i]->id());
    ASSERT_NE(j, nullptr);
    EXPECT_EQ((*j)["page_move_guard"], cases[i].second) << "guard word " << cases[i].first;
  }
}

TEST(DaemonTest, StatusIsTruncatedToFit) {
  DaemonFixture f;
  Client a(f.socket());
  // ~4096 MRs render to far more than kMaxStatusText.
  for (uint32_t i = 0; i < 1500; ++i) {
    uint32_t key;
    ASSERT_EQ(alloc_key(a.conn, i + 1, &key), 0);
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
  std::vector<std::unique_ptr<TestObject>> a_objs;
  ASSERT_EQ(alloc_qpn(a->conn, kRc, TestArena::qp_offset(0), &qa, &a_objs), 0);
  ASSERT_EQ(alloc_qpn(a->conn, kRc, TestArena::qp_offset(1), &qa2, &a_objs), 0);
  ASSERT_EQ(alloc_qpn(b.conn, kRc, TestArena::qp_offset(0), &qb), 0);
  ASSERT_EQ(alloc_qpn(b.conn, kRc, TestArena::qp_offset(1), &qb2), 0);
  ASSERT_EQ(alloc_qpn(c.conn, kRc, TestArena::qp_offset(0), &qc), 0);
  ASSERT_EQ(alloc_key(a->conn, 3, &key), 0);
  // Whether the other side agreed yet or not, each RTR is a link the death notices follow.
  ASSERT_EQ(connect_qp(b.conn, qb, qa, nullptr), EAGAIN);
  ASSERT_EQ(connect_qp(a->conn, qa, qb, nullptr), 0);
  ASSERT_EQ(connect_qp(b.conn, qb2, qa2, nullptr), EAGAIN);
  ASSERT_EQ(connect_qp(c.conn, qc, qb2, nullptr), EAGAIN);  // C is linked to B, not to A
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
    // What senders map says so too.
    EXPECT_EQ(a_objs[i]->object()->attrs.gone.load(), 1u);
  }
  // A's QPNs are gone: B cannot connect to them again, nor fetch A's fds.
  EXPECT_EQ(connect_qp(b.conn, qb, qa, nullptr), ENOENT);
  int fd = -1;
  EXPECT_EQ(get_fd(b.conn, a_id, 0, &fd), ENOENT);
  a.reset();
}

TEST(DaemonTest, FilesThatCouldShrinkAreRefused) {
  DaemonFixture f;
  Conn c = Conn::open(f.socket());
  c.hello();
  // A file that can shrink under a mapping would turn the daemon's (or a peer's) next access
  // into SIGBUS: it is never mapped.
  TestArena loose(1 << 20, shm::kArenaMagic, false);
  EXPECT_EQ(put_arena(c, loose), EPERM);
  TestObject loose_qp(c.client_id(), false);
  EXPECT_EQ(put_fd(c, 2, proto::FdKind::kQpObject, loose_qp.fd(), 8192), EPERM);
  EXPECT_EQ(put_fd(c, 3, proto::FdKind::kMemory, loose.fd(), 4096), EPERM);
  EXPECT_EQ(put_fd(c, 4, proto::FdKind::kSrqObject, loose.fd(), 4096), EPERM);
  // The key table must also refuse new writable mappings.
  TestArena keys(8192);
  EXPECT_EQ(put_fd(c, shm::kKeyTableFdId, proto::FdKind::kKeyTable, keys.fd(), 8192), EPERM);
  // A sealed file cannot be cut short afterwards.
  TestArena arena;
  EXPECT_EQ(put_arena(c, arena), 0);
  EXPECT_EQ(::ftruncate(arena.fd(), 0), -1);
  EXPECT_EQ(errno, EPERM);
  EXPECT_FALSE(c.status().empty());
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
  // Each departed client's QP was a destination of `keep`'s UD QP: a datagram QP loses nothing
  // when a destination goes, so it is told nothing (a connected QP is: LinksAndDeathNotices).
  auto p = std::make_unique<Packet>();
  int notices = 0;
  while (keep.conn.take_async(*p, 300)) ++notices;
  EXPECT_EQ(notices, 0);
  json s = json::parse(keep.conn.status());
  EXPECT_EQ(s["totals"]["clients"], 1);
  EXPECT_EQ(s["totals"]["qps"], 1);
}

// OpenXrcQp (ibv_open_qp): only for a holder of the QP's domain, only for an XRC_RECV QP of it.
TEST(DaemonTest, OpenXrcQpChecksTheDomainAndTheQp) {
  DaemonFixture f;
  Client a(f.socket());
  Client b(f.socket());
  auto p = std::make_unique<Packet>();
  auto open_xrcd = [&](Client& c, int fd, uint32_t oflags, uint32_t& id) {
    proto::OpenXrcdReq req{oflags, 0};
    if (!c.conn.call(Op::kOpenXrcd, req, *p, std::span<const int>(&fd, 1))) return -1;
    if (p->header.status == 0) id = p->as<proto::OpenXrcdRep>()->xrcd;
    return int(p->header.status);
  };
  auto open_qp = [&](Client& c, uint32_t qpn, uint32_t xrcd) {
    proto::OpenXrcQpReq req{qpn, xrcd};
    return c.conn.call(Op::kOpenXrcQp, req, *p) ? int(p->header.status) : -1;
  };
  FILE* shared = ::tmpfile();
  FILE* other = ::tmpfile();
  ASSERT_TRUE(shared && other);
  uint32_t xa = 0, xb_other = 0, xb = 0;
  ASSERT_EQ(open_xrcd(a, ::fileno(shared), O_CREAT, xa), 0);
  constexpr uint32_t kXrcRecv = static_cast<uint32_t>(proto::QpType::kXrcRecv);
  uint32_t recv = 0, rc = 0;
  ASSERT_EQ(alloc_qpn(a.conn, kXrcRecv, TestArena::qp_offset(0), &recv), 0);
  ASSERT_EQ(alloc_qpn(a.conn, kRc, TestArena::qp_offset(1), &rc), 0);
  proto::SetQpXrcdReq join{recv, xa};
  ASSERT_TRUE(a.conn.call(Op::kSetQpXrcd, join, *p));
  ASSERT_EQ(p->header.status, 0);

  EXPECT_EQ(open_qp(b, recv, xa), EACCES) << "a domain b never opened";
  ASSERT_EQ(open_xrcd(b, ::fileno(other), O_CREAT, xb_other), 0);
  EXPECT_NE(xb_other, xa);
  EXPECT_EQ(open_qp(b, recv, xb_other), EINVAL) << "the QP is of another domain";
  ASSERT_EQ(open_xrcd(b, ::fileno(shared), 0, xb), 0);
  EXPECT_EQ(xb, xa);
  EXPECT_EQ(open_qp(b, recv, xb), 0);
  EXPECT_EQ(open_qp(a, recv, xa), 0) << "its creator too";
  EXPECT_EQ(open_qp(b, rc, xb), EINVAL) << "not an XRC_RECV QP";
  EXPECT_EQ(open_qp(b, recv ^ 0x5a5a, xb), EINVAL) << "no such QP";
  EXPECT_EQ(open_qp(b, recv, 0), EINVAL) << "domain 0 is malformed";
  // b opened it: when a goes, the QP is b's (record, object and links), not gone with a.
  auto close_qp = [&](Client& c, uint32_t qpn, proto::CloseXrcQpRep* rep) {
    proto::CloseXrcQpReq req{qpn, 0};
    if (!c.conn.call(Op::kCloseXrcQp, req, *p)) return -1;
    if (rep && p->header.status == 0) *rep = *p->as<proto::CloseXrcQpRep>();
    return int(p->header.status);
  };
  a.conn.close();
  bool a_gone = false;
  for (int i = 0; i < 200 && !a_gone; ++i) {
    a_gone = json::parse(b.conn.status())["totals"]["clients"] == 1;
    if (!a_gone) ::usleep(10000);
  }
  ASSERT_TRUE(a_gone);
  EXPECT_EQ(json::parse(b.conn.status())["totals"]["qps"], 1) << "the QP outlives its maker";
  EXPECT_EQ(open_qp(b, recv, xb), 0);
  ASSERT_EQ(p->nfds, 1) << "with its object";
  p->close_fds();
  // Two handles of b (the open before a went, and this one): the first close keeps the QP.
  proto::CloseXrcQpRep rep{};
  ASSERT_EQ(close_qp(b, recv, &rep), 0);
  EXPECT_EQ(rep.kept, 1u);
  ASSERT_EQ(close_qp(b, recv, &rep), 0);
  EXPECT_EQ(rep.kept, 0u) << "b held it last: b frees it";
  EXPECT_NE(rep.object_fd_id, 0u);
  proto::FreeQpnReq free_req{recv};
  ASSERT_TRUE(b.conn.call(Op::kFreeQpn, free_req, *p));
  EXPECT_EQ(p->header.status, 0);
  EXPECT_EQ(open_qp(b, recv, xb), EINVAL) << "gone with its last handle";
  EXPECT_EQ(close_qp(b, recv, nullptr), EINVAL);
  ::fclose(shared);
  ::fclose(other);
}

}  // namespace
}  // namespace vrdma::daemon::testing
