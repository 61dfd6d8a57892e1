// Identity of clients in other network namespaces: address, name from /run/netns, tenants,
// anonymous namespaces (unpinned, or made in another user namespace), duplicate addresses, and
// a pid reused between connect and accept. Needs root (ip netns, setns); skipped otherwise.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <nlohmann/json.hpp>
#include <tuple>

#include "daemon_test_util.h"

namespace vrdma::daemon::testing {
namespace {

using nlohmann::json;

bool run(const std::string& cmd) {
  return std::system((cmd + " >/dev/null 2>&1").c_str()) == 0;
}

// Writes `text` to `path`; for the child after fork (system calls only).
bool write_text(const char* path, const char* text) {
  int fd = ::open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  bool ok = ::write(fd, text, std::strlen(text)) == static_cast<ssize_t>(std::strlen(text));
  ::close(fd);
  return ok;
}

// A process living in a network namespace that connects to the daemon on request and hands
// the connected socket to the test. The daemon identifies the connection by that process.
// With an empty `netns_path` the process makes a user namespace and a network namespace of its
// own first, as `unshare -Urn` does.
class NsProcess {
 public:
  NsProcess(const std::string& netns_path, const std::string& socket) : socket_(socket) {
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) return;
    pid_ = ::fork();
    if (pid_ == 0) {
      // Child: only system calls from here on (the parent has threads).
      ::close(sv[0]);
      bool entered;
      if (netns_path.empty()) {
        entered = ::unshare(CLONE_NEWUSER | CLONE_NEWNET) == 0 &&
                  write_text("/proc/self/uid_map", "0 0 1") &&
                  write_text("/proc/self/setgroups", "deny") &&
                  write_text("/proc/self/gid_map", "0 0 1");
      } else {
        int ns = ::open(netns_path.c_str(), O_RDONLY | O_CLOEXEC);
        entered = ns >= 0 && ::setns(ns, CLONE_NEWNET) == 0;
      }
      char ok = entered ? 'r' : 'e';
      if (::write(sv[1], &ok, 1) != 1 || ok != 'r') ::_exit(1);
      char cmd;
      for (;;) {
        if (::read(sv[1], &cmd, 1) != 1) ::_exit(0);  // released (or the test died)
        if (cmd == 'q') ::_exit(0);
        int fd = unix_connect(socket_);
        if (fd < 0) ::_exit(2);
        if (send_packet(sv[1], proto::Op::kHello, 0, 0, nullptr, 0, std::span<const int>(&fd, 1)) !=
            0)
          ::_exit(3);
        // Keep it: the client is the process that holds its connection (the daemon checks so
        // without SO_PEERPIDFD). 'x': connect, hand over, exit.
        if (cmd == 'x') ::_exit(0);
      }
    }
    ::close(sv[1]);
    ctrl_ = sv[0];
    char ready = 0;
    pollfd pfd{ctrl_, POLLIN, 0};
    ready_ = ::poll(&pfd, 1, kTimeoutMs) == 1 && ::read(ctrl_, &ready, 1) == 1 && ready == 'r';
  }
  ~NsProcess() { stop(); }
  void stop() {
    // Other children may hold a copy of ctrl_ (fork), so closing it is not enough: ask.
    char quit = 'q';
    if (ctrl_ >= 0 && ::write(ctrl_, &quit, 1) != 1) ::kill(pid_, SIGKILL);
    if (ctrl_ >= 0) ::close(ctrl_);
    ctrl_ = -1;
    if (pid_ > 0) {
      int status;
      ::waitpid(pid_, &status, 0);
    }
    pid_ = -1;
  }
  bool ready() const { return ready_; }
  pid_t pid() const { return pid_; }

  // Has the child connect; returns the connection. With `then_exit`, the child exits once it
  // has handed the connection over (and is reaped), so its pid is free.
  Conn connect(bool then_exit = false) {
    char go = then_exit ? 'x' : 'c';
    if (::write(ctrl_, &go, 1) != 1) return Conn();
    auto p = std::make_unique<Packet>();
    pollfd pfd{ctrl_, POLLIN, 0};
    if (::poll(&pfd, 1, kTimeoutMs) != 1 || recv_packet(ctrl_, *p) < 0 || p->nfds != 1)
      return Conn();
    if (then_exit) stop();
    return Conn(p->fds[0]);
  }

 private:
  std::string socket_;
  pid_t pid_ = -1;
  int ctrl_ = -1;
  bool ready_ = false;
};

int hello_status(Conn& c, proto::ClientKind kind = proto::ClientKind::kVerbs) {
  proto::HelloReq req{proto::kVersion, static_cast<uint32_t>(kind)};
  auto p = std::make_unique<Packet>();
  if (!c.call(proto::Op::kHello, req, *p)) return -1;
  return p->header.status;
}

std::map<std::string, std::string> tenants_in(const json& status) {
  std::map<std::string, std::string> out;
  for (const auto& cl : status["clients"]) out[cl["container"]] = cl["tenant"];
  return out;
}

class DaemonNetnsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root";
    if (!run("ip -V")) GTEST_SKIP() << "needs iproute2";
    // Unique per run and per repetition: a deleted namespace's devices go away asynchronously.
    static int round = 0;
    std::string tag =
        "dt" + std::to_string(::getpid() % 100000) + "r" + std::to_string(round++ % 100);
    // a, b, c: three containers; d has a's address.
    for (char which : {'a', 'b', 'c', 'd'}) {
      std::string ns = "vrdma-" + tag + which;
      std::string host_if = "v" + tag + which;
      std::string addr = which == 'b'   ? "198.51.100.130/24"
                         : which == 'c' ? "198.51.100.3/24"
                                        : "198.51.100.2/24";
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
  std::string path(char which) const { return "/run/netns/vrdma-" + tag_ + which; }
  std::string name(char which) const { return tag_ + which; }
  // Unpins namespace `which`: it lives on (a process is in it) but is no longer named.
  void unpin(char which) {
    ASSERT_TRUE(run("ip netns del vrdma-" + tag_ + which));
    names_.erase(std::find(names_.begin(), names_.end(), "vrdma-" + tag_ + which));
  }
  std::vector<std::string> names_;
  std::vector<std::string> links_;
  std::string tag_;
};

void two_tenants(DaemonConfig& c) {
  std::string err;
  c.tenants.push_back(*parse_tenant_rule("t1=198.51.100.0/25", &err));
  c.tenants.push_back(*parse_tenant_rule("t2=198.51.100.128/25", &err));
}

TEST_F(DaemonNetnsTest, NamespacesGiveAddressNameAndTenant) {
  DaemonFixture f(two_tenants);
  NsProcess pa(path('a'), f.socket()), pb(path('b'), f.socket()), pc(path('c'), f.socket());
  ASSERT_TRUE(pa.ready() && pb.ready() && pc.ready());
  unpin('c');

  Conn a = pa.connect(), b = pb.connect(), c = pc.connect();
  ASSERT_GE(a.fd(), 0);
  ASSERT_GE(b.fd(), 0);
  ASSERT_GE(c.fd(), 0);
  proto::HelloRep ha = a.hello(), hb = b.hello();
  EXPECT_EQ(ha.ipv4, inet_addr("198.51.100.2"));
  EXPECT_EQ(std::string(ha.container), name('a'));
  EXPECT_EQ(hb.ipv4, inet_addr("198.51.100.130"));
  EXPECT_EQ(std::string(hb.container), name('b'));
  uint8_t guid[8];
  std::memcpy(guid, &ha.node_guid, 8);
  const uint8_t want[8] = {0x02, 0x76, 0x72, 0x64, 198, 51, 100, 2};
  EXPECT_EQ(std::memcmp(guid, want, 8), 0);

  // 198.51.100.3 is in t1's range, but an unpinned namespace is anonymous: no device.
  EXPECT_EQ(hello_status(c), EACCES);
  EXPECT_TRUE(c.closed_by_daemon());
  Conn c_status = pc.connect();
  ASSERT_EQ(hello_status(c_status, proto::ClientKind::kCli), 0) << "status needs no device";
  json sc = json::parse(c_status.status());
  EXPECT_EQ(sc["scope"], "container:pid:" + std::to_string(pc.pid()));
  ASSERT_EQ(sc["clients"].size(), 1u) << sc.dump();

  Conn host = Conn::open(f.socket());
  host.hello(proto::ClientKind::kCli);
  json s = json::parse(host.status());
  EXPECT_EQ(s["scope"], "all");
  auto tenant_of = tenants_in(s);
  EXPECT_EQ(tenant_of[name('a')], "t1");
  EXPECT_EQ(tenant_of[name('b')], "t2");
  EXPECT_EQ(tenant_of["pid:" + std::to_string(pc.pid())], "");
  EXPECT_EQ(tenant_of["host"], "@host");

  // Across tenants nothing connects (as if the QPN did not exist) and no descriptor is handed
  // out.
  TestArena arena_a, arena_b;
  ASSERT_EQ(put_arena(a, arena_a), 0);
  ASSERT_EQ(put_arena(b, arena_b), 0);
  uint32_t qa = 0, qb = 0;
  ASSERT_EQ(alloc_qpn(a, 2, TestArena::qp_offset(0), &qa), 0);
  ASSERT_EQ(alloc_qpn(b, 2, TestArena::qp_offset(0), &qb), 0);
  EXPECT_EQ(connect_qp(b, qb, qa, nullptr), ENOENT);
  EXPECT_EQ(connect_qp(b, qb, qa ^ 0x5a5a5, nullptr), ENOENT) << "the same as a live one";
  int fd = -1;
  EXPECT_EQ(get_fd(b, ha.client_id, 0, &fd), EACCES);
  // By GID: A's address names A.
  uint8_t gid[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 198, 51, 100, 2};
  EXPECT_EQ(connect_qp(b, qb, qa, gid), ENOENT);

  // A container sees only its own tenant.
  json sa = json::parse(a.status());
  EXPECT_EQ(sa["scope"], "tenant:t1");
  ASSERT_EQ(sa["clients"].size(), 1u);
  EXPECT_EQ(sa["clients"][0]["container"], name('a'));
}

TEST_F(DaemonNetnsTest, WithoutRulesEachContainerIsItsOwnTenant) {
  DaemonFixture f;
  NsProcess pa(path('a'), f.socket()), pc(path('c'), f.socket());
  ASSERT_TRUE(pa.ready() && pc.ready());
  Conn a = pa.connect(), c = pc.connect();
  a.hello();
  c.hello();
  TestArena arena_a, arena_c;
  ASSERT_EQ(put_arena(a, arena_a), 0);
  ASSERT_EQ(put_arena(c, arena_c), 0);
  uint32_t qa = 0, qc = 0;
  ASSERT_EQ(alloc_qpn(a, 2, TestArena::qp_offset(0), &qa), 0);
  ASSERT_EQ(alloc_qpn(c, 2, TestArena::qp_offset(0), &qc), 0);
  EXPECT_EQ(connect_qp(c, qc, qa, nullptr), ENOENT);
  EXPECT_EQ(connect_qp(a, qa, qc, nullptr), ENOENT);
  auto tenant_of = tenants_in(json::parse(a.status()));
  EXPECT_EQ(tenant_of.size(), 1u) << "it sees itself only";
  EXPECT_EQ(tenant_of[name('a')], "@198.51.100.2");
}

TEST_F(DaemonNetnsTest, StatusShowsOnlyTheViewersOwnKeys) {
  DaemonFixture f([](DaemonConfig& c) {
    std::string err;
    c.tenants.push_back(*parse_tenant_rule("shared=198.51.100.0/24", &err));
  });
  NsProcess pa(path('a'), f.socket()), pb(path('b'), f.socket());
  ASSERT_TRUE(pa.ready() && pb.ready());
  Conn a = pa.connect(), b = pb.connect();
  a.hello();
  b.hello();
  uint32_t ka = 0, kb = 0;
  ASSERT_EQ(alloc_key(a, 1, &ka), 0);
  ASSERT_EQ(alloc_key(b, 2, &kb), 0);
  char hex_a[16], hex_b[16];
  std::snprintf(hex_a, sizeof(hex_a), "0x%08x", ka);
  std::snprintf(hex_b, sizeof(hex_b), "0x%08x", kb);

  std::string text = a.status();
  EXPECT_NE(text.find(hex_a), std::string::npos) << "its own key";
  EXPECT_EQ(text.find(hex_b), std::string::npos) << "another container's key: " << text;
  json s = json::parse(text);
  EXPECT_EQ(s["clients"].size(), 2u) << "the other container of its tenant is listed";
  for (const auto& cl : s["clients"]) {
    ASSERT_EQ(cl["mrs"].size(), 1u);
    EXPECT_EQ(cl["mrs"][0].contains("key"), cl["container"] == name('a'));
    EXPECT_EQ(cl["mrs"][0]["length"], 4096);
  }
  ASSERT_EQ(s["containers"].size(), 1u) << "its own quota use only";
  EXPECT_EQ(s["containers"][0]["container"], name('a'));

  Conn host = Conn::open(f.socket());
  host.hello(proto::ClientKind::kCli);
  std::string all = host.status();
  EXPECT_NE(all.find(hex_a), std::string::npos);
  EXPECT_NE(all.find(hex_b), std::string::npos) << "root on the host sees every key";
  EXPECT_GE(json::parse(all)["containers"].size(), 3u);  // a, b, the host
}

TEST_F(DaemonNetnsTest, UnnamedNamespacesAreTrustedOnlyWhenConfigured) {
  DaemonFixture f([](DaemonConfig& c) {
    two_tenants(c);
    c.trust_unnamed_netns = true;
  });
  NsProcess pc(path('c'), f.socket());
  ASSERT_TRUE(pc.ready());
  unpin('c');
  Conn c = pc.connect();
  EXPECT_EQ(c.hello().ipv4, inet_addr("198.51.100.3"));
  auto tenant_of = tenants_in(json::parse(c.status()));
  EXPECT_EQ(tenant_of["pid:" + std::to_string(pc.pid())], "t1");
}

TEST_F(DaemonNetnsTest, NamespaceOfAnotherUserNamespaceIsAnonymous) {
  // Even with unnamed namespaces trusted and a rule for every address.
  DaemonFixture f([](DaemonConfig& c) {
    std::string err;
    c.tenants.push_back(*parse_tenant_rule("all=0.0.0.0/0", &err));
    c.trust_unnamed_netns = true;
  });
  NsProcess pu("", f.socket());
  if (!pu.ready()) GTEST_SKIP() << "cannot make user namespaces here";
  Conn u = pu.connect();
  ASSERT_GE(u.fd(), 0);
  EXPECT_EQ(hello_status(u), EACCES);
  EXPECT_TRUE(u.closed_by_daemon());
  Conn host = Conn::open(f.socket());
  host.hello(proto::ClientKind::kCli);
  json s = json::parse(host.status());
  for (const auto& cl : s["clients"]) EXPECT_NE(cl["kind"], "verbs") << s.dump();
}

TEST_F(DaemonNetnsTest, SecondNamespaceWithAnAddressInUseIsRefused) {
  DaemonFixture f;
  NsProcess pa(path('a'), f.socket()), pd(path('d'), f.socket());
  ASSERT_TRUE(pa.ready() && pd.ready());
  Conn a = pa.connect();
  EXPECT_EQ(a.hello().ipv4, inet_addr("198.51.100.2"));
  Conn d = pd.connect();
  EXPECT_EQ(hello_status(d), EADDRINUSE) << "198.51.100.2 is a's";
  EXPECT_TRUE(d.closed_by_daemon());
  Conn a2 = pa.connect();
  EXPECT_EQ(hello_status(a2), 0) << "the first namespace keeps its address";
  // Once a's clients are gone (its process, which holds them too, included), d may claim the
  // address.
  a.close();
  a2.close();
  pa.stop();
  bool d_served = false;
  for (int i = 0; i < 50 && !d_served; ++i) {
    Conn again = pd.connect();
    d_served = hello_status(again) == 0;
    if (!d_served) ::usleep(20000);
  }
  EXPECT_TRUE(d_served);
}

// A client connects and exits before the daemon accepts; another process gets its pid: in
// another container (b), or in the client's own namespace (c). The daemon must refuse the
// connection rather than take it for that process's container.
class PidReuseTest : public DaemonNetnsTest,
                     public ::testing::WithParamInterface<std::tuple<bool, bool>> {};

// Forks a process that enters `netns` and waits, trying to give it pid `want` (by setting the
// kernel's last pid). Returns its pid (== want on success) and its control pipe.
pid_t fork_with_pid(pid_t want, const std::string& netns, int* release_fd) {
  int pipefd[2];
  if (::pipe2(pipefd, O_CLOEXEC) < 0) return -1;
  int last = ::open("/proc/sys/kernel/ns_last_pid", O_WRONLY | O_CLOEXEC);
  if (last >= 0) {
    std::string v = std::to_string(want - 1);
    if (::write(last, v.data(), v.size()) < 0) {
    }
    ::close(last);
  }
  pid_t pid = ::fork();
  if (pid == 0) {
    // Only what a stranger would have: none of the test's descriptors (the connection included).
    for (int fd = 3; fd < 4096; ++fd)
      if (fd != pipefd[0]) ::close(fd);
    int ns = ::open(netns.c_str(), O_RDONLY | O_CLOEXEC);
    if (ns < 0 || ::setns(ns, CLONE_NEWNET) != 0) ::_exit(1);
    char b;
    if (::read(pipefd[0], &b, 1) < 0) ::_exit(2);
    ::_exit(0);
  }
  ::close(pipefd[0]);
  *release_fd = pipefd[1];
  return pid;
}

TEST_P(PidReuseTest, ReusedPidIsRefused) {
  const bool peer_pidfd = std::get<0>(GetParam());
  const char reuser = std::get<1>(GetParam()) ? 'c' : 'b';
  std::string dir = "/tmp/vrdmad-pidreuse-XXXXXX";
  ASSERT_NE(::mkdtemp(dir.data()), nullptr);
  DaemonConfig cfg;
  cfg.socket_path = dir + "/vrdmad.sock";
  cfg.peer_pidfd = peer_pidfd;
  two_tenants(cfg);
  Daemon d(cfg);
  ASSERT_EQ(d.start(), 0);  // listening, not accepting yet

  // Attempts until a process in b (the victim) gets the pid of the exited client from c.
  Conn attacker;
  pid_t reused = -1;
  int release_fd = -1;
  for (int attempt = 0; attempt < 20 && reused < 0; ++attempt) {
    NsProcess pc(path('c'), cfg.socket_path);
    ASSERT_TRUE(pc.ready());
    const pid_t client_pid = pc.pid();
    Conn conn = pc.connect(/*then_exit=*/true);  // connects, hands over, exits, reaped
    ASSERT_GE(conn.fd(), 0);
    int fd = -1;
    pid_t got = fork_with_pid(client_pid, path(reuser), &fd);
    ASSERT_GT(got, 0);
    if (got == client_pid) {
      reused = got;
      release_fd = fd;
      attacker = std::move(conn);
    } else {
      ::close(fd);
      ::kill(got, SIGKILL);
      int st;
      ::waitpid(got, &st, 0);
    }
  }
  if (reused < 0) GTEST_SKIP() << "could not arrange the reuse of a pid (busy machine)";
  ::usleep(50000);  // let the process enter b's namespace

  std::thread t([&] { d.run(); });
  EXPECT_EQ(hello_status(attacker), EACCES) << "taken for the container whose process has its pid";
  EXPECT_TRUE(attacker.closed_by_daemon());
  // A live client is identified as always, on either path.
  NsProcess pa(path('a'), cfg.socket_path);
  ASSERT_TRUE(pa.ready());
  Conn a = pa.connect();
  EXPECT_EQ(a.hello().ipv4, inet_addr("198.51.100.2"));
  d.stop();
  t.join();
  ::close(release_fd);
  ::kill(reused, SIGKILL);  // other children may hold the pipe's write end
  int st;
  ::waitpid(reused, &st, 0);
  ::rmdir(dir.c_str());
}

INSTANTIATE_TEST_SUITE_P(PeerPidfdAndFallback, PidReuseTest,
                         ::testing::Combine(::testing::Bool(), ::testing::Bool()),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param) ? "SoPeerPidfd"
                                                                      : "WithoutSoPeerPidfd") +
                                  (std::get<1>(info.param) ? "SameNamespace" : "OtherContainer");
                         });

// ibv_open_qp across processes, attacked from another tenant: a process of t2 that opens the same
// file (its own domain), or forges QP numbers and domains, opens, closes, connects, moves or
// frees nothing of t1's shared XRC_RECV QP; t1's holder keeps it when its maker goes.
TEST_F(DaemonNetnsTest, AnotherTenantCannotOpenOrAffectASharedXrcQp) {
  DaemonFixture f(two_tenants);
  NsProcess pa(path('a'), f.socket()), pa2(path('a'), f.socket()), pb(path('b'), f.socket());
  ASSERT_TRUE(pa.ready() && pa2.ready() && pb.ready());
  Conn maker = pa.connect(), holder = pa2.connect(), hostile = pb.connect();
  ASSERT_TRUE(maker.fd() >= 0 && holder.fd() >= 0 && hostile.fd() >= 0);
  maker.hello();
  holder.hello();
  hostile.hello();
  auto p = std::make_unique<Packet>();
  auto open_xrcd = [&](Conn& c, int fd, uint32_t& id) {
    proto::OpenXrcdReq req{O_CREAT, 0};
    if (!c.call(proto::Op::kOpenXrcd, req, *p, std::span<const int>(&fd, 1))) return -1;
    if (p->header.status == 0) id = p->as<proto::OpenXrcdRep>()->xrcd;
    return int(p->header.status);
  };
  auto status_of = [&](Conn& c, proto::Op op, const auto& req) {
    if (!c.call(op, req, *p)) return -1;
    p->close_fds();
    return int(p->header.status);
  };
  FILE* file = ::tmpfile();
  ASSERT_NE(file, nullptr);
  TestArena arena_m, arena_h;
  ASSERT_EQ(put_arena(maker, arena_m), 0);
  ASSERT_EQ(put_arena(hostile, arena_h), 0);
  uint32_t xm = 0, xh = 0, xbad = 0;
  ASSERT_EQ(open_xrcd(maker, ::fileno(file), xm), 0);
  ASSERT_EQ(open_xrcd(holder, ::fileno(file), xh), 0);
  EXPECT_EQ(xh, xm);
  ASSERT_EQ(open_xrcd(hostile, ::fileno(file), xbad), 0);
  EXPECT_NE(xbad, xm) << "one file, two tenants: two domains";
  constexpr uint32_t kXrcRecv = static_cast<uint32_t>(proto::QpType::kXrcRecv);
  constexpr uint32_t kXrcSend = static_cast<uint32_t>(proto::QpType::kXrcSend);
  uint32_t recv = 0, bad_send = 0;
  ASSERT_EQ(alloc_qpn(maker, kXrcRecv, TestArena::qp_offset(0), &recv), 0);
  ASSERT_EQ(status_of(maker, proto::Op::kSetQpXrcd, proto::SetQpXrcdReq{recv, xm}), 0);
  ASSERT_EQ(status_of(holder, proto::Op::kOpenXrcQp, proto::OpenXrcQpReq{recv, xh}), 0);
  ASSERT_EQ(alloc_qpn(hostile, kXrcSend, TestArena::qp_offset(0), &bad_send), 0);

  // The hostile tenant: every way in is refused, as a number that does not exist would be.
  EXPECT_EQ(status_of(hostile, proto::Op::kOpenXrcQp, proto::OpenXrcQpReq{recv, xbad}), EINVAL);
  EXPECT_EQ(status_of(hostile, proto::Op::kOpenXrcQp, proto::OpenXrcQpReq{recv, xm}), EACCES);
  for (uint32_t forged : {recv ^ 1u, recv + 0x100u})
    EXPECT_EQ(status_of(hostile, proto::Op::kOpenXrcQp, proto::OpenXrcQpReq{forged, xbad}), EINVAL);
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(status_of(hostile, proto::Op::kCloseXrcQp, proto::CloseXrcQpReq{recv, 0}), EINVAL);
  EXPECT_EQ(status_of(hostile, proto::Op::kSetQpXrcd, proto::SetQpXrcdReq{recv, xbad}), EPERM);
  proto::ConnectQpReq as_recv{recv, bad_send, {}};
  EXPECT_EQ(status_of(hostile, proto::Op::kConnectQp, as_recv), EPERM);
  proto::ConnectQpReq to_recv{bad_send, recv, {}};
  EXPECT_NE(status_of(hostile, proto::Op::kConnectQp, to_recv), 0);
  EXPECT_NE(status_of(hostile, proto::Op::kFreeQpn, proto::FreeQpnReq{recv}), 0);
  int fd = -1;
  EXPECT_EQ(get_fd(hostile, maker.client_id(), 2, &fd), EACCES);

  // The victim's QP is untouched: the maker goes, the holder (one handle) keeps it, and its last
  // close makes it the holder's to free.
  maker.close();
  pa.stop();  // its process held a copy of the connection
  bool gone = false;
  for (int i = 0; i < 200 && !gone; ++i) {
    gone = json::parse(holder.status())["clients"].size() == 1;
    if (!gone) ::usleep(10000);
  }
  ASSERT_TRUE(gone) << holder.status();
  ASSERT_TRUE(holder.call(proto::Op::kCloseXrcQp, proto::CloseXrcQpReq{recv, 0}, *p));
  ASSERT_EQ(p->header.status, 0);
  const auto* rep = p->as<proto::CloseXrcQpRep>();
  ASSERT_NE(rep, nullptr);
  EXPECT_EQ(rep->kept, 0u) << "its one handle was the last";
  EXPECT_NE(rep->object_fd_id, 0u) << "the object is the holder's now";
  EXPECT_EQ(status_of(holder, proto::Op::kFreeQpn, proto::FreeQpnReq{recv}), 0);
  ::fclose(file);
}

}  // namespace
}  // namespace vrdma::daemon::testing
