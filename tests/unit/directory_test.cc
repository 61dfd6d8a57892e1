// Unit tests of the cluster directory's parts that need no etcd: configuration parsing,
// the embedded directory, base64 and the HTTP body decoder.
#include "daemon/directory/directory.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <string>

#include "daemon/core/config.h"
#include "daemon/directory/base64.h"
#include "daemon/directory/http_client.h"

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

TEST(DirectoryBase64, RoundTrips) {
  EXPECT_EQ(base64_encode(""), "");
  EXPECT_EQ(base64_encode("f"), "Zg==");
  EXPECT_EQ(base64_encode("fo"), "Zm8=");
  EXPECT_EQ(base64_encode("foo"), "Zm9v");
  EXPECT_EQ(base64_encode("/vrdma/"), "L3ZyZG1hLw==");
  std::string all;
  for (int i = 0; i < 256; ++i) all += static_cast<char>(i);
  for (size_t n = 0; n <= all.size(); n += 7)
    EXPECT_EQ(base64_decode(base64_encode(all.substr(0, n))), all.substr(0, n)) << n;
  EXPECT_EQ(base64_decode("Zm8="), "fo");
  for (const char* bad : {"Zm8", "Zm=v", "Z===", "Zm9v!A==", "=Zm9"})
    EXPECT_FALSE(base64_decode(bad)) << bad;
}

TEST(DirectoryHttp, DecodesChunkedBodiesInPieces) {
  const std::string wire =
      "7\r\n{\"a\":1}\r\n"
      "3;ext=1\r\n\n{\"\r\n"
      "6\r\nb\":2}\n\r\n"
      "0\r\nGrpc-Trailer: x\r\n\r\n";
  for (size_t step : {1u, 2u, 5u, 1000u}) {
    HttpBodyDecoder d;
    d.reset(HttpBodyDecoder::Framing::kChunked);
    std::string in, out;
    for (size_t i = 0; i < wire.size(); i += step) {
      in += wire.substr(i, step);
      ASSERT_TRUE(d.feed(in, &out)) << step;
    }
    EXPECT_TRUE(d.done()) << step;
    EXPECT_EQ(out, "{\"a\":1}\n{\"b\":2}\n") << step;
  }
  HttpBodyDecoder d;
  d.reset(HttpBodyDecoder::Framing::kChunked);
  std::string in = "zz\r\n", out;
  EXPECT_FALSE(d.feed(in, &out));
  d.reset(HttpBodyDecoder::Framing::kLength, 3);
  in = "abcdef";
  out.clear();
  ASSERT_TRUE(d.feed(in, &out));
  EXPECT_TRUE(d.done());
  EXPECT_EQ(out, "abc");
}

TEST(DirectoryHttp, ConnectionRefusedIsQuick) {
  HttpResponse resp;
  // Port 1 on loopback: nothing listens there in a test environment.
  int rc = http_post(HttpEndpoint{"127.0.0.1", 1}, "/v3/kv/range", "{}", 1000, &resp);
  EXPECT_EQ(rc, -ECONNREFUSED);
}

}  // namespace
}  // namespace vrdma::daemon
