// Unit tests of the cluster directory's parts that need no etcd: configuration parsing (TLS
// material included) and the embedded directory.
#include "daemon/directory/directory.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <string>

#include "daemon/core/config.h"
#include "test_pki.h"

namespace vrdma::daemon {
namespace {

uint32_t ip(const char* text) {
  in_addr in{};
  EXPECT_EQ(::inet_pton(AF_INET, text, &in), 1) << text;
  return in.s_addr;
}

Ipv4Cidr cidr(const char* text) {
  Ipv4Cidr net;
  std::string error;
  EXPECT_TRUE(parse_cidr(text, &net, &error)) << error;
  return net;
}

DaemonConfig embedded_config(std::vector<std::string> peers) {
  DaemonConfig cfg;
  cfg.host_id = 0;
  cfg.router_listen = "10.76.0.1:7471";
  cfg.pod_cidrs = {cidr("10.77.0.0/24")};
  cfg.static_peers = std::move(peers);
  return cfg;
}

std::unique_ptr<Directory> started(const DaemonConfig& cfg) {
  std::string error;
  auto dir = make_directory(cfg.directory_config(), &error);
  EXPECT_TRUE(dir) << error;
  if (dir) {
    EXPECT_EQ(dir->start(cfg.self_entry()), 0);
  }
  return dir;
}

TEST(DirectoryConfig, ParsesPeers) {
  std::string error;
  auto peer = parse_peer("3=10.76.0.4:7471=10.77.3.0/24,10.88.0.0/16", &error);
  ASSERT_TRUE(peer) << error;
  EXPECT_EQ(peer->host_id, 3u);
  EXPECT_EQ(peer->router, "10.76.0.4:7471");
  ASSERT_EQ(peer->cidrs.size(), 2u);
  EXPECT_EQ(cidr_text(peer->cidrs[0]), "10.77.3.0/24");
  EXPECT_EQ(cidr_text(peer->cidrs[1]), "10.88.0.0/16");
}

TEST(DirectoryConfig, RejectsBadPeers) {
  for (const char* bad :
       {"", "1", "1=10.76.0.2:7471", "x=10.76.0.2:7471=10.77.1.0/24", "1=10.76.0.2=10.77.1.0/24",
        "1=10.76.0.2:0=10.77.1.0/24", "1=10.76.0.2:70000=10.77.1.0/24", "1=host:7471=10.77.1.0/24",
        "1=10.76.0.2:7471=", "1=10.76.0.2:7471=10.77.1.0/24,", "1=10.76.0.2:7471=10.77.1.0/33",
        "1=10.76.0.2:7471=10.77.1/24"}) {
    std::string error;
    EXPECT_FALSE(parse_peer(bad, &error)) << bad;
    EXPECT_NE(error, "") << bad;
  }
}

TEST(DirectoryConfig, MakeDirectoryChecksTheSpecification) {
  std::string error;
  DaemonConfig cfg = embedded_config({"1=10.76.0.2:7471=10.77.1.0/24"});
  EXPECT_TRUE(make_directory(cfg.directory_config(), &error)) << error;

  cfg.static_peers = {"0=10.76.0.2:7471=10.77.1.0/24"};  // this host's own id
  EXPECT_FALSE(make_directory(cfg.directory_config(), &error));
  EXPECT_NE(error.find("own"), std::string::npos) << error;

  cfg.static_peers = {"1=10.76.0.2:7471=10.77.1.0/24", "1=10.76.0.3:7471=10.77.2.0/24"};
  EXPECT_FALSE(make_directory(cfg.directory_config(), &error));
  EXPECT_NE(error.find("twice"), std::string::npos) << error;

  cfg.static_peers = {"1=10.76.0.2:7471"};
  EXPECT_FALSE(make_directory(cfg.directory_config(), &error));

  cfg.static_peers.clear();
  vrdma::testing::TestPki pki(1);
  ASSERT_TRUE(pki.ok()) << pki.error();
  cfg.tls_ca = pki.ca();
  cfg.tls_cert = pki.cert("host-0");
  cfg.tls_key = pki.key("host-0");
  cfg.directory = "etcd://10.76.0.254:2379,127.0.0.1:2380";
  EXPECT_TRUE(make_directory(cfg.directory_config(), &error)) << error;
  cfg.directory = "etcd://localhost:2379/";
  EXPECT_TRUE(make_directory(cfg.directory_config(), &error)) << error;
  for (const char* bad : {"etcd://", "etcd://10.76.0.254", "etcd://10.76.0.254:2379,",
                          "etcd://etcd.example:2379", "zookeeper://1.2.3.4:2181", "", "Embedded"}) {
    cfg.directory = bad;
    error.clear();
    EXPECT_FALSE(make_directory(cfg.directory_config(), &error)) << bad;
    EXPECT_NE(error, "") << bad;
  }
  cfg.directory = "etcd://127.0.0.1:2379";
  cfg.static_peers = {"1=10.76.0.2:7471=10.77.1.0/24"};
  EXPECT_FALSE(make_directory(cfg.directory_config(), &error)) << "--peer with etcd";
  cfg.static_peers.clear();
  cfg.directory_lease_s = 0;
  EXPECT_FALSE(make_directory(cfg.directory_config(), &error));
}

TEST(DirectoryConfig, EtcdNeedsTheHostsOwnCertificate) {
  vrdma::testing::TestPki pki(2);
  ASSERT_TRUE(pki.ok()) << pki.error();
  DaemonConfig cfg = embedded_config({});
  cfg.host_id = 1;
  cfg.directory = "etcd://127.0.0.1:2379";
  std::string error;
  EXPECT_FALSE(make_directory(cfg.directory_config(), &error)) << "etcd without TLS";
  EXPECT_NE(error.find("--tls-ca"), std::string::npos) << error;

  cfg.tls_ca = pki.ca();
  cfg.tls_cert = pki.cert("host-1");
  cfg.tls_key = pki.key("host-1");
  EXPECT_TRUE(make_directory(cfg.directory_config(), &error)) << error;

  cfg.tls_cert = pki.cert("host-0");  // another host's
  cfg.tls_key = pki.key("host-0");
  EXPECT_FALSE(make_directory(cfg.directory_config(), &error));
  EXPECT_NE(error.find("vrdma-host-0"), std::string::npos) << error;
  EXPECT_NE(error.find("vrdma-host-1"), std::string::npos) << error;

  cfg.tls_cert = pki.cert("root");  // not a host's at all
  cfg.tls_key = pki.key("root");
  EXPECT_FALSE(make_directory(cfg.directory_config(), &error));

  cfg.tls_cert = pki.dir() + "/missing.pem";
  EXPECT_FALSE(make_directory(cfg.directory_config(), &error));
  EXPECT_NE(error.find("missing.pem"), std::string::npos) << error;

  cfg.tls_cert = pki.key("host-1");  // a key where the certificate belongs
  EXPECT_FALSE(make_directory(cfg.directory_config(), &error));

  // The embedded directory does not use them.
  cfg.directory = "embedded";
  cfg.tls_ca = cfg.tls_cert = cfg.tls_key = "";
  EXPECT_TRUE(make_directory(cfg.directory_config(), &error)) << error;
}

TEST(DirectoryConfig, ParsesAddressAndPort) {
  uint32_t addr = 0;
  uint16_t port = 0;
  ASSERT_TRUE(parse_ipv4_port("10.76.0.2:7471", &addr, &port));
  EXPECT_EQ(addr, ip("10.76.0.2"));
  EXPECT_EQ(port, 7471);
  for (const char* bad : {"10.76.0.2", "10.76.0.2:", ":7471", "10.76.0.2:x", "10.76.0.2:65536",
                          "10.76.0:7471", "[::1]:7471"})
    EXPECT_FALSE(parse_ipv4_port(bad, &addr, &port)) << bad;
}

TEST(DirectoryEmbedded, KnowsItselfAndItsPeers) {
  auto dir = started(embedded_config(
      {"1=10.76.0.2:7471=10.77.1.0/24", "2=10.76.0.3:7471=10.77.2.0/24,10.99.0.0/16"}));
  ASSERT_TRUE(dir);
  EXPECT_TRUE(dir->available());
  EXPECT_EQ(dir->describe(), "embedded: 3 hosts");

  HostEntry h;
  ASSERT_EQ(dir->host_of(ip("10.77.0.10"), &h), Lookup::kFound);
  EXPECT_EQ(h.host_id, 0u);
  EXPECT_EQ(h.router, "10.76.0.1:7471");
  ASSERT_EQ(dir->host_of(ip("10.77.1.10"), &h), Lookup::kFound);
  EXPECT_EQ(h.host_id, 1u);
  EXPECT_EQ(h.router, "10.76.0.2:7471");
  ASSERT_EQ(dir->host_of(ip("10.99.200.1"), &h), Lookup::kFound);
  EXPECT_EQ(h.host_id, 2u);
  EXPECT_EQ(dir->host_of(ip("10.77.3.10"), &h), Lookup::kNotFound);
  EXPECT_EQ(dir->host_of(ip("192.168.1.1"), &h), Lookup::kNotFound);

  ASSERT_EQ(dir->host_by_id(2, &h), Lookup::kFound);
  EXPECT_EQ(h.router, "10.76.0.3:7471");
  ASSERT_EQ(h.cidrs.size(), 2u);
  ASSERT_EQ(dir->host_by_id(0, &h), Lookup::kFound);
  EXPECT_EQ(h.router, "10.76.0.1:7471");
  EXPECT_EQ(dir->host_by_id(7, &h), Lookup::kNotFound);
  dir->stop();
}

TEST(DirectoryEmbedded, PublishedContainerBeatsNetworks) {
  auto dir = started(embedded_config({"1=10.76.0.2:7471=10.77.1.0/24"}));
  ASSERT_TRUE(dir);
  HostEntry h;
  ASSERT_EQ(dir->host_of(ip("10.77.1.99"), &h), Lookup::kFound);
  EXPECT_EQ(h.host_id, 1u);
  dir->publish_container(ip("10.77.1.99"), "odd");  // an address in the peer's network
  ASSERT_EQ(dir->host_of(ip("10.77.1.99"), &h), Lookup::kFound);
  EXPECT_EQ(h.host_id, 0u);
  dir->publish_container(ip("192.168.5.5"), "outside");  // in nobody's network
  ASSERT_EQ(dir->host_of(ip("192.168.5.5"), &h), Lookup::kFound);
  EXPECT_EQ(h.host_id, 0u);
  dir->withdraw_container(ip("10.77.1.99"));
  ASSERT_EQ(dir->host_of(ip("10.77.1.99"), &h), Lookup::kFound);
  EXPECT_EQ(h.host_id, 1u);
  dir->publish_listener(ip("192.168.5.5"), 7174);
  dir->withdraw_listener(ip("192.168.5.5"), 7174);
}

TEST(DirectoryEmbedded, LongestPrefixWins) {
  DaemonConfig cfg = embedded_config({"1=10.76.0.2:7471=10.77.0.128/25"});
  cfg.pod_cidrs = {cidr("10.77.0.0/16")};
  auto dir = started(cfg);
  ASSERT_TRUE(dir);
  HostEntry h;
  ASSERT_EQ(dir->host_of(ip("10.77.0.200"), &h), Lookup::kFound);
  EXPECT_EQ(h.host_id, 1u);
  ASSERT_EQ(dir->host_of(ip("10.77.0.20"), &h), Lookup::kFound);
  EXPECT_EQ(h.host_id, 0u);
}

TEST(DirectoryEmbedded, SingleHostWithoutRouter) {
  DaemonConfig cfg;  // what a one-host vrdmad has: no router, no networks
  auto dir = started(cfg);
  ASSERT_TRUE(dir);
  EXPECT_EQ(dir->describe(), "embedded: 1 host");
  HostEntry h;
  EXPECT_EQ(dir->host_of(ip("10.77.0.10"), &h), Lookup::kNotFound);
  dir->publish_container(ip("10.77.0.10"), "h0c0");
  ASSERT_EQ(dir->host_of(ip("10.77.0.10"), &h), Lookup::kFound);
  EXPECT_EQ(h.host_id, 0u);
  EXPECT_EQ(h.router, "");
}

}  // namespace
}  // namespace vrdma::daemon
