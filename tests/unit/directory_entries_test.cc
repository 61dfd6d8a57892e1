// The etcd directory's entries: keys and values as written, every check a value must pass
// (bad ones ignored, never fatal), and how the view weighs the hosts' claims against each other.
#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <algorithm>
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
  EXPECT_EQ(network_key(3, cidr("10.77.3.0/24")), "/vrdma/hosts/3/networks/10.77.3.0/24");
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
  k = parse_entry_key(network_key(7, cidr("10.88.0.0/16")), &why);
  ASSERT_TRUE(k) << why;
  EXPECT_EQ(k->kind, EntryKind::kNetwork);
  EXPECT_EQ(cidr_text(k->cidr), "10.88.0.0/16");
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
                          "/vrdma/hosts/1/networks/10.77.1.0",
                          "/vrdma/hosts/1/networks/10.77.1.5/24",
                          "/vrdma/hosts/1/networks/10.0.0.0/7",
                          "/vrdma/hosts/1/networks/0.0.0.0/0",
                          "/vrdma/hosts/1/networks/10.77.1.0/33",
                          "/vrdma/hosts/1/networks/10.77.1.0/024",
                          "/vrdma/hosts/1/networks/",
                          "/vrdma/hosts/1/networks/x/24",
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
  HostEntry h = host(2, {"10.77.2.0/24"});
  std::string why;
  auto back = parse_host_info(2, host_info_value(h), &why);
  ASSERT_TRUE(back) << why;
  EXPECT_EQ(back->host_id, 2u);
  EXPECT_EQ(back->router, h.router);
  EXPECT_TRUE(back->cidrs.empty()) << "networks are keys of their own";

  // Unknown fields are ignored; an empty router is a host without one.
  auto ok =
      parse_host_info(2, R"({"router":"","cidrs":["10.0.0.0/8"],"future":{"x":[1,2]}})", &why);
  ASSERT_TRUE(ok) << why;
  EXPECT_EQ(ok->router, "");
  EXPECT_TRUE(ok->cidrs.empty());

  for (const char* bad :
       {"", "null", "[]", "\"x\"", "{", "not json", "{}", R"({"router":7})", R"({"router":null})",
        R"({"router":"10.76.0.2"})", R"({"router":"10.76.0.2:0"})", R"({"router":"0.0.0.0:7471"})",
        R"({"router":"239.1.1.1:7471"})", R"({"router":"255.255.255.255:7471"})",
        R"({"router":"host.example:7471"})", R"({"router":"10.76.0.2:7471 "})"}) {
    why.clear();
    EXPECT_FALSE(parse_host_info(2, bad, &why)) << bad;
    EXPECT_NE(why, "") << bad;
  }
  std::string huge = R"({"router":"","pad":")" + std::string(kMaxValueBytes, 'x') + "\"}";
  EXPECT_FALSE(parse_host_info(2, huge, &why));
  EXPECT_NE(why.find("bytes"), std::string::npos) << why;
  EXPECT_TRUE(parse_network_value(network_value(), &why));
  EXPECT_FALSE(parse_network_value("[]", &why));
}

TEST(DirectoryEntries, ContainerValues) {
  std::string why;
  auto info = parse_container_value(container_value({"h1c0", ""}), &why);
  ASSERT_TRUE(info) << why;
  EXPECT_EQ(info->name, "h1c0");
  EXPECT_EQ(info->tenant, "");
  EXPECT_EQ(container_value({"h1c0", ""}), R"({"name":"h1c0"})");
  info = parse_container_value(container_value({"h1c0", "team-a"}), &why);
  ASSERT_TRUE(info) << why;
  EXPECT_EQ(*info, (ContainerInfo{"h1c0", "team-a"}));
  EXPECT_EQ(parse_container_value("{}", &why).value_or(ContainerInfo{"?", "?"}),
            (ContainerInfo{"", ""}));
  EXPECT_EQ(parse_container_value(R"({"name":"a","host":99})", &why)->name, "a");
  // The value that once killed every vrdmad, and its relatives; the tenant is checked alike.
  for (const char* bad :
       {R"({"host":1,"name":5})", R"({"name":["x"]})", R"({"name":null})", R"({"name":"a b"})",
        R"({"name":"tab\t"})", "[1]", "5", "", "{\"name\":\"\xff\"}", R"({"tenant":7})",
        R"({"name":"a","tenant":"b c"})", R"({"tenant":{}})"}) {
    why.clear();
    EXPECT_FALSE(parse_container_value(bad, &why)) << bad;
    EXPECT_NE(why, "") << bad;
  }
  EXPECT_FALSE(parse_container_value(R"({"name":")" + std::string(254, 'a') + "\"}", &why));
  EXPECT_FALSE(parse_container_value(R"({"tenant":")" + std::string(254, 'a') + "\"}", &why));
  EXPECT_TRUE(parse_listener_value(listener_value(), &why));
  EXPECT_FALSE(parse_listener_value("{{", &why));
  // A name JSON cannot hold as text still makes a valid value.
  EXPECT_NO_THROW(container_value({std::string("\xff\xfe", 2), ""}));
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

// Host `h` as it publishes itself: its info, then each network, all at revision `rev`.
void publish(DirectoryView& v, const HostEntry& h, int64_t rev) {
  v.apply(put(host_info_key(h.host_id), host_info_value(h), rev));
  for (const auto& c : h.cidrs) v.apply(put(network_key(h.host_id, c), network_value(), rev));
}

uint32_t owner(const DirectoryView& v, const char* addr) {
  auto h = v.host_of(hostorder(addr));
  return h ? h->host_id : 999;
}

TEST(DirectoryView, KnowsValidHostsAndTheirContainers) {
  DirectoryView v(host(0, {"10.77.0.0/24"}));
  EXPECT_EQ(v.apply(put(host_info_key(1), host_info_value(host(1, {})), 5)), "");
  EXPECT_EQ(v.apply(put(network_key(1, cidr("10.77.1.0/24")), network_value(), 5)), "");
  EXPECT_EQ(v.apply(put(container_key(1, net("10.77.1.10")), container_value({"h1c0", ""}), 6)), "");
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

TEST(DirectoryEntries, ContainerGroups) {
  std::string why;
  ContainerInfo in{"h1c0", "red", {net("239.1.1.1"), net("224.1.2.3")}};
  auto info = parse_container_value(container_value(in), &why);
  ASSERT_TRUE(info) << why;
  std::vector<uint32_t> want{net("224.1.2.3"), net("239.1.1.1")};
  std::sort(want.begin(), want.end());  // as parsed: sorted, duplicates removed
  EXPECT_EQ(info->groups, want);
  EXPECT_EQ(parse_container_value(R"({"name":"a","groups":["224.0.0.1","224.0.0.1"]})", &why)
                ->groups.size(),
            1u);
  for (std::string bad : {R"({"groups":"224.1.2.3"})", R"({"groups":["10.0.0.1"]})",
                          R"({"groups":[5]})", R"({"groups":["224.1.2"]})"})
    EXPECT_FALSE(parse_container_value(bad, &why)) << bad;
  std::string many = R"({"groups":[)";
  for (int i = 0; i <= 128; ++i) many += (i ? ",\"224.0.1." : "\"224.0.1.") + std::to_string(i) + "\"";
  EXPECT_FALSE(parse_container_value(many + "]}", &why));
}

TEST(DirectoryView, KnowsWhichHostsHaveGroupMembers) {
  DirectoryView v(host(0, {"10.77.0.0/24"}));
  publish(v, host(1, {"10.77.1.0/24"}), 5);
  publish(v, host(2, {"10.77.2.0/24"}), 5);
  v.apply(put(container_key(1, net("10.77.1.10")),
              container_value({"h1c0", "red", {net("224.1.2.3")}}), 6));
  v.apply(put(container_key(2, net("10.77.2.10")), container_value({"h2c0", "red", {}}), 6));
  // Outside its host's networks: refused, and so are its groups.
  v.apply(put(container_key(2, net("10.77.1.11")),
              container_value({"x", "red", {net("224.1.2.3")}}), 6));
  v.settle();
  const auto* m = v.group_members(net("224.1.2.3"));
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(*m, (std::vector<std::pair<uint32_t, uint32_t>>{{1, hostorder("10.77.1.10")}}));
  EXPECT_EQ(v.group_members(net("224.9.9.9")), nullptr);
  v.apply(put(container_key(1, net("10.77.1.10")), container_value({"h1c0", "red", {}}), 6));
  v.settle();
  EXPECT_EQ(v.group_members(net("224.1.2.3")), nullptr);
}

TEST(DirectoryView, MalformedEntriesAreIgnoredNotFatal) {
  DirectoryView v(host(0, {"10.77.0.0/24"}));
  publish(v, host(1, {"10.77.1.0/24"}), 5);
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
  EXPECT_NE(v.apply(put(network_key(1, cidr("10.77.1.0/24")), "5", 5)), "");
  v.settle();
  EXPECT_EQ(owner(v, "10.77.1.20"), 999u) << "its only network's entry is no longer valid";
  EXPECT_EQ(v.apply(put(network_key(1, cidr("10.77.1.0/24")), network_value(), 5)), "");
  v.settle();
  EXPECT_EQ(owner(v, "10.77.1.20"), 1u);
  std::string note = v.apply(put(host_info_key(1), R"({"router":7})", 5));
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
  publish(v, host(1, {"10.77.1.0/24"}), 5);
  publish(v, host(2, {"10.77.2.0/24"}), 6);
  // Host 1 claims an address of host 0, one of host 2 and one of nobody.
  v.apply(put(container_key(1, net("10.77.0.10")), container_value({"fake", ""}), 7));
  v.apply(put(container_key(1, net("10.77.2.10")), container_value({"fake", ""}), 8));
  v.apply(put(container_key(1, net("10.99.0.5")), container_value({"fake", ""}), 9));
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

// The tenant other hosts read for an address is the one its accepted owner published: a
// claim that loses (outside its host's networks, or later) names no tenant.
TEST(DirectoryView, ContainerTenantIsTheAcceptedOwners) {
  DirectoryView v(host(0, {"10.77.0.0/24"}));
  publish(v, host(1, {"10.77.1.0/24"}), 5);
  publish(v, host(2, {"10.77.2.0/24"}), 6);
  v.apply(put(container_key(1, net("10.77.1.10")), container_value({"h1c0", "team-a"}), 7));
  v.apply(put(container_key(2, net("10.77.1.10")), container_value({"x", "team-b"}), 8));
  v.apply(put(container_key(2, net("10.77.0.10")), container_value({"x", "team-b"}), 9));
  v.apply(put(container_key(1, net("10.77.1.11")), container_value({"h1c1", ""}), 10));
  v.settle();
  const ContainerInfo* c = v.container(hostorder("10.77.1.10"));
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->tenant, "team-a");
  EXPECT_EQ(v.container(hostorder("10.77.0.10")), nullptr);
  ASSERT_NE(v.container(hostorder("10.77.1.11")), nullptr);
  EXPECT_EQ(v.container(hostorder("10.77.1.11"))->tenant, "");
  // A new value for the same key replaces the tenant; a deleted entry has none.
  v.apply(put(container_key(1, net("10.77.1.10")), container_value({"h1c0", "team-c"}), 7));
  v.settle();
  EXPECT_EQ(v.container(hostorder("10.77.1.10"))->tenant, "team-c");
  v.apply(del(container_key(1, net("10.77.1.10"))));
  v.settle();
  EXPECT_EQ(v.container(hostorder("10.77.1.10")), nullptr);
}

TEST(DirectoryView, FirstClaimOfANetworkHolds) {
  DirectoryView v(host(0, {"10.77.0.0/24"}));
  publish(v, host(1, {"10.77.1.0/24"}), 5);  // host 1 was there first
  publish(v, host(2, {"10.77.2.0/24"}), 10);
  // Host 1, first registered, later claims a piece of host 2's network and of this host's.
  v.apply(put(network_key(1, cidr("10.77.2.128/25")), network_value(), 20));
  v.apply(put(network_key(1, cidr("10.77.0.10/32")), network_value(), 21));
  auto notes = v.settle();
  ASSERT_EQ(notes.size(), 2u);
  std::string all = notes[0] + "\n" + notes[1];
  EXPECT_NE(all.find("host 1 claims network 10.77.2.128/25, which overlaps 10.77.2.0/24 of host 2 "
                     "(claimed first): refused; the first claim holds"),
            std::string::npos)
      << all;
  EXPECT_NE(all.find("host 1 claims network 10.77.0.10/32, which overlaps 10.77.0.0/24 of this "
                     "host"),
            std::string::npos)
      << all;
  EXPECT_EQ(owner(v, "10.77.2.200"), 2u);
  EXPECT_EQ(owner(v, "10.77.0.10"), 0u);
  EXPECT_EQ(owner(v, "10.77.1.7"), 1u);
  ASSERT_TRUE(v.host_by_id(1));
  ASSERT_EQ(v.host_by_id(1)->cidrs.size(), 1u) << "only its uncontested network is accepted";
  EXPECT_EQ(cidr_text(v.host_by_id(1)->cidrs[0]), "10.77.1.0/24");
  // A container of host 1 in the network it was refused is refused too.
  v.apply(put(container_key(1, net("10.77.2.200")), container_value({"x", ""}), 22));
  v.settle();
  EXPECT_EQ(owner(v, "10.77.2.200"), 2u);

  // The earlier claim wins whichever order the entries arrive in.
  DirectoryView w(host(5, {}));
  publish(w, host(1, {"10.77.0.0/16"}), 20);
  publish(w, host(2, {"10.77.2.0/24"}), 10);
  w.settle();
  EXPECT_EQ(owner(w, "10.77.2.1"), 2u);
  EXPECT_TRUE(w.host_by_id(1)->cidrs.empty()) << "its /16 overlaps host 2's earlier /24";
  // When the first holder goes, the other's claim is accepted.
  w.apply(del(network_key(2, cidr("10.77.2.0/24"))));
  w.settle();
  EXPECT_EQ(owner(w, "10.77.2.1"), 1u);
  // Networks of a host without a valid info entry count for nothing.
  w.apply(del(host_info_key(1)));
  w.settle();
  EXPECT_EQ(owner(w, "10.77.2.1"), 999u);
}

TEST(DirectoryView, NestedNetworksOfOneHost) {
  DirectoryView v(host(9, {}));
  publish(v, host(1, {"10.77.1.0/24"}), 3);
  v.apply(put(network_key(1, cidr("10.77.0.0/16")), network_value(), 4));  // grows later
  publish(v, host(2, {"10.77.2.0/24"}), 5);                                // inside it: refused
  v.apply(put(container_key(1, net("10.77.1.10")), container_value({"a", ""}), 6));
  v.apply(put(container_key(2, net("10.77.2.10")), container_value({"b", ""}), 7));
  auto notes = v.settle();
  EXPECT_EQ(owner(v, "10.77.1.10"), 1u);
  EXPECT_EQ(owner(v, "10.77.2.10"), 1u) << "host 1's /16 was claimed before host 2's /24";
  EXPECT_EQ(owner(v, "10.77.200.1"), 1u);
  EXPECT_EQ(v.host_by_id(1)->cidrs.size(), 2u);
  EXPECT_EQ(v.host_by_id(2)->cidrs.size(), 0u);
  EXPECT_EQ(notes.size(), 2u);  // host 2's network, and its container
}

TEST(DirectoryView, AtMostSoManyNetworksPerHost) {
  DirectoryView v(host(9, {}));
  v.apply(put(host_info_key(1), host_info_value(host(1, {})), 1));
  for (uint32_t i = 0; i < kMaxCidrsPerHost + 4; ++i) {
    Ipv4Cidr c{(10u << 24) | (i << 16), 0xffff0000u};
    v.apply(put(network_key(1, c), network_value(), 2 + i));
  }
  auto notes = v.settle();
  EXPECT_EQ(v.host_by_id(1)->cidrs.size(), kMaxCidrsPerHost);
  EXPECT_EQ(notes.size(), 4u);
  EXPECT_EQ(owner(v, "10.0.0.1"), 1u);
  EXPECT_EQ(owner(v, "10.19.0.1"), 999u);
}

}  // namespace
}  // namespace vrdma::daemon
