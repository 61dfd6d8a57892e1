// The etcd directory against a real etcd (/usr/bin/etcd) that each test starts on free
// loopback ports with a data directory of its own, and removes afterwards. etcd runs as a
// cluster's should: TLS with client certificates required, auth on, one user and role per host
// (etcd_auth.h). Two hosts seeing each other, lease expiry of a host that died, etcd going away
// and coming back, what each certificate may write, and entries that must be ignored.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <random>
#include <thread>

#include "daemon/core/config.h"
#include "daemon/directory/directory.h"
#include "daemon/directory/entries.h"
#include "etcd/etcd_auth.h"
#include "etcd/etcd_client.h"
#include "test_pki.h"

namespace vrdma::daemon {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr const char* kEtcdBinary = "/usr/bin/etcd";
constexpr int kLeaseS = 2;  // the shortest etcd grants
constexpr unsigned kHosts = 4;

// One PKI for the whole suite (key generation is the slow part).
const vrdma::testing::TestPki& pki() {
  static vrdma::testing::TestPki p(kHosts);
  return p;
}

std::string file_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The credentials of a PKI name ("root", "host-1", "rogue"); "" for none at all.
etcd::Credentials creds(const std::string& name) {
  etcd::Credentials c;
  c.ca_pem = file_text(pki().ca());
  if (!name.empty()) {
    c.cert_pem = file_text(pki().cert(name));
    c.key_pem = file_text(pki().key(name));
  }
  return c;
}

uint32_t ip(const char* text) {
  in_addr in{};
  EXPECT_EQ(::inet_pton(AF_INET, text, &in), 1) << text;
  return in.s_addr;
}

// A loopback TCP port nobody uses right now, below the kernel's ephemeral range (32768 and
// up by default): a port the kernel handed out and this test let go could be handed to another
// process's outgoing connection (the other etcd tests' clients, running alongside) before
// etcd binds it; one of these is only ever taken by a process that picks it by number.
uint16_t free_port() {
  static std::mt19937 rng(static_cast<uint32_t>(::getpid()) ^ std::random_device{}());
  std::uniform_int_distribution<int> pick(20000, 32767);
  for (int attempt = 0; attempt < 100; ++attempt) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sa.sin_port = htons(static_cast<uint16_t>(pick(rng)));
    const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0;
    ::close(fd);
    if (ok) return ntohs(sa.sin_port);
  }
  return 0;
}

// Polls `done` every 20 ms until it holds or `timeout` passed.
bool eventually(const std::function<bool()>& done, milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  for (;;) {
    if (done()) return true;
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(milliseconds(20));
  }
}

// One etcd member on loopback; killed and its directory removed on destruction.
class EtcdServer {
 public:
  EtcdServer() {
    char tmpl[] = "/tmp/vrdma-etcd-test-XXXXXX";
    if (::mkdtemp(tmpl)) dir_ = tmpl;
    client_port_ = free_port();
    peer_port_ = free_port();
  }
  ~EtcdServer() {
    kill();
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  // Starts etcd (again, on the same data directory and ports) and waits until it answers.
  ::testing::AssertionResult start() {
    if (dir_.empty() || !client_port_ || !peer_port_)
      return ::testing::AssertionFailure() << "no temporary directory or free port";
    std::string client = "https://127.0.0.1:" + std::to_string(client_port_);
    std::string peer = "http://127.0.0.1:" + std::to_string(peer_port_);
    // clang-format off
    std::vector<std::string> args = {kEtcdBinary,
                                     "--name", "vrdma-test",
                                     "--data-dir", dir_ + "/data",
                                     "--listen-client-urls", client,
                                     "--advertise-client-urls", client,
                                     "--listen-peer-urls", peer,
                                     "--initial-advertise-peer-urls", peer,
                                     "--initial-cluster", "vrdma-test=" + peer,
                                     "--client-cert-auth",
                                     "--trusted-ca-file", pki().ca(),
                                     "--cert-file", pki().cert("etcd"),
                                     "--key-file", pki().key("etcd")};
    // clang-format on
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::string log = dir_ + "/etcd.log";
    pid_ = ::fork();
    if (pid_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the test
      int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      if (fd >= 0) {
        ::dup2(fd, STDOUT_FILENO);
        ::dup2(fd, STDERR_FILENO);
      }
      ::execv(argv[0], argv.data());
      _exit(127);
    }
    if (pid_ < 0) return ::testing::AssertionFailure() << "fork failed";
    etcd::Client root({endpoint()}, creds("root"), 500);
    std::string error;
    bool up = eventually(
        [&] {
          std::vector<etcd::Kv> kvs;
          int64_t rev;
          if (root.range_prefix("/", &kvs, &rev, &error)) return true;
          root.next_endpoint();  // a fresh connection: do not wait for gRPC's backoff
          return false;
        },
        milliseconds(15000));
    if (!up)
      return ::testing::AssertionFailure()
             << "etcd did not answer within 15 s (" << error << "); its log:\n"
             << log_text();
    if (!auth_done_) {
      std::vector<uint32_t> ids;
      for (uint32_t id = 0; id < kHosts; ++id) ids.push_back(id);
      if (!etcd::setup_auth(root, ids, true, &error))
        return ::testing::AssertionFailure() << "setting up etcd's auth: " << error;
      auth_done_ = true;
    }
    return ::testing::AssertionSuccess();
  }

  void kill() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = 0;
  }

  etcd::Endpoint endpoint() const { return {"127.0.0.1", client_port_}; }
  std::string spec() const { return "etcd://127.0.0.1:" + std::to_string(client_port_); }
  std::string log_text() const {
    std::ifstream in(dir_ + "/etcd.log");
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

 private:
  std::string dir_;
  uint16_t client_port_ = 0;
  uint16_t peer_port_ = 0;
  pid_t pid_ = 0;
  bool auth_done_ = false;
};

class DirectoryEtcd : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::access(kEtcdBinary, X_OK) != 0)
      GTEST_SKIP() << kEtcdBinary << " is missing (Debian package etcd-server)";
    ASSERT_TRUE(pki().ok()) << pki().error();
    ASSERT_TRUE(etcd_.start());
  }

  // Host `id` owns 10.77.<id>.0/24 and routes at 10.76.0.<id+1>:7471.
  std::unique_ptr<Directory> host(uint32_t id, int lease_s = kLeaseS, std::string spec = {}) {
    DaemonConfig cfg;
    cfg.host_id = id;
    cfg.router_listen = "10.76.0." + std::to_string(id + 1) + ":7471";
    std::string error;
    Ipv4Cidr net;
    EXPECT_TRUE(parse_cidr("10.77." + std::to_string(id) + ".0/24", &net, &error));
    cfg.pod_cidrs = {net};
    cfg.directory = spec.empty() ? etcd_.spec() : spec;
    cfg.directory_lease_s = lease_s;
    cfg.tls_ca = pki().ca();
    cfg.tls_cert = pki().cert("host-" + std::to_string(id));
    cfg.tls_key = pki().key("host-" + std::to_string(id));
    auto dir = make_directory(cfg.directory_config(), &error);
    EXPECT_TRUE(dir) << error;
    if (dir) {
      EXPECT_EQ(dir->start(cfg.self_entry()), 0);
    }
    return dir;
  }

  static bool available(Directory& d, milliseconds timeout = milliseconds(5000)) {
    return eventually([&] { return d.available(); }, timeout);
  }

  // Waits until `d` says `addr` belongs to host `want` (-1: to nobody).
  static bool resolves(Directory& d, const char* addr, int want,
                       milliseconds timeout = milliseconds(5000)) {
    return eventually(
        [&] {
          HostEntry h;
          Lookup r = d.host_of(ip(addr), &h);
          return want < 0 ? r == Lookup::kNotFound
                          : r == Lookup::kFound && h.host_id == static_cast<uint32_t>(want);
        },
        timeout);
  }

  static bool knows_host(Directory& d, uint32_t id, bool want,
                         milliseconds timeout = milliseconds(5000)) {
    return eventually(
        [&] {
          HostEntry h;
          return (d.host_by_id(id, &h) == Lookup::kFound) == want;
        },
        timeout);
  }

  // The test's own clients wait this long for an answer: a TLS handshake in the sanitizer build
  // on a loaded machine can take more than a second, and their deadline is not what is tested.
  static constexpr int kClientTimeoutMs = 5000;

  // A client of etcd with the certificate of `who` ("root", "host-1", "rogue", "": none).
  std::unique_ptr<etcd::Client> client(const std::string& who) {
    return std::make_unique<etcd::Client>(std::vector<etcd::Endpoint>{etcd_.endpoint()}, creds(who),
                                          kClientTimeoutMs);
  }

  // The raw value of a key (read as root), "" if absent; *lease its lease.
  std::string raw_get(const std::string& key, int64_t* lease = nullptr) {
    std::vector<etcd::Kv> kvs;
    int64_t rev = 0;
    std::string error;
    // A new channel's TLS handshake can fail outright on a loaded machine ("handshaker
    // shutdown"): a few fresh attempts within a bound before the read counts as failed.
    bool ok = false;
    for (int attempt = 0; attempt < 5 && !ok; ++attempt) {
      if (attempt) std::this_thread::sleep_for(std::chrono::milliseconds(200));
      etcd::Client c({etcd_.endpoint()}, creds("root"), kClientTimeoutMs);
      ok = c.range_prefix(key, &kvs, &rev, &error);
    }
    EXPECT_TRUE(ok) << error;
    for (const auto& kv : kvs) {
      if (kv.key != key) continue;
      if (lease) *lease = kv.lease;
      return kv.value;
    }
    return "";
  }

  EtcdServer etcd_;
};

TEST_F(DirectoryEtcd, TwoHostsSeeEachOther) {
  auto a = host(0);
  auto b = host(1);
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(available(*a));
  ASSERT_TRUE(available(*b));

  ASSERT_TRUE(knows_host(*a, 1, true));
  HostEntry h;
  ASSERT_EQ(a->host_by_id(1, &h), Lookup::kFound);
  EXPECT_EQ(h.router, "10.76.0.2:7471");
  ASSERT_EQ(h.cidrs.size(), 1u);
  EXPECT_EQ(cidr_text(h.cidrs[0]), "10.77.1.0/24");
  EXPECT_TRUE(resolves(*a, "10.77.1.10", 1));
  EXPECT_TRUE(resolves(*b, "10.77.0.10", 0));
  EXPECT_TRUE(resolves(*a, "10.77.0.10", 0));  // itself
  EXPECT_TRUE(resolves(*a, "10.77.5.10", -1));
  EXPECT_NE(a->describe().find("available, lease "), std::string::npos) << a->describe();
  EXPECT_NE(a->describe().find("https://127.0.0.1:"), std::string::npos) << a->describe();
  EXPECT_NE(a->describe().find("2 hosts"), std::string::npos) << a->describe();

  // A published container appears under its host's prefix, and goes when withdrawn.
  b->publish_container(ip("10.77.1.10"), {"h1c0", ""});
  EXPECT_TRUE(eventually([&] { return raw_get("/vrdma/hosts/1/containers/10.77.1.10") != ""; },
                         milliseconds(5000)));
  auto value = nlohmann::json::parse(raw_get("/vrdma/hosts/1/containers/10.77.1.10"));
  EXPECT_EQ(value, nlohmann::json({{"name", "h1c0"}}));
  EXPECT_TRUE(resolves(*a, "10.77.1.10", 1));
  std::string tenant;
  EXPECT_EQ(a->tenant_of(ip("10.77.1.10"), &tenant), Lookup::kNotFound);  // it named none
  // Published again with a tenant (the platform named the pod's namespace): the entry is
  // replaced and the other host reads the tenant.
  b->publish_container(ip("10.77.1.10"), {"h1c0", "team-a"});
  EXPECT_TRUE(eventually(
      [&] { return a->tenant_of(ip("10.77.1.10"), &tenant) == Lookup::kFound; },
      milliseconds(5000)));
  EXPECT_EQ(tenant, "team-a");
  EXPECT_EQ(nlohmann::json::parse(raw_get("/vrdma/hosts/1/containers/10.77.1.10")),
            nlohmann::json({{"name", "h1c0"}, {"tenant", "team-a"}}));
  b->withdraw_container(ip("10.77.1.10"));
  EXPECT_TRUE(eventually([&] { return raw_get("/vrdma/hosts/1/containers/10.77.1.10") == ""; },
                         milliseconds(5000)));
  // One outside its networks is not published: every other host would refuse it.
  b->publish_container(ip("10.99.0.5"), {"odd", ""});
  ASSERT_EQ(b->host_of(ip("10.99.0.5"), &h), Lookup::kFound);  // it knows its own
  EXPECT_EQ(h.host_id, 1u);
  b->publish_listener(ip("10.77.1.10"), 7174);  // a later write: the one above came first
  EXPECT_TRUE(eventually([&] { return raw_get("/vrdma/hosts/1/listeners/10.77.1.10:7174") != ""; },
                         milliseconds(5000)));
  EXPECT_EQ(raw_get("/vrdma/hosts/1/containers/10.99.0.5"), "");
  EXPECT_TRUE(resolves(*a, "10.99.0.5", -1));
  b->withdraw_listener(ip("10.77.1.10"), 7174);
  EXPECT_TRUE(eventually([&] { return raw_get("/vrdma/hosts/1/listeners/10.77.1.10:7174") == ""; },
                         milliseconds(5000)));

  auto self = nlohmann::json::parse(raw_get("/vrdma/hosts/0/info"));
  EXPECT_EQ(self, nlohmann::json({{"router", "10.76.0.1:7471"}}));
  EXPECT_EQ(raw_get("/vrdma/hosts/0/networks/10.77.0.0/24"), "{}");
}

TEST_F(DirectoryEtcd, CleanStopRemovesEntriesAtOnce) {
  auto a = host(0);
  auto b = host(1, 30);  // a lease far longer than the wait below
  ASSERT_TRUE(a && b);
  b->publish_container(ip("10.77.1.10"), {"h1c0", ""});
  ASSERT_TRUE(eventually([&] { return raw_get("/vrdma/hosts/1/containers/10.77.1.10") != ""; },
                         milliseconds(5000)));
  ASSERT_TRUE(knows_host(*a, 1, true));
  auto t0 = Clock::now();
  b->stop();
  EXPECT_LT(Clock::now() - t0, milliseconds(2000)) << "stop() took too long";
  EXPECT_TRUE(knows_host(*a, 1, false, milliseconds(2000)));
  EXPECT_TRUE(resolves(*a, "10.77.1.10", -1, milliseconds(2000)));
  EXPECT_EQ(raw_get("/vrdma/hosts/1/info"), "");
  EXPECT_EQ(raw_get("/vrdma/hosts/1/containers/10.77.1.10"), "");
}

TEST_F(DirectoryEtcd, DeadHostExpiresWithItsLease) {
  auto a = host(0);
  auto b = host(1);
  ASSERT_TRUE(a && b);
  b->publish_container(ip("10.77.1.10"), {"h1c0", ""});
  ASSERT_TRUE(eventually([&] { return raw_get("/vrdma/hosts/1/containers/10.77.1.10") != ""; },
                         milliseconds(5000)));
  ASSERT_TRUE(resolves(*a, "10.77.1.10", 1));
  b->abandon();  // as if host 1 died: no revoke
  HostEntry h;
  EXPECT_EQ(a->host_by_id(1, &h), Lookup::kFound) << "gone before its lease ran out";
  // The lease runs out kLeaseS after the last keepalive; etcd checks expiry every 500 ms.
  EXPECT_TRUE(knows_host(*a, 1, false, milliseconds(kLeaseS * 1000 + 3000)));
  EXPECT_TRUE(resolves(*a, "10.77.1.10", -1, milliseconds(1000)));
  EXPECT_EQ(raw_get("/vrdma/hosts/1/containers/10.77.1.10"), "");
}

TEST_F(DirectoryEtcd, OutageMakesLookupsUnavailableAndRecovers) {
  auto a = host(0);
  auto b = host(1);
  ASSERT_TRUE(a && b);
  b->publish_container(ip("10.77.1.10"), {"h1c0", ""});
  ASSERT_TRUE(resolves(*a, "10.77.1.10", 1));
  a->publish_container(ip("10.77.0.10"), {"h0c0", ""});
  ASSERT_TRUE(eventually([&] { return raw_get("/vrdma/hosts/1/containers/10.77.1.10") != ""; },
                         milliseconds(5000)));

  etcd_.kill();
  ASSERT_TRUE(eventually([&] { return !a->available() && !b->available(); }, milliseconds(4000)));
  HostEntry h;
  EXPECT_EQ(a->host_of(ip("10.77.1.10"), &h), Lookup::kUnavailable);
  EXPECT_EQ(a->host_by_id(1, &h), Lookup::kUnavailable);
  // What a host knows of itself needs no etcd.
  ASSERT_EQ(a->host_of(ip("10.77.0.99"), &h), Lookup::kFound);
  EXPECT_EQ(h.host_id, 0u);
  ASSERT_EQ(a->host_of(ip("10.77.0.10"), &h), Lookup::kFound);
  EXPECT_EQ(h.host_id, 0u);
  EXPECT_EQ(a->host_by_id(0, &h), Lookup::kFound);
  EXPECT_NE(a->describe().find("unavailable"), std::string::npos) << a->describe();

  // Writes during the outage are applied once etcd is back.
  b->withdraw_container(ip("10.77.1.10"));
  b->publish_container(ip("10.77.1.11"), {"h1c1", ""});
  std::this_thread::sleep_for(milliseconds(500));  // a few failed retries

  ASSERT_TRUE(etcd_.start());
  EXPECT_TRUE(available(*a, milliseconds(10000)));
  EXPECT_TRUE(available(*b, milliseconds(10000)));
  EXPECT_TRUE(resolves(*a, "10.77.1.11", 1));
  EXPECT_TRUE(resolves(*b, "10.77.0.10", 0));
  EXPECT_TRUE(eventually([&] { return raw_get("/vrdma/hosts/1/containers/10.77.1.11") != ""; },
                         milliseconds(5000)));
  EXPECT_NE(raw_get("/vrdma/hosts/0/info"), "");
  EXPECT_NE(raw_get("/vrdma/hosts/1/info"), "");
  EXPECT_NE(raw_get("/vrdma/hosts/0/containers/10.77.0.10"), "");
  EXPECT_EQ(raw_get("/vrdma/hosts/1/containers/10.77.1.10"), "");
}

TEST_F(DirectoryEtcd, LostLeaseIsReplacedAndEntriesPublishedAgain) {
  auto a = host(0);
  auto b = host(1);
  ASSERT_TRUE(a && b);
  b->publish_container(ip("10.77.1.10"), {"h1c0", ""});
  ASSERT_TRUE(eventually([&] { return raw_get("/vrdma/hosts/1/containers/10.77.1.10") != ""; },
                         milliseconds(5000)));
  int64_t old_lease = 0;
  ASSERT_NE(raw_get("/vrdma/hosts/1/info", &old_lease), "");
  ASSERT_NE(old_lease, 0);

  // Revoking the lease behind b's back is what an expiry during a long pause looks like.
  std::string error;
  ASSERT_TRUE(client("root")->revoke(old_lease, &error)) << error;
  // Gone with its lease (b may already have noticed and published it again, under a new one).
  int64_t lease_now = 0;
  std::string info_now = raw_get("/vrdma/hosts/1/info", &lease_now);
  EXPECT_TRUE(info_now.empty() || lease_now != old_lease) << info_now;

  // b notices at its next keepalive (a third of the lease) and publishes itself again.
  int64_t new_lease = 0;
  EXPECT_TRUE(
      eventually([&] { return raw_get("/vrdma/hosts/1/containers/10.77.1.10", &new_lease) != ""; },
                 milliseconds(5000)));
  EXPECT_NE(new_lease, old_lease);
  EXPECT_NE(raw_get("/vrdma/hosts/1/info"), "");
  EXPECT_TRUE(resolves(*a, "10.77.1.10", 1));
  EXPECT_TRUE(knows_host(*a, 1, true));
  EXPECT_TRUE(b->available());
}

TEST_F(DirectoryEtcd, StartsWhileEtcdIsDown) {
  etcd_.kill();
  auto a = host(0);
  ASSERT_TRUE(a);
  a->publish_container(ip("10.77.0.7"), {"h0c0", ""});
  std::this_thread::sleep_for(milliseconds(300));
  EXPECT_FALSE(a->available());
  HostEntry h;
  EXPECT_EQ(a->host_of(ip("10.77.1.10"), &h), Lookup::kUnavailable);
  EXPECT_EQ(a->host_of(ip("10.77.0.7"), &h), Lookup::kFound);

  ASSERT_TRUE(etcd_.start());
  EXPECT_TRUE(available(*a, milliseconds(10000)));
  EXPECT_TRUE(eventually([&] { return raw_get("/vrdma/hosts/0/containers/10.77.0.7") != ""; },
                         milliseconds(5000)));
  EXPECT_TRUE(resolves(*a, "10.77.1.10", -1));
}

// What etcd lets each client do: nothing without a certificate of the cluster's CA, reading
// and writing under its own prefix only with a host's.
TEST_F(DirectoryEtcd, EachCertificateWritesOnlyItsOwnKeys) {
  auto a = host(0);
  ASSERT_TRUE(a);
  ASSERT_TRUE(available(*a));
  int64_t lease0 = 0;
  ASSERT_TRUE(eventually([&] { return raw_get("/vrdma/hosts/0/info", &lease0) != ""; },
                         milliseconds(5000)));
  const std::string original = raw_get("/vrdma/hosts/0/info");
  std::string error;
  std::vector<etcd::Kv> kvs;
  int64_t rev;

  for (const char* who : {"", "rogue"}) {  // no certificate; one of another CA
    auto c = client(who);
    EXPECT_FALSE(c->range_prefix("/vrdma/", &kvs, &rev, &error)) << who;
    EXPECT_FALSE(c->put("/vrdma/hosts/0/info", "{}", 0, &error)) << who;
  }
  etcd::Credentials plain;
  plain.tls = false;
  etcd::Client plaintext({etcd_.endpoint()}, plain, 1000);
  EXPECT_FALSE(plaintext.range_prefix("/vrdma/", &kvs, &rev, &error));

  auto h1 = client("host-1");
  ASSERT_TRUE(h1->range_prefix("/vrdma/", &kvs, &rev, &error)) << error;  // reads everything
  EXPECT_FALSE(kvs.empty());
  // The redirect of old: a container entry outside the host's prefix, and a forged host.
  EXPECT_FALSE(h1->put("/vrdma/containers/10.77.0.10", R"({"host":1,"name":"x"})", 0, &error));
  EXPECT_NE(error.find("permission denied"), std::string::npos) << error;
  EXPECT_FALSE(h1->put("/vrdma/hosts/0/containers/10.77.0.10", "{}", 0, &error));
  EXPECT_FALSE(
      h1->put("/vrdma/hosts/0/info", R"({"router":"10.76.0.2:7471","cidrs":[]})", 0, &error));
  EXPECT_FALSE(h1->remove("/vrdma/hosts/0/info", &error));
  EXPECT_FALSE(h1->put("/vrdma/hosts/10/info", "{}", 0, &error)) << "host 10 is not host 1";
  EXPECT_FALSE(h1->revoke(lease0, &error)) << "host 0's lease";
  EXPECT_FALSE(h1->txn({{false, "/vrdma/hosts/1/x", "{}", 0}, {true, "/vrdma/hosts/0/info", {}, 0}},
                       &error));
  EXPECT_EQ(raw_get("/vrdma/hosts/0/info"), original);
  EXPECT_EQ(raw_get("/vrdma/hosts/1/x"), "");
  // Its own prefix it may write.
  EXPECT_TRUE(h1->put("/vrdma/hosts/1/x", "{}", 0, &error)) << error;
  EXPECT_TRUE(h1->remove("/vrdma/hosts/1/x", &error)) << error;
  EXPECT_TRUE(a->available());
}

// Whatever a host writes under its own prefix, the others ignore what fails the checks, log it,
// and go on.
TEST_F(DirectoryEtcd, MalformedAndConflictingEntriesAreIgnored) {
  auto a = host(0);
  auto c = host(2);
  ASSERT_TRUE(a && c);
  ASSERT_TRUE(knows_host(*c, 0, true));
  auto h1 = client("host-1");
  std::string error;
  const std::string info1 = R"({"router":"10.76.0.2:7471"})";
  ASSERT_TRUE(h1->put("/vrdma/hosts/1/info", info1, 0, &error)) << error;
  ASSERT_TRUE(h1->put("/vrdma/hosts/1/networks/10.77.1.0/24", "{}", 0, &error)) << error;
  ASSERT_TRUE(knows_host(*c, 1, true));
  ASSERT_TRUE(resolves(*c, "10.77.0.10", 0));

  // Malformed values under host 1's own prefix.
  const std::string huge = R"({"name":")" + std::string(1 << 20, 'x') + "\"}";
  for (const std::string& v : {std::string(R"({"host":1,"name":5})"), std::string("not json {"),
                               std::string(R"({"name":["x"]})"), std::string("[]"), huge})
    ASSERT_TRUE(h1->put("/vrdma/hosts/1/containers/10.77.1.20", v, 0, &error)) << error;
  ASSERT_TRUE(h1->put("/vrdma/hosts/1/listeners/10.77.1.20:1", "\x01\x02", 0, &error)) << error;
  ASSERT_TRUE(h1->put("/vrdma/hosts/1/junk", "{}", 0, &error)) << error;
  // Claims on what host 0 holds: its container's address, and a piece of its network.
  ASSERT_TRUE(h1->put("/vrdma/hosts/1/containers/10.77.0.10", R"({"name":"fake"})", 0, &error));
  ASSERT_TRUE(h1->put("/vrdma/hosts/1/networks/10.77.0.0/25", "{}", 0, &error));
  ASSERT_TRUE(h1->put("/vrdma/hosts/1/networks/10.0.0.0/7", "{}", 0, &error));
  std::this_thread::sleep_for(milliseconds(500));
  EXPECT_TRUE(a->available());
  EXPECT_TRUE(c->available());
  EXPECT_TRUE(resolves(*c, "10.77.0.10", 0));
  EXPECT_TRUE(resolves(*c, "10.77.1.20", 1));
  HostEntry h;
  ASSERT_EQ(c->host_by_id(1, &h), Lookup::kFound);
  EXPECT_EQ(h.cidrs.size(), 1u) << "the network that overlaps host 0's is refused";

  // A host info entry that is itself malformed: that host is not known while it stands.
  ASSERT_TRUE(h1->put("/vrdma/hosts/1/info", R"({"router":7})", 0, &error));
  EXPECT_TRUE(knows_host(*c, 1, false));
  EXPECT_TRUE(resolves(*c, "10.77.1.20", -1));
  ASSERT_TRUE(h1->put("/vrdma/hosts/1/info", info1, 0, &error));
  EXPECT_TRUE(knows_host(*c, 1, true));
  EXPECT_TRUE(c->available() && a->available());

  // A directory that starts now reads all of it at once, and is not fooled either.
  auto late = host(3);
  ASSERT_TRUE(late);
  EXPECT_TRUE(available(*late));
  EXPECT_TRUE(resolves(*late, "10.77.0.10", 0));
  EXPECT_TRUE(resolves(*late, "10.77.1.20", 1));
}

TEST_F(DirectoryEtcd, StopIsBoundedWhenEtcdDoesNotAnswer) {
  // A socket that accepts connections (the kernel does) but never replies.
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(sa);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)), 0);
  ASSERT_EQ(::listen(fd, 64), 0);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len), 0);
  auto a = host(0, kLeaseS, "etcd://127.0.0.1:" + std::to_string(ntohs(sa.sin_port)));
  ASSERT_TRUE(a);
  std::this_thread::sleep_for(milliseconds(1500));
  EXPECT_FALSE(a->available());
  HostEntry h;
  EXPECT_EQ(a->host_of(ip("10.77.1.10"), &h), Lookup::kUnavailable);
  auto t0 = Clock::now();
  a->stop();
  EXPECT_LT(Clock::now() - t0, milliseconds(2500));
  ::close(fd);
}

}  // namespace
}  // namespace vrdma::daemon
