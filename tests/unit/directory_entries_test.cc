// The etcd directory's entries: keys and values as written, every check a value must pass
// (bad ones ignored, never fatal), and how the view weighs the hosts' claims against each other.
#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <string>

#include "daemon/directory/directory_view.h"
#include "daemon/directory/entries.h"
#include "etcd/etcd_auth.h"

namespace vrdma::daemon {
namespace {

uint32_t net(const char* text) {
  in_addr in{};
  EXPECT_EQ(::inet_pton(AF_INET, text, &in), 1) << text;
  return in.s_addr;
}
uint32_t hostorder(const char* text) {
  return ntohl(net(text));
}

Ipv4Cidr cidr(const char* text) {
  Ipv4Cidr c;
  std::string error;
  EXPECT_TRUE(parse_cidr(text, &c, &error)) << error;
  return c;
}

HostEntry host(uint32_t id, std::vector<const char*> cidrs) {
  HostEntry h;
  h.host_id = id;
  h.router = "10.76.0." + std::to_string(id + 1) + ":7471";
  for (const char* c : cidrs) h.cidrs.push_back(cidr(c));
  return h;
}

TEST(DirectoryEntries, KeysRoundTrip) {
  EXPECT_EQ(host_info_key(3), "/vrdma/hosts/3/info");
  EXPECT_EQ(container_key(3, net("10.77.3.10")), "/vrdma/hosts/3/containers/10.77.3.10");
  EXPECT_EQ(listener_key(3, net("10.77.3.10"), 7174), "/vrdma/hosts/3/listeners/10.77.3.10:7174");
  // What etcd's auth lets host 3 write is exactly its keys' prefix.
  EXPECT_EQ(host_prefix(3), etcd::host_write_prefix(3));
  EXPECT_EQ(std::string(kDirectoryRoot), etcd::kDirectoryPrefix);
  EXPECT_TRUE(host_info_key(3).starts_with(host_prefix(3)));
  EXPECT_FALSE(host_info_key(30).starts_with(host_prefix(3)));

  std::string why;
  auto k = parse_entry_key(container_key(7, net("10.77.7.12")), &why);
  ASSERT_TRUE(k) << why;
  EXPECT_EQ(k->kind, EntryKind::kContainer);
  EXPECT_EQ(k->host, 7u);
  EXPECT_EQ(k->ipv4, hostorder("10.77.7.12"));
  k = parse_entry_key(listener_key(7, net("10.77.7.12"), 80), &why);
  ASSERT_TRUE(k) << why;
  EXPECT_EQ(k->kind, EntryKind::kListener);
  EXPECT_EQ(k->port, 80);
  k = parse_entry_key(host_info_key(4294967295u), &why);
  ASSERT_TRUE(k) << why;
  EXPECT_EQ(k->host, 4294967295u);
}

TEST(DirectoryEntries, RefusesKeysOutsideTheLayout) {
  for (const char* bad : {"/vrdma/containers/10.77.0.10",  // the old layout: no host prefix
                          "/vrdma/hosts/1",
                          "/vrdma/hosts/",
                          "/vrdma/hosts//info",
                          "/vrdma/hosts/01/info",
                          "/vrdma/hosts/+1/info",
                          "/vrdma/hosts/-1/info",
                          "/vrdma/hosts/4294967296/info",
                          "/vrdma/hosts/1/info/",
                          "/vrdma/hosts/1/infox",
                          "/vrdma/hosts/1/other",
                          "/vrdma/hosts/1/containers/",
                          "/vrdma/hosts/1/containers/10.77.1.010",
                          "/vrdma/hosts/1/containers/10.77.1",
                          "/vrdma/hosts/1/containers/0.0.0.0",
                          "/vrdma/hosts/1/containers/255.255.255.255",
                          "/vrdma/hosts/1/containers/224.0.0.1",
                          "/vrdma/hosts/1/containers/10.77.1.10 ",
                          "/vrdma/hosts/1/listeners/10.77.1.10",
                          "/vrdma/hosts/1/listeners/10.77.1.10:0",
                          "/vrdma/hosts/1/listeners/10.77.1.10:65536",
                          "/vrdma/hosts/1/listeners/10.77.1.10:080",
                          "/vrdma/hosts/1/listeners/:80",
                          "",
                          "/other/hosts/1/info"}) {
    std::string why;
    EXPECT_FALSE(parse_entry_key(bad, &why)) << bad;
    EXPECT_NE(why, "") << bad;
  }
  std::string why;
  std::string with_nul("/vrdma/hosts/1/info\0", 20);
  EXPECT_FALSE(parse_entry_key(with_nul, &why));
}

TEST(DirectoryEntries, HostInfoValues) {
  HostEntry h = host(2, {"10.77.2.0/24", "10.88.0.0/16"});
  std::string why;
  auto back = parse_host_info(2, host_info_value(h), &why);
  ASSERT_TRUE(back) << why;
  EXPECT_EQ(back->host_id, 2u);
  EXPECT_EQ(back->router, h.router);
  ASSERT_EQ(back->cidrs.size(), 2u);
  EXPECT_EQ(cidr_text(back->cidrs[1]), "10.88.0.0/16");

  // Unknown fields are ignored; an empty router is a host without one.
  auto ok = parse_host_info(2, R"({"router":"","cidrs":[],"future":{"x":[1,2]}})", &why);
  ASSERT_TRUE(ok) << why;
  EXPECT_EQ(ok->router, "");

  for (const char* bad :
       {"",
        "null",
        "[]",
        "\"x\"",
        "{",
        "not json",
        R"({"cidrs":[]})",
        R"({"router":7,"cidrs":[]})",
        R"({"router":"10.76.0.2:7471"})",
        R"({"router":"10.76.0.2:7471","cidrs":"10.77.2.0/24"})",
        R"({"router":"10.76.0.2:7471","cidrs":[5]})",
        R"({"router":"10.76.0.2:7471","cidrs":["10.77.2.5/24"]})",  // host bits set
        R"({"router":"10.76.0.2:7471","cidrs":["0.0.0.0/0"]})",
        R"({"router":"10.76.0.2:7471","cidrs":["10.0.0.0/7"]})",
        R"({"router":"10.76.0.2:7471","cidrs":["10.77.2.0/33"]})",
        R"({"router":"10.76.0.2","cidrs":[]})",
        R"({"router":"10.76.0.2:0","cidrs":[]})",
        R"({"router":"0.0.0.0:7471","cidrs":[]})",
        R"({"router":"239.1.1.1:7471","cidrs":[]})",
        R"({"router":"host.example:7471","cidrs":[]})"}) {
    why.clear();
    EXPECT_FALSE(parse_host_info(2, bad, &why)) << bad;
    EXPECT_NE(why, "") << bad;
  }
  std::string many = R"({"router":"","cidrs":[)";
  for (int i = 0; i < 17; ++i) many += (i ? ",\"10." : "\"10.") + std::to_string(i) + ".0.0/16\"";
  many += "]}";
  EXPECT_FALSE(parse_host_info(2, many, &why));
  std::string huge =
      R"({"router":"","cidrs":[],"pad":")" + std::string(kMaxValueBytes, 'x') + "\"}";
  EXPECT_FALSE(parse_host_info(2, huge, &why));
  EXPECT_NE(why.find("bytes"), std::string::npos) << why;
}

TEST(DirectoryEntries, ContainerValues) {
  std::string why;
  auto name = parse_container_value(container_value("h1c0"), &why);
  ASSERT_TRUE(name) << why;
  EXPECT_EQ(*name, "h1c0");
  EXPECT_EQ(parse_container_value("{}", &why).value_or("?"), "");
  EXPECT_EQ(parse_container_value(R"({"name":"a","host":99})", &why).value_or("?"), "a");
  // The value that once killed every vrdmad, and its relatives.
  for (const char* bad :
       {R"({"host":1,"name":5})", R"({"name":["x"]})", R"({"name":null})", R"({"name":"a b"})",
        R"({"name":"tab\t"})", "[1]", "5", "", "{\"name\":\"\xff\"}"}) {
    why.clear();
    EXPECT_FALSE(parse_container_value(bad, &why)) << bad;
    EXPECT_NE(why, "") << bad;
  }
  EXPECT_FALSE(parse_container_value(R"({"name":")" + std::string(254, 'a') + "\"}", &why));
  EXPECT_TRUE(parse_listener_value(listener_value(), &why));
  EXPECT_FALSE(parse_listener_value("{{", &why));
  // A name JSON cannot hold as text still makes a valid value.
  EXPECT_NO_THROW(container_value(std::string("\xff\xfe", 2)));
}

TEST(DirectoryEntries, PrintableEscapes) {
  EXPECT_EQ(printable("/vrdma/x"), "/vrdma/x");
  EXPECT_EQ(printable(std::string("a\0\n\\", 4)), "a\\x00\\x0a\\x5c");
  EXPECT_EQ(printable(std::string(500, 'k'), 10), std::string(10, 'k') + "...");
}

DirectoryUpdate put(std::string key, std::string value, int64_t rev) {
  return DirectoryUpdate{false, std::move(key), std::move(value), rev};
}
DirectoryUpdate del(std::string key) {
  return DirectoryUpdate{true, std::move(key), {}, 0};
}

uint32_t owner(const DirectoryView& v, const char* addr) {
  auto h = v.host_of(hostorder(addr));
  return h ? h->host_id : 999;
}

TEST(DirectoryView, KnowsValidHostsAndTheirContainers) {
  DirectoryView v(host(0, {"10.77.0.0/24"}));
  EXPECT_EQ(v.apply(put(host_info_key(1), host_info_value(host(1, {"10.77.1.0/24"})), 5)), "");
  EXPECT_EQ(v.apply(put(container_key(1, net("10.77.1.10")), container_value("h1c0"), 6)), "");
  EXPECT_TRUE(v.settle().empty());
  EXPECT_EQ(v.hosts_known(), 2u);
  EXPECT_EQ(owner(v, "10.77.1.10"), 1u);
  EXPECT_EQ(owner(v, "10.77.1.99"), 1u);
  EXPECT_EQ(owner(v, "10.77.0.5"), 0u);
  EXPECT_EQ(owner(v, "10.77.2.5"), 999u);
  ASSERT_TRUE(v.host_by_id(1));
  EXPECT_EQ(v.host_by_id(1)->router, "10.76.0.2:7471");
  EXPECT_FALSE(v.host_by_id(2));

  v.apply(del(host_info_key(1)));
  v.settle();
  EXPECT_FALSE(v.host_by_id(1));
  EXPECT_EQ(owner(v, "10.77.1.10"), 999u) << "a container of an unknown host counts for nothing";
}

TEST(DirectoryView, MalformedEntriesAreIgnoredNotFatal) {
  DirectoryView v(host(0, {"10.77.0.0/24"}));
  v.apply(put(host_info_key(1), host_info_value(host(1, {"10.77.1.0/24"})), 5));
  v.settle();
  for (const char* value : {R"({"host":1,"name":5})", "not json", R"({"name":["x"]})", "[]"}) {
    std::string note = v.apply(put(container_key(1, net("10.77.1.20")), value, 9));
    EXPECT_NE(note.find("ignoring /vrdma/hosts/1/containers/10.77.1.20"), std::string::npos)
        << note;
  }
  EXPECT_NE(v.apply(put("/vrdma/containers/10.77.0.10", R"({"host":1,"name":"x"})", 9)), "");
  EXPECT_NE(v.apply(put(container_key(1, net("10.77.1.21")), std::string(1 << 20, '{'), 9)), "");
  v.settle();
  EXPECT_EQ(owner(v, "10.77.0.10"), 0u);
  EXPECT_EQ(owner(v, "10.77.1.20"), 1u);  // by its network

  // A bad info value replaces the good one: the host is no longer known.
  std::string note = v.apply(put(host_info_key(1), R"({"router":7,"cidrs":"x"})", 5));
  EXPECT_NE(note, "");
  v.settle();
  EXPECT_FALSE(v.host_by_id(1));
  EXPECT_EQ(owner(v, "10.77.1.20"), 999u);
  // This host's own entries in etcd are not taken from there.
  EXPECT_EQ(v.apply(put(host_info_key(0), "garbage", 3)), "");
  v.settle();
  EXPECT_EQ(v.host_by_id(0)->router, "10.76.0.1:7471");
}

TEST(DirectoryView, ContainerOutsideItsHostsNetworksIsRefused) {
  DirectoryView v(host(0, {"10.77.0.0/24"}));
  v.apply(put(host_info_key(1), host_info_value(host(1, {"10.77.1.0/24"})), 5));
  v.apply(put(host_info_key(2), host_info_value(host(2, {"10.77.2.0/24"})), 6));
  // Host 1 claims an address of host 0, one of host 2 and one of nobody.
  v.apply(put(container_key(1, net("10.77.0.10")), container_value("fake"), 7));
  v.apply(put(container_key(1, net("10.77.2.10")), container_value("fake"), 8));
  v.apply(put(container_key(1, net("10.99.0.5")), container_value("fake"), 9));
  auto notes = v.settle();
  ASSERT_EQ(notes.size(), 3u);
  std::string all;
  for (const auto& n : notes) all += n + "\n";
  EXPECT_NE(all.find("host 1 claims container address 10.77.0.10 outside its networks, which "
                     "belongs to this host: refused"),
            std::string::npos)
      << all;
  EXPECT_NE(all.find("10.77.2.10 outside its networks, which belongs to host 2"), std::string::npos)
      << all;
  EXPECT_EQ(owner(v, "10.77.0.10"), 0u);
  EXPECT_EQ(owner(v, "10.77.2.10"), 2u);
  EXPECT_EQ(owner(v, "10.99.0.5"), 999u);
  EXPECT_TRUE(v.settle().empty()) << "each refusal is reported once";
}

TEST(DirectoryView, FirstClaimOfANetworkHolds) {
  DirectoryView v(host(0, {"10.77.0.0/24"}));
  v.apply(put(host_info_key(2), host_info_value(host(2, {"10.77.2.0/24"})), 10));
  // Host 1 comes later and claims a piece of host 2's network and of this host's, and a
  // network of its own.
  v.apply(put(host_info_key(1),
              host_info_value(host(1, {"10.77.1.0/24", "10.77.2.128/25", "10.77.0.10/32"})), 20));
  auto notes = v.settle();
  ASSERT_EQ(notes.size(), 2u);
  EXPECT_EQ(owner(v, "10.77.2.200"), 2u);
  EXPECT_EQ(owner(v, "10.77.0.10"), 0u);
  EXPECT_EQ(owner(v, "10.77.1.7"), 1u);
  ASSERT_TRUE(v.host_by_id(1));
  ASSERT_EQ(v.host_by_id(1)->cidrs.size(), 1u) << "only its uncontested network is accepted";
  EXPECT_EQ(cidr_text(v.host_by_id(1)->cidrs[0]), "10.77.1.0/24");
  // A container of host 1 in the network it was refused is refused too.
  v.apply(put(container_key(1, net("10.77.2.200")), container_value("x"), 21));
  v.settle();
  EXPECT_EQ(owner(v, "10.77.2.200"), 2u);

  // The earlier claim wins whichever order the entries arrive in.
  DirectoryView w(host(5, {}));
  w.apply(put(host_info_key(1), host_info_value(host(1, {"10.77.0.0/16"})), 20));
  w.apply(put(host_info_key(2), host_info_value(host(2, {"10.77.2.0/24"})), 10));
  w.settle();
  EXPECT_EQ(owner(w, "10.77.2.1"), 2u);
  EXPECT_FALSE(w.host_by_id(1)->cidrs.size()) << "its /16 overlaps host 2's earlier /24";
  // When the first holder goes, the other's claim is accepted.
  w.apply(del(host_info_key(2)));
  w.settle();
  EXPECT_EQ(owner(w, "10.77.2.1"), 1u);
}

TEST(DirectoryView, OneOwnerPerAddress) {
  // Two hosts may publish the same address only if both hold it, which the network rule
  // prevents; with nested networks of one host its own entries never conflict.
  DirectoryView v(host(9, {}));
  v.apply(put(host_info_key(1), host_info_value(host(1, {"10.77.0.0/16", "10.77.1.0/24"})), 3));
  v.apply(put(host_info_key(2), host_info_value(host(2, {"10.77.1.0/24"})), 4));
  v.apply(put(container_key(1, net("10.77.1.10")), container_value("a"), 5));
  v.apply(put(container_key(2, net("10.77.1.10")), container_value("b"), 6));
  auto notes = v.settle();
  EXPECT_EQ(owner(v, "10.77.1.10"), 1u);
  EXPECT_EQ(v.host_by_id(1)->cidrs.size(), 2u);
  EXPECT_EQ(v.host_by_id(2)->cidrs.size(), 0u);
  EXPECT_EQ(notes.size(), 2u);  // host 2's network, and its container
}

}  // namespace
}  // namespace vrdma::daemon
