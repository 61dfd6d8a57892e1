// UD multicast: ibv_attach_mcast / ibv_detach_mcast and delivery to a group's members on one
// host (verbs against an in-process vrdmad), and vrdmad's membership table alone.
#include <arpa/inet.h>

#include <algorithm>

#include "daemon/core/mcast_table.h"
#include "verbs_fixture.h"

namespace vrdma::testing {
namespace {

ibv_gid group_gid(uint32_t ipv4_host) {
  ibv_gid g{};
  g.raw[10] = g.raw[11] = 0xff;
  uint32_t n = htonl(ipv4_host);
  memcpy(g.raw + 12, &n, 4);
  return g;
}

class McastTest : public VerbsTest {
 protected:
  ibv_qp* ud_qp(ibv_cq* c) {
    ibv_qp* q = qp(c, c, IBV_QPT_UD);
    EXPECT_EQ(to_init(q), 0);
    EXPECT_EQ(to_rtr(q, 0), 0);
    EXPECT_EQ(to_rts(q), 0);
    return q;
  }
  ibv_ah* group_ah(const ibv_gid& g) {
    ibv_ah_attr a{};
    a.is_global = 1;
    a.grh.dgid = g;
    a.grh.hop_limit = 1;
    a.port_num = 1;
    return ibv_create_ah(pd, &a);
  }
  // Sends `len` bytes of `src` to the group and waits for the send's completion.
  void send_to(ibv_qp* from, ibv_cq* from_cq, ibv_ah* ah, Buffer& src, uint32_t len,
               uint32_t qkey = 0x11111111) {
    ibv_sge sg{src.addr(), len, src.mr->lkey};
    ibv_send_wr wr = send_wr(IBV_WR_SEND, sg);
    wr.wr.ud.ah = ah;
    wr.wr.ud.remote_qpn = 0xffffff;
    wr.wr.ud.remote_qkey = qkey;
    ibv_send_wr* bad;
    ASSERT_EQ(ibv_post_send(from, &wr, &bad), 0);
    auto c = poll(from_cq, 1);
    ASSERT_EQ(c.size(), 1u);
    EXPECT_EQ(c[0].status, IBV_WC_SUCCESS);
  }
};

TEST_F(McastTest, DeviceAnnouncesItsMulticastLimits) {
  ibv_device_attr a{};
  ASSERT_EQ(ibv_query_device(ctx, &a), 0);
  EXPECT_EQ(a.max_mcast_grp, static_cast<int>(proto::kMaxMcastGroups));
  EXPECT_EQ(a.max_mcast_qp_attach, static_cast<int>(proto::kMaxMcastMembers));
  EXPECT_EQ(a.max_total_mcast_qp_attach, static_cast<int>(proto::kMaxMcastAttaches));
}

TEST_F(McastTest, AttachAndDetachErrors) {
  ibv_cq* c = cq();
  ibv_qp* rc = qp(c, c, IBV_QPT_RC);
  ibv_qp* ud = ud_qp(c);
  const ibv_gid g = group_gid(0xe0010203);         // 224.1.2.3
  EXPECT_EQ(ibv_attach_mcast(rc, &g, 0), EINVAL);  // only UD QPs join groups
  ibv_gid unicast{};
  ASSERT_EQ(ibv_query_gid(ctx, 1, 0, &unicast), 0);
  EXPECT_EQ(ibv_attach_mcast(ud, &unicast, 0), EINVAL);
  const ibv_gid not_multicast = group_gid(0xc0a80001);  // ::ffff:192.168.0.1
  EXPECT_EQ(ibv_attach_mcast(ud, &not_multicast, 0), EINVAL);
  EXPECT_EQ(ibv_detach_mcast(ud, &g, 0), EINVAL);  // not attached
  EXPECT_EQ(ibv_attach_mcast(ud, &g, 0), 0);
  EXPECT_EQ(ibv_attach_mcast(ud, &g, 0), 0);  // again: already a member, as the kernel answers
  EXPECT_EQ(ibv_detach_mcast(ud, &g, 0), 0);
  EXPECT_EQ(ibv_detach_mcast(ud, &g, 0), EINVAL);
  ibv_gid v6{};
  v6.raw[0] = 0xff;
  v6.raw[1] = 0x0e;
  v6.raw[15] = 7;
  EXPECT_EQ(ibv_attach_mcast(ud, &v6, 0), 0);  // IPv6 multicast GIDs are groups too
  EXPECT_EQ(ibv_detach_mcast(rc, &v6, 0), EINVAL);
  EXPECT_EQ(ibv_detach_mcast(ud, &v6, 0), 0);
}

TEST_F(McastTest, GroupsPerDeviceAreBounded) {
  ibv_cq* c = cq();
  ibv_qp* ud = ud_qp(c);
  uint32_t i = 0;
  for (; i < proto::kMaxMcastGroups; ++i) {
    const ibv_gid g = group_gid(0xe1000000 + i);
    ASSERT_EQ(ibv_attach_mcast(ud, &g, 0), 0) << i;
  }
  const ibv_gid over = group_gid(0xe1000000 + i);
  EXPECT_EQ(ibv_attach_mcast(ud, &over, 0), ENOMEM);
  // Destroying the QP leaves every group: room again.
  ibv_qp* other = ud_qp(c);
  ASSERT_EQ(ibv_destroy_qp(ud), 0);
  qps.erase(std::find(qps.begin(), qps.end(), ud));
  EXPECT_EQ(ibv_attach_mcast(other, &over, 0), 0);
  EXPECT_EQ(ibv_detach_mcast(other, &over, 0), 0);
}

TEST_F(McastTest, SendReachesEveryMemberUntilItDetaches) {
  ibv_cq* cs = cq();
  ibv_cq* c1 = cq();
  ibv_cq* c2 = cq();
  ibv_qp* sender = ud_qp(cs);
  ibv_qp* r1 = ud_qp(c1);
  ibv_qp* r2 = ud_qp(c2);
  const ibv_gid g = group_gid(0xe0010204);
  ASSERT_EQ(ibv_attach_mcast(r1, &g, 0), 0);
  ASSERT_EQ(ibv_attach_mcast(r2, &g, 0), 0);
  ibv_ah* ah = group_ah(g);
  ASSERT_NE(ah, nullptr);
  Buffer& src = buffer(4096);
  Buffer& d1 = buffer(4096);
  Buffer& d2 = buffer(4096);
  Buffer& ds = buffer(4096);
  fill_random(src.data(), 700, 21);
  for (int i = 0; i < 4; ++i) {
    ASSERT_EQ(post_recv(r1, d1, 4096, 1), 0);
    ASSERT_EQ(post_recv(r2, d2, 4096, 2), 0);
    ASSERT_EQ(post_recv(sender, ds, 4096, 3), 0);
  }

  send_to(sender, cs, ah, src, 700);
  for (auto [c, d] : {std::pair{c1, &d1}, std::pair{c2, &d2}}) {
    auto r = poll(c, 1);
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0].status, IBV_WC_SUCCESS);
    EXPECT_EQ(r[0].byte_len, 740u);
    EXPECT_TRUE(r[0].wc_flags & IBV_WC_GRH);
    EXPECT_EQ(r[0].src_qp, sender->qp_num);
    EXPECT_EQ(memcmp(d->data() + 40, src.data(), 700), 0);
    // The GRH names the group as its destination (RoCEv2 over IPv4: the IPv4 header's address).
    uint32_t dst;
    memcpy(&dst, d->data() + 20 + 16, 4);
    EXPECT_EQ(dst, htonl(0xe0010204));
  }
  EXPECT_TRUE(poll(cs, 1, 50).empty());  // the sender is no member: nothing comes back

  // A wrong Q_Key reaches nobody.
  send_to(sender, cs, ah, src, 100, 0x22222222);
  EXPECT_TRUE(poll(c1, 1, 50).empty());
  EXPECT_TRUE(poll(c2, 1, 50).empty());

  // Detached: r2 receives no more.
  ASSERT_EQ(ibv_detach_mcast(r2, &g, 0), 0);
  fill_random(src.data(), 300, 22);
  send_to(sender, cs, ah, src, 300);
  auto r = poll(c1, 1);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].byte_len, 340u);
  EXPECT_EQ(memcmp(d1.data() + 40, src.data(), 300), 0);
  EXPECT_TRUE(poll(c2, 1, 100).empty());

  // A member that sends gets its own datagram too (multicast loopback).
  ASSERT_EQ(ibv_attach_mcast(sender, &g, 0), 0);
  ibv_sge sg{src.addr(), 64, src.mr->lkey};
  ibv_send_wr wr = send_wr(IBV_WR_SEND, sg);
  wr.wr.ud.ah = ah;
  wr.wr.ud.remote_qpn = 0xffffff;
  wr.wr.ud.remote_qkey = 0x11111111;
  ibv_send_wr* bad;
  ASSERT_EQ(ibv_post_send(sender, &wr, &bad), 0);
  auto own = poll(cs, 2);  // the send's completion and the receive of its own datagram
  ASSERT_EQ(own.size(), 2u);
  std::sort(own.begin(), own.end(),
            [](const ibv_wc& a, const ibv_wc& b) { return a.opcode < b.opcode; });
  EXPECT_EQ(own[0].opcode, IBV_WC_SEND);
  EXPECT_EQ(own[1].opcode, IBV_WC_RECV);
  EXPECT_EQ(own[1].byte_len, 104u);
  EXPECT_EQ(memcmp(ds.data() + 40, src.data(), 64), 0);
  EXPECT_EQ(poll(c1, 1).size(), 1u);
  EXPECT_TRUE(poll(c2, 1, 50).empty());
  ibv_destroy_ah(ah);
}

TEST(McastTableTest, GroupsAreTheTenants) {
  daemon::McastTable t;
  daemon::McastGid g{};
  g[0] = 0xff;
  EXPECT_EQ(t.attach(1, "a", 10, g), 0);
  EXPECT_EQ(t.attach(2, "b", 20, g), 0);
  ASSERT_NE(t.members("a", g), nullptr);
  EXPECT_EQ(*t.members("a", g), std::vector<uint32_t>{10});
  EXPECT_EQ(*t.members("b", g), std::vector<uint32_t>{20});
  EXPECT_EQ(t.detach("b", 10, g), EINVAL);  // another tenant's member
  EXPECT_EQ(t.client_gone(2), std::set<std::string>{"b"});
  EXPECT_EQ(t.members("b", g), nullptr);
  EXPECT_EQ(t.qp_gone(10), std::set<std::string>{"a"});
  EXPECT_EQ(t.groups(), 0u);
}

TEST(McastTableTest, MembersPerGroupAreBounded) {
  daemon::McastTable t;
  daemon::McastGid g{};
  g[0] = 0xff;
  for (uint32_t i = 0; i < proto::kMaxMcastMembers; ++i) ASSERT_EQ(t.attach(i, "a", 100 + i, g), 0);
  EXPECT_EQ(t.attach(999, "a", 999, g), ENOMEM);
  EXPECT_EQ(t.attach(999, "b", 999, g), 0);  // another tenant's group
}

}  // namespace
}  // namespace vrdma::testing
