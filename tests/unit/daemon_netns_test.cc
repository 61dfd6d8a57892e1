// Identity of clients in other network namespaces: address, name from /run/netns, tenants.
// Needs root (ip netns, setns); skipped otherwise.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <nlohmann/json.hpp>

#include "daemon_test_util.h"

namespace vrdma::daemon::testing {
namespace {

using nlohmann::json;

bool run(const std::string& cmd) {
  return std::system((cmd + " >/dev/null 2>&1").c_str()) == 0;
}

// A process living in a network namespace that connects to the daemon on request and hands
// the connected socket to the test. The daemon identifies the connection by that process.
class NsProcess {
 public:
  NsProcess(const std::string& netns_path, const std::string& socket) : socket_(socket) {
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) return;
    pid_ = ::fork();
    if (pid_ == 0) {
      // Child: only system calls from here on (the parent has threads).
      ::close(sv[0]);
      int ns = ::open(netns_path.c_str(), O_RDONLY | O_CLOEXEC);
      char ok = (ns >= 0 && ::setns(ns, CLONE_NEWNET) == 0) ? 'r' : 'e';
      if (::write(sv[1], &ok, 1) != 1 || ok != 'r') ::_exit(1);
      char cmd;
      if (::read(sv[1], &cmd, 1) != 1) ::_exit(1);
      int fd = unix_connect(socket_);
      if (fd < 0) ::_exit(2);
      if (send_packet(sv[1], proto::Op::kHello, 0, 0, nullptr, 0, std::span<const int>(&fd, 1)) !=
          0)
        ::_exit(3);
      if (::read(sv[1], &cmd, 1) < 0) ::_exit(4);  // wait until released (or the test dies)
      ::_exit(0);
    }
    ::close(sv[1]);
    ctrl_ = sv[0];
    char ready = 0;
    pollfd pfd{ctrl_, POLLIN, 0};
    ready_ = ::poll(&pfd, 1, kTimeoutMs) == 1 && ::read(ctrl_, &ready, 1) == 1 && ready == 'r';
  }
  ~NsProcess() {
    if (ctrl_ >= 0) ::close(ctrl_);  // releases the child
    if (pid_ > 0) {
      int status;
      ::waitpid(pid_, &status, 0);
    }
  }
  bool ready() const { return ready_; }
  pid_t pid() const { return pid_; }

  // Has the child connect; returns the connection.
  Conn connect() {
    char go = 'c';
    if (::write(ctrl_, &go, 1) != 1) return Conn();
    auto p = std::make_unique<Packet>();
    pollfd pfd{ctrl_, POLLIN, 0};
    if (::poll(&pfd, 1, kTimeoutMs) != 1 || recv_packet(ctrl_, *p) < 0 || p->nfds != 1)
      return Conn();
    return Conn(p->fds[0]);
  }

 private:
  std::string socket_;
  pid_t pid_ = -1;
  int ctrl_ = -1;
  bool ready_ = false;
};

class DaemonNetnsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root";
    if (!run("ip -V")) GTEST_SKIP() << "needs iproute2";
    // Unique per run and per repetition: a deleted namespace's devices go away asynchronously.
    static int round = 0;
    std::string tag =
        "dt" + std::to_string(::getpid() % 100000) + "r" + std::to_string(round++ % 100);
    for (char which : {'a', 'b', 'c'}) {
      std::string ns = "vrdma-" + tag + which;
      std::string host_if = "v" + tag + which;
      std::string addr = which == 'a'   ? "198.51.100.2/24"
                         : which == 'b' ? "198.51.100.130/24"
                                        : "198.51.100.3/24";
      names_.push_back(ns);
      links_.push_back(host_if);
      if (!run("ip netns add " + ns) ||
          !run("ip link add " + host_if + " type veth peer name eth0 netns " + ns) ||
          !run("ip -n " + ns + " addr add " + addr + " dev eth0") ||
          !run("ip -n " + ns + " link set eth0 up"))
        GTEST_SKIP() << "cannot create network namespaces here";
    }
    tag_ = tag;
  }
  void TearDown() override {
    for (const auto& l : links_) run("ip link del " + l);
    for (const auto& ns : names_) run("ip netns del " + ns);
  }
  std::vector<std::string> names_;
  std::vector<std::string> links_;
  std::string tag_;
};

TEST_F(DaemonNetnsTest, NamespacesGiveAddressNameAndTenant) {
  DaemonFixture f([](DaemonConfig& c) {
    std::string err;
    c.tenants.push_back(*parse_tenant_rule("t1=198.51.100.0/25", &err));
    c.tenants.push_back(*parse_tenant_rule("t2=198.51.100.128/25", &err));
  });
  NsProcess pa("/run/netns/vrdma-" + tag_ + "a", f.socket());
  NsProcess pb("/run/netns/vrdma-" + tag_ + "b", f.socket());
  NsProcess pc("/run/netns/vrdma-" + tag_ + "c", f.socket());
  ASSERT_TRUE(pa.ready() && pb.ready() && pc.ready());
  // C's namespace stays alive (its process is in it) but is no longer pinned: unnamed.
  ASSERT_TRUE(run("ip netns del vrdma-" + tag_ + "c"));
  names_.pop_back();

  Conn a = pa.connect(), b = pb.connect(), c = pc.connect();
  ASSERT_GE(a.fd(), 0);
  ASSERT_GE(b.fd(), 0);
  ASSERT_GE(c.fd(), 0);
  proto::HelloRep ha = a.hello(), hb = b.hello(), hc = c.hello();
  EXPECT_EQ(ha.ipv4, inet_addr("198.51.100.2"));
  EXPECT_EQ(std::string(ha.container), tag_ + "a");
  EXPECT_EQ(hb.ipv4, inet_addr("198.51.100.130"));
  EXPECT_EQ(std::string(hb.container), tag_ + "b");
  EXPECT_EQ(hc.ipv4, inet_addr("198.51.100.3"));
  EXPECT_EQ(std::string(hc.container), "pid:" + std::to_string(pc.pid()));
  uint8_t guid[8];
  std::memcpy(guid, &ha.node_guid, 8);
  const uint8_t want[8] = {0x02, 0x76, 0x72, 0x64, 198, 51, 100, 2};
  EXPECT_EQ(std::memcmp(guid, want, 8), 0);

  Conn host = Conn::open(f.socket());
  host.hello(proto::ClientKind::kCli);
  json s = json::parse(host.status());
  EXPECT_EQ(s["scope"], "all");
  std::map<std::string, std::string> tenant_of;
  for (const auto& cl : s["clients"]) tenant_of[cl["container"]] = cl["tenant"];
  EXPECT_EQ(tenant_of[tag_ + "a"], "t1");
  EXPECT_EQ(tenant_of[tag_ + "b"], "t2");
  // 198.51.100.3 is in t1's range, but an unpinned namespace cannot claim a tenant.
  EXPECT_EQ(tenant_of["pid:" + std::to_string(pc.pid())], "default");
  EXPECT_EQ(tenant_of["host"], "default");

  // Across tenants nothing connects and no descriptor is handed out.
  TestArena arena_a, arena_b, arena_c;
  ASSERT_EQ(put_arena(a, arena_a), 0);
  ASSERT_EQ(put_arena(b, arena_b), 0);
  ASSERT_EQ(put_arena(c, arena_c), 0);
  uint32_t qa = 0, qb = 0, qc = 0;
  ASSERT_EQ(alloc_qpn(a, 2, TestArena::qp_offset(0), &qa), 0);
  ASSERT_EQ(alloc_qpn(b, 2, TestArena::qp_offset(0), &qb), 0);
  ASSERT_EQ(alloc_qpn(c, 2, TestArena::qp_offset(0), &qc), 0);
  EXPECT_EQ(connect_qp(b, qb, qa, nullptr), EACCES);
  EXPECT_EQ(connect_qp(c, qc, qa, nullptr), EACCES);
  int fd = -1;
  EXPECT_EQ(get_fd(b, ha.client_id, 0, &fd), EACCES);
  // By GID: A's address names A.
  uint8_t gid[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 198, 51, 100, 2};
  EXPECT_EQ(connect_qp(b, qb, qa, gid), EACCES);
  gid[15] = 130;  // B's address, but qa is A's QP
  EXPECT_EQ(connect_qp(c, qc, qa, gid), ENOENT);

  // A container sees only its own tenant.
  json sa = json::parse(a.status());
  EXPECT_EQ(sa["scope"], "tenant:t1");
  ASSERT_EQ(sa["clients"].size(), 1u);
  EXPECT_EQ(sa["clients"][0]["container"], tag_ + "a");
}

}  // namespace
}  // namespace vrdma::daemon::testing
