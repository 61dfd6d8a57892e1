// XRC across hosts over the fake transport: an XRC_SEND QP on host 1 reaches, through the
// XRC_RECV QP on host 2 its RTR named, the XRC SRQs of that QP's domain by number. Every
// operation arrives with the XRC_RECV QP's access flags and the SRQ's protection domain, and
// receives complete on the SRQ (its QP object's ring: qp_num the XRC_RECV QP, src_qp the
// sender). A number that is no SRQ of that domain, tenant and container fails the request with
// IBV_WC_REM_INV_REQ_ERR; so does one a hostile router forges on its link, while the victim's
// XRC traffic goes on.
#include <arpa/inet.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "common/protocol.h"
#include "transport/frame_check.h"
#include "router_fake.h"

namespace vrdma::daemon::testing {
namespace {

constexpr uint32_t kXrcSrq = static_cast<uint32_t>(proto::QpType::kXrcSrq);
constexpr uint32_t kDomain = 7;

class RoutedXrc : public RoutedRc {
 protected:
  void SetUp() override {
    RoutedRc::SetUp();
    std::tie(srq, srqq) = xrc_srq(*c2, kDomain);
    std::tie(snd, rcv) = xrc_pair(*c1, *c2, kDomain);
  }

  // An XRC SRQ of client `c` in domain `xrcd`: the SRQ and its receive side (numbered as a QP,
  // always ready), with protection domain `pd`.
  std::pair<FakeSrq*, FakeQp*> xrc_srq(FakeClient& c, uint32_t xrcd, uint32_t pd = 1) {
    FakeSrq* s = &h2->srq(c);
    FakeQp::Options o;
    o.srq = s;
    o.pd = pd;
    FakeQp* q = &h2->qp(c, kXrcSrq, o);
    q->xrcd = xrcd;
    q->set_state(IBV_QPS_RTR);
    return {s, q};
  }

  // An XRC_SEND QP of `from` (host 1) connected to a new XRC_RECV QP of `to` (host 2) in
  // domain `xrcd` with remote access `access`; each RTR names the other.
  std::pair<FakeQp*, FakeQp*> xrc_pair(FakeClient& from, FakeClient& to, uint32_t xrcd,
                                       uint32_t access = kAllAccess) {
    FakeQp* s = &h1->qp(from, IBV_QPT_XRC_SEND);
    FakeQp::Options o;
    o.access = access;
    FakeQp* r = &h2->qp(to, IBV_QPT_XRC_RECV, o);
    r->xrcd = xrcd;
    s->peer_ipv4 = to.ipv4;
    s->peer_qpn = r->qpn;
    r->peer_ipv4 = from.ipv4;
    r->peer_qpn = s->qpn;
    r->set_state(IBV_QPS_RTR);
    s->set_state(IBV_QPS_RTS);
    EXPECT_EQ(connect_one(*s, *r), 0);
    return {s, r};
  }

  void post_xrc(FakeQp& q, ibv_send_wr wr, uint32_t srqn) {
    wr.qp_type.xrc.remote_srqn = srqn;
    q.post_send(wr);
  }

  void post_xrc_rdma(FakeQp& q, uint64_t wr_id, ibv_wr_opcode op, ibv_sge sge, uint64_t raddr,
                     uint32_t rkey, uint32_t srqn, uint64_t compare_add = 0, uint64_t swap = 0) {
    ibv_send_wr wr = make_wr(wr_id, op, &sge, 1);
    if (op == IBV_WR_ATOMIC_CMP_AND_SWP || op == IBV_WR_ATOMIC_FETCH_AND_ADD) {
      wr.wr.atomic.remote_addr = raddr;
      wr.wr.atomic.rkey = rkey;
      wr.wr.atomic.compare_add = compare_add;
      wr.wr.atomic.swap = swap;
    } else {
      wr.wr.rdma.remote_addr = raddr;
      wr.wr.rdma.rkey = rkey;
    }
    post_xrc(q, wr, srqn);
  }

  // One SEND of `n` bytes from m1 into the SRQ: its completion's status.
  int send_one(FakeQp& q, uint32_t srqn, uint64_t wr_id, uint32_t n = 64) {
    ibv_sge sge = m1->sge(0, n);
    post_xrc(q, make_wr(wr_id, IBV_WR_SEND, &sge, 1), srqn);
    auto wcs = send_completions(q, 1);
    return wcs.empty() ? -1 : wcs[0].status;
  }

  FakeSrq* srq = nullptr;
  FakeQp* srqq = nullptr;  // the SRQ's receive side: its number is the SRQ number
  FakeQp *snd = nullptr, *rcv = nullptr;
};

TEST_F(RoutedXrc, SendsCompleteOnTheSrqWithTheSenderAsSource) {
  auto data = random_bytes(3000, 11);
  memcpy(m1->ptr + 100, data.data(), data.size());
  srq->post_recv(41, {m2->sge(0, 1000), m2->sge(8192, 4000)});
  srq->post_recv(42, {m2->sge(16384, 64)});
  ibv_sge sge[2] = {m1->sge(100, 1000), m1->sge(1100, 2000)};
  post_xrc(*snd, make_wr(1, IBV_WR_SEND, sge, 2), srqq->qpn);
  ibv_sge isge = m1->sge(100, 48);
  ibv_send_wr imm = make_wr(2, IBV_WR_SEND_WITH_IMM, &isge, 1, IBV_SEND_SIGNALED | IBV_SEND_INLINE);
  imm.imm_data = htonl(0xabcd0123);
  post_xrc(*snd, imm, srqq->qpn);
  auto wcs = send_completions(*snd, 2);
  ASSERT_EQ(wcs.size(), 2u);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(wcs[i].wr_id, uint64_t(i + 1));
    EXPECT_EQ(wcs[i].status, IBV_WC_SUCCESS);
    EXPECT_EQ(wcs[i].qp_num, snd->qpn);
  }
  auto rcs = recv_completions(*srqq, 2);
  ASSERT_EQ(rcs.size(), 2u);
  EXPECT_EQ(rcs[0].wr_id, 41u);
  EXPECT_EQ(rcs[0].status, shm::kRecvOk);
  EXPECT_EQ(rcs[0].opcode, shm::kRecvSend);
  EXPECT_EQ(rcs[0].byte_len, 3000u);
  EXPECT_EQ(rcs[0].src_qp, snd->qpn);
  EXPECT_EQ(rcs[0].flags & shm::kRecvImm, 0);
  EXPECT_EQ(memcmp(m2->ptr, data.data(), 1000), 0);
  EXPECT_EQ(memcmp(m2->ptr + 8192, data.data() + 1000, 2000), 0);
  EXPECT_EQ(rcs[1].wr_id, 42u);
  EXPECT_EQ(rcs[1].byte_len, 48u);
  EXPECT_EQ(rcs[1].src_qp, snd->qpn);
  EXPECT_NE(rcs[1].flags & shm::kRecvImm, 0);
  EXPECT_EQ(rcs[1].imm_data, htonl(0xabcd0123));
  EXPECT_EQ(memcmp(m2->ptr + 16384, data.data(), 48), 0);
  // Nothing on the XRC_RECV QP itself: it has no receive queue of its own.
  EXPECT_TRUE(rcv->poll_recv().empty());
}

TEST_F(RoutedXrc, RdmaAndAtomicsThroughTheXrcConnection) {
  auto data = random_bytes(5000, 12);
  memcpy(m1->ptr, data.data(), data.size());
  const uint32_t srqn = srqq->qpn;
  post_xrc_rdma(*snd, 1, IBV_WR_RDMA_WRITE, m1->sge(0, 5000), m2->addr() + 65536, m2->key, srqn);
  // WRITE with immediate consumes a receive of the SRQ.
  srq->post_recv(50, {m2->sge(0, 16)});
  ibv_sge wsge = m1->sge(0, 100);
  ibv_send_wr wimm = make_wr(2, IBV_WR_RDMA_WRITE_WITH_IMM, &wsge, 1);
  wimm.wr.rdma.remote_addr = m2->addr() + 131072;
  wimm.wr.rdma.rkey = m2->key;
  wimm.imm_data = htonl(77);
  post_xrc(*snd, wimm, srqn);
  // READ it back elsewhere.
  post_xrc_rdma(*snd, 3, IBV_WR_RDMA_READ, m1->sge(200000, 5000), m2->addr() + 65536, m2->key,
                srqn);
  uint64_t v = 40, w = 1000;
  memcpy(m2->ptr + 300000, &v, 8);
  memcpy(m2->ptr + 300008, &w, 8);
  post_xrc_rdma(*snd, 4, IBV_WR_ATOMIC_CMP_AND_SWP, m1->sge(400000, 8), m2->addr() + 300000,
                m2->key, srqn, 40, 99);
  post_xrc_rdma(*snd, 5, IBV_WR_ATOMIC_FETCH_AND_ADD, m1->sge(400008, 8), m2->addr() + 300008,
                m2->key, srqn, 5);
  auto wcs = send_completions(*snd, 5);
  ASSERT_EQ(wcs.size(), 5u);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(wcs[i].wr_id, i + 1);
    EXPECT_EQ(wcs[i].status, IBV_WC_SUCCESS) << i << ": ";
  }
  EXPECT_EQ(wcs[2].opcode, IBV_WC_RDMA_READ);
  EXPECT_EQ(wcs[2].byte_len, 5000u);
  EXPECT_EQ(memcmp(m2->ptr + 65536, data.data(), 5000), 0);
  EXPECT_EQ(memcmp(m2->ptr + 131072, data.data(), 100), 0);
  EXPECT_EQ(memcmp(m1->ptr + 200000, data.data(), 5000), 0);
  uint64_t got = 0;
  memcpy(&got, m1->ptr + 400000, 8);
  EXPECT_EQ(got, 40u);
  memcpy(&got, m2->ptr + 300000, 8);
  EXPECT_EQ(got, 99u);
  memcpy(&got, m1->ptr + 400008, 8);
  EXPECT_EQ(got, 1000u);
  memcpy(&got, m2->ptr + 300008, 8);
  EXPECT_EQ(got, 1005u);
  auto rcs = recv_completions(*srqq, 1);
  ASSERT_EQ(rcs.size(), 1u);
  EXPECT_EQ(rcs[0].wr_id, 50u);
  EXPECT_EQ(rcs[0].opcode, shm::kRecvWriteImm);
  EXPECT_EQ(rcs[0].byte_len, 100u);
  EXPECT_EQ(rcs[0].src_qp, snd->qpn);
  EXPECT_EQ(rcs[0].imm_data, htonl(77));
}

TEST_F(RoutedXrc, SrqsOfTheDomainSharedByTwoSendersAndTwoClients) {
  // A second client of the same tenant on host 2 with an SRQ of the same domain (a shared
  // domain file), and a second sender: both reach both SRQs.
  FakeClient& c2b = h2->client("10.2.0.5", "t");  // the same container, another process
  FakeMr& mb = c2b.reg_mr(1 << 20, kAllAccess);
  auto [srq2, srqq2] = xrc_srq(c2b, kDomain);
  auto [snd2, rcv2] = xrc_pair(*c1, *c2, kDomain);
  srq->post_recv(1, {m2->sge(0, 64)});
  srq->post_recv(2, {m2->sge(64, 64)});
  srq2->post_recv(3, {mb.sge(0, 64)});
  srq2->post_recv(4, {mb.sge(64, 64)});
  EXPECT_EQ(send_one(*snd, srqq->qpn, 10), IBV_WC_SUCCESS);
  EXPECT_EQ(send_one(*snd, srqq2->qpn, 11), IBV_WC_SUCCESS);
  EXPECT_EQ(send_one(*snd2, srqq->qpn, 12), IBV_WC_SUCCESS);
  EXPECT_EQ(send_one(*snd2, srqq2->qpn, 13), IBV_WC_SUCCESS);
  auto r1 = recv_completions(*srqq, 2);
  auto r2 = recv_completions(*srqq2, 2);
  ASSERT_EQ(r1.size(), 2u);
  ASSERT_EQ(r2.size(), 2u);
  EXPECT_EQ(r1[0].src_qp, snd->qpn);
  EXPECT_EQ(r1[1].src_qp, snd2->qpn);
  EXPECT_EQ(r2[0].src_qp, snd->qpn);
  EXPECT_EQ(r2[1].src_qp, snd2->qpn);
  (void)rcv2;
}

TEST_F(RoutedXrc, AnSrqWhoseOwnerIsGoneIsNoLongerReached) {
  // Another process of the container holds an SRQ of the domain; it is reached, then it dies.
  FakeClient& c2b = h2->client("10.2.0.5", "t");
  FakeMr& mb = c2b.reg_mr(1 << 20, kAllAccess);
  auto [srq2, srqq2] = xrc_srq(c2b, kDomain);
  srq2->post_recv(1, {mb.sge(0, 64)});
  srq2->post_recv(2, {mb.sge(64, 64)});
  EXPECT_EQ(send_one(*snd, srqq2->qpn, 1), IBV_WC_SUCCESS);
  const uint32_t srqn = srqq2->qpn;
  h2->client_gone(c2b);
  EXPECT_EQ(send_one(*snd, srqn, 2), IBV_WC_REM_INV_REQ_ERR);
  // The domain's other SRQ is still there for another connection.
  srq->post_recv(3, {m2->sge(0, 64)});
  auto [s, r] = xrc_pair(*c1, *c2, kDomain);
  EXPECT_EQ(send_one(*s, srqq->qpn, 3), IBV_WC_SUCCESS);
  (void)r;
}

TEST_F(RoutedXrc, ANumberThatIsNoSrqOfTheDomainFailsTheRequest) {
  srq->post_recv(1, {m2->sge(0, 64)});
  // Another domain of the same client; the same domain number in another tenant's client (a
  // domain is per tenant: vrdmad never gives one number to two, the router checks both).
  auto other_domain = xrc_srq(*c2, kDomain + 1).second;
  FakeClient& stranger = h2->client("10.2.0.9", "u");
  FakeSrq* sx;
  FakeQp* foreign;
  std::tie(sx, foreign) = xrc_srq(stranger, kDomain);
  sx->post_recv(9, {m2->sge(0, 64)});
  FakeClient& neighbour = h2->client("10.2.0.10", "t");  // same tenant, another container
  auto elsewhere = xrc_srq(neighbour, kDomain).second;
  const uint32_t bad[] = {0x2ffff,      rcv->qpn,       b->qpn, other_domain->qpn,
                          foreign->qpn, elsewhere->qpn, 0};
  uint64_t id = 100;
  for (uint32_t srqn : bad) {
    auto [s, r] = xrc_pair(*c1, *c2, kDomain);
    EXPECT_EQ(send_one(*s, srqn, ++id), IBV_WC_REM_INV_REQ_ERR) << std::hex << srqn;
    // The QP failed: what it posts next is flushed.
    EXPECT_EQ(send_one(*s, srqq->qpn, ++id), IBV_WC_WR_FLUSH_ERR);
    (void)r;
  }
  EXPECT_TRUE(recv_completions(*foreign, 1, 200).empty());
  // The good connection was never disturbed: the receive is still there for it.
  EXPECT_EQ(send_one(*snd, srqq->qpn, 1), IBV_WC_SUCCESS);
  auto rcs = recv_completions(*srqq, 1);
  ASSERT_EQ(rcs.size(), 1u);
  EXPECT_EQ(rcs[0].wr_id, 1u);
}

TEST_F(RoutedXrc, TheRecvQpsAccessAndTheSrqsProtectionDomainDecide) {
  // An XRC_RECV QP without remote write: a WRITE is a remote access error.
  auto [s, r] = xrc_pair(*c1, *c2, kDomain, IBV_ACCESS_REMOTE_READ);
  post_xrc_rdma(*s, 1, IBV_WR_RDMA_WRITE, m1->sge(0, 64), m2->addr(), m2->key, srqq->qpn);
  auto wcs = send_completions(*s, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_REM_ACCESS_ERR);
  // ... and a READ through it works.
  auto [s2, r2] = xrc_pair(*c1, *c2, kDomain, IBV_ACCESS_REMOTE_READ);
  post_xrc_rdma(*s2, 2, IBV_WR_RDMA_READ, m1->sge(0, 64), m2->addr(), m2->key, srqq->qpn);
  wcs = send_completions(*s2, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
  // Memory of another protection domain than the SRQ's: refused; of the SRQ's: taken.
  FakeMr& pd2 = c2->reg_mr(4096, kAllAccess, 2);
  post_xrc_rdma(*snd, 3, IBV_WR_RDMA_WRITE, m1->sge(0, 64), pd2.addr(), pd2.key, srqq->qpn);
  wcs = send_completions(*snd, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_REM_ACCESS_ERR);
  auto [s3, r3] = xrc_pair(*c1, *c2, kDomain);
  auto srq_pd2 = xrc_srq(*c2, kDomain, 2).second;
  post_xrc_rdma(*s3, 4, IBV_WR_RDMA_WRITE, m1->sge(0, 64), pd2.addr(), pd2.key, srq_pd2->qpn);
  wcs = send_completions(*s3, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
  (void)r;
  (void)r2;
  (void)r3;
}

TEST_F(RoutedXrc, NothingArrivesBeforeTheRecvQpsRtrNamesTheSender) {
  FakeQp& s = h1->qp(*c1, IBV_QPT_XRC_SEND);
  FakeQp& r = h2->qp(*c2, IBV_QPT_XRC_RECV);
  r.xrcd = kDomain;
  s.peer_ipv4 = c2->ipv4;
  s.peer_qpn = r.qpn;
  s.set_state(IBV_QPS_RTS);
  r.set_state(IBV_QPS_RTR);  // naming nobody yet
  ASSERT_EQ(connect_one(s, r), 0);
  srq->post_recv(5, {m2->sge(0, 64)});
  ibv_sge sge = m1->sge(0, 64);
  post_xrc(s, make_wr(1, IBV_WR_SEND, &sge, 1), srqq->qpn);
  run(300);
  EXPECT_TRUE(s.poll_send().empty()) << "held while the XRC_RECV QP has not agreed";
  EXPECT_TRUE(srqq->poll_recv().empty());
  r.peer_ipv4 = c1->ipv4;
  r.peer_qpn = s.qpn;
  auto wcs = send_completions(s, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(recv_completions(*srqq, 1).size(), 1u);
}

TEST_F(RoutedXrc, AnXrcRecvQpOfAnotherTenantIsNotConnected) {
  FakeClient& evil = h1->client("10.1.0.66", "evil");
  FakeQp& s = h1->qp(evil, IBV_QPT_XRC_SEND);
  FakeQp& r = h2->qp(*c2, IBV_QPT_XRC_RECV);
  r.xrcd = kDomain;
  // Even with the victim's consent (its RTR names the sender): XRC stays within a tenant.
  r.peer_ipv4 = evil.ipv4;
  r.peer_qpn = s.qpn;
  r.set_state(IBV_QPS_RTR);
  s.set_state(IBV_QPS_RTS);
  EXPECT_EQ(connect_one(s, r), ECONNREFUSED);
  // An RC QP cannot connect to an XRC_RECV QP either.
  FakeQp& rc = h1->qp(*c1, IBV_QPT_RC);
  rc.set_state(IBV_QPS_RTS);
  EXPECT_EQ(connect_one(rc, *rcv), ECONNREFUSED);
}

// ---- frames ----------------------------------------------------------------------------

wire::Request xrc_request(uint32_t srqn, uint32_t opcode = IBV_WR_SEND, uint64_t len = 0) {
  wire::Request r{};
  r.opcode = opcode;
  r.qp_type = IBV_QPT_XRC_RECV;
  r.xrc_srqn = srqn;
  r.length = len;
  return r;
}

TEST(RouterXrcFrames, AnSrqNumberExactlyWhereOneBelongs) {
  const char* why = nullptr;
  auto ok = [&](const wire::Request& r, uint32_t payload) {
    return wire::check_frame(wire::Type::kRequest, reinterpret_cast<const uint8_t*>(&r), payload,
                             &why);
  };
  EXPECT_TRUE(ok(xrc_request(0x20005, IBV_WR_SEND, 16), 16));
  EXPECT_TRUE(ok(xrc_request(0x20005, IBV_WR_RDMA_READ, 4096), 0));
  EXPECT_TRUE(ok(xrc_request(0x20005, IBV_WR_ATOMIC_FETCH_AND_ADD, 8), 0));
  EXPECT_FALSE(ok(xrc_request(0, IBV_WR_SEND, 16), 16)) << "XRC without an SRQ";
  wire::Request rc = xrc_request(0x20005);
  rc.qp_type = IBV_QPT_RC;
  EXPECT_FALSE(ok(rc, 0)) << "an SRQ number on an RC request";
  rc.xrc_srqn = 0;
  EXPECT_TRUE(ok(rc, 0));
  wire::Request send_type = xrc_request(0x20005);
  send_type.qp_type = IBV_QPT_XRC_SEND;  // a request names the destination's type
  EXPECT_FALSE(ok(send_type, 0));
  wire::Request flagged = xrc_request(0x20005);
  flagged.flags = wire::kMoreQueued;
  EXPECT_TRUE(ok(flagged, 0));
  flagged.flags = 2;  // no such flag
  EXPECT_FALSE(ok(flagged, 0));
  wire::Request srq_type = xrc_request(0x20005);
  srq_type.qp_type = kXrcSrq;  // an SRQ is reached through its XRC_RECV QP only
  EXPECT_FALSE(ok(srq_type, 0));

  wire::Connect c{1, 0, 0, 1, 2, IBV_QPT_XRC_SEND, 0};
  EXPECT_TRUE(
      wire::check_frame(wire::Type::kConnect, reinterpret_cast<const uint8_t*>(&c), 0, &why));
  c.qp_type = kXrcSrq;
  EXPECT_FALSE(
      wire::check_frame(wire::Type::kConnect, reinterpret_cast<const uint8_t*>(&c), 0, &why));
  EXPECT_TRUE(wire::connects_to(IBV_QPT_XRC_SEND, IBV_QPT_XRC_RECV));
  EXPECT_FALSE(wire::connects_to(IBV_QPT_XRC_SEND, kXrcSrq));
  EXPECT_FALSE(wire::connects_to(IBV_QPT_XRC_RECV, IBV_QPT_XRC_SEND));
  EXPECT_FALSE(wire::connects_to(IBV_QPT_RC, IBV_QPT_XRC_RECV));
}

// ---- a hostile router ------------------------------------------------------------------

// Host 1's router gone bad: raw frames on a second link of host 1 to host 2. It owns host 1's
// addresses and may connect its own tenant's QPs; it must not reach another tenant's SRQ by
// naming its number, nor another domain's.
class HostileXrc : public RoutedXrc {
 protected:
  void SetUp() override {
    RoutedXrc::SetUp();
    int sv[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
    raw_ = sv[0];
    ASSERT_EQ(h2->router().adopt_link(UniqueFd(sv[1]), 1, false, now), 0);
  }
  void TearDown() override {
    if (raw_ >= 0) ::close(raw_);
  }
  void send_frame(wire::Type type, const void* body, size_t len,
                  const std::vector<uint8_t>& payload = {}) {
    wire::Header h{};
    h.type = static_cast<uint8_t>(type);
    h.payload = static_cast<uint32_t>(payload.size());
    std::vector<uint8_t> out(sizeof(h) + len);
    memcpy(out.data(), &h, sizeof(h));
    memcpy(out.data() + sizeof(h), body, len);
    out.insert(out.end(), payload.begin(), payload.end());
    ASSERT_EQ(::send(raw_, out.data(), out.size(), MSG_NOSIGNAL), ssize_t(out.size()));
  }
  // Runs the routers and collects what host 2 sent on the raw link: ConnectRep statuses by
  // request id, Responses; `closed` once host 2 closed it.
  void collect(int passes = 300) {
    run(passes);
    uint8_t buf[65536];
    for (;;) {
      ssize_t n = ::recv(raw_, buf, sizeof(buf), MSG_DONTWAIT);
      if (n == 0) closed = true;
      if (n <= 0) break;
      in_.insert(in_.end(), buf, buf + n);
    }
    size_t pos = 0;
    while (in_.size() - pos >= sizeof(wire::Header)) {
      wire::Header h;
      memcpy(&h, in_.data() + pos, sizeof(h));
      size_t body = wire::body_size(static_cast<wire::Type>(h.type));
      if (in_.size() - pos < sizeof(h) + body + h.payload) break;
      const uint8_t* p = in_.data() + pos + sizeof(h);
      if (h.type == uint8_t(wire::Type::kConnectRep)) {
        auto r = wire::read<wire::ConnectRep>(p);
        connect_reps[r.req_id] = r.status;
      } else if (h.type == uint8_t(wire::Type::kResponse)) {
        responses.push_back(wire::read<wire::Response>(p));
      }
      pos += sizeof(h) + body + h.payload;
    }
    in_.erase(in_.begin(), in_.begin() + pos);
  }
  int32_t connect(uint32_t src_ipv4, uint32_t src_qpn, FakeQp& dst, uint32_t type) {
    const uint64_t id = ++req_;
    wire::Connect c{id, src_ipv4, dst.client->ipv4, src_qpn, dst.qpn, type, 0};
    send_frame(wire::Type::kConnect, &c, sizeof(c));
    collect();
    auto it = connect_reps.find(id);
    return it == connect_reps.end() ? -1 : it->second;
  }
  const wire::Response* response(uint32_t src_qpn, uint64_t seq) const {
    for (const auto& r : responses)
      if (r.src_qpn == src_qpn && r.seq == seq) return &r;
    return nullptr;
  }

  int raw_ = -1;
  uint64_t req_ = 500;
  std::vector<uint8_t> in_;
  std::map<uint64_t, int32_t> connect_reps;
  std::vector<wire::Response> responses;
  bool closed = false;
};

TEST_F(HostileXrc, AForgedRequestNamingAVictimsSrqFailsAndTheVictimGoesOn) {
  // The attacker's tenant has a container on each host, its own domain and XRC_RECV QP on host
  // 2 whose RTR names the attacker's forged source QP: a connection host 2 accepts.
  FakeClient& evil1 = h1->client("10.1.0.66", "evil");
  FakeClient& evil2 = h2->client("10.2.0.66", "evil");
  FakeQp& er = h2->qp(evil2, IBV_QPT_XRC_RECV);
  er.xrcd = kDomain;  // even the victim's domain number: the tenant differs
  const uint32_t forged_qpn = 0x10777;
  er.peer_ipv4 = evil1.ipv4;
  er.peer_qpn = forged_qpn;
  er.set_state(IBV_QPS_RTR);
  ASSERT_EQ(connect(evil1.ipv4, forged_qpn, er, IBV_QPT_XRC_SEND), 0);
  // A Connect straight to the victim's XRC_RECV QP from the attacker's tenant: refused.
  EXPECT_EQ(connect(evil1.ipv4, 0x10778, *rcv, IBV_QPT_XRC_SEND), wire::kRefused);
  // A Connect to the victim's SRQ as if it were a QP: refused.
  EXPECT_EQ(connect(evil1.ipv4, 0x10779, *srqq, IBV_QPT_XRC_SEND), wire::kRefused);

  // The victim's receives and traffic, interleaved with the attack.
  srq->post_recv(1, {m2->sge(0, 64)});
  srq->post_recv(2, {m2->sge(64, 64)});
  auto victim = random_bytes(64, 99);
  memcpy(m1->ptr, victim.data(), 64);
  ibv_sge sge = m1->sge(0, 64);
  post_xrc(*snd, make_wr(1, IBV_WR_SEND, &sge, 1), srqq->qpn);

  // The forged SEND into the victim's SRQ, with a payload; then a WRITE into the victim's
  // memory through the same SRQ number (its key would be the SRQ's PD's).
  std::vector<uint8_t> junk(64, 0xee);
  wire::Request r{};
  r.src_qpn = forged_qpn;
  r.dst_qpn = er.qpn;
  r.seq = 0;
  r.opcode = IBV_WR_SEND;
  r.qp_type = IBV_QPT_XRC_RECV;
  r.xrc_srqn = srqq->qpn;
  r.length = junk.size();
  r.timeout = 14;
  r.retry_cnt = 7;
  send_frame(wire::Type::kRequest, &r, sizeof(r), junk);
  collect();
  const wire::Response* rep = response(forged_qpn, 0);
  ASSERT_NE(rep, nullptr);
  EXPECT_EQ(rep->status, uint32_t(IBV_WC_REM_INV_REQ_ERR));
  // A second connection of the attacker tries the WRITE.
  const uint32_t forged2 = 0x10780;
  FakeQp& er2 = h2->qp(evil2, IBV_QPT_XRC_RECV);
  er2.xrcd = kDomain;
  er2.peer_ipv4 = evil1.ipv4;
  er2.peer_qpn = forged2;
  er2.set_state(IBV_QPS_RTR);
  ASSERT_EQ(connect(evil1.ipv4, forged2, er2, IBV_QPT_XRC_SEND), 0);
  wire::Request wr = r;
  wr.src_qpn = forged2;
  wr.dst_qpn = er2.qpn;
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.rkey = m2->key;
  wr.remote_addr = m2->addr() + 64;
  send_frame(wire::Type::kRequest, &wr, sizeof(wr), junk);
  collect();
  rep = response(forged2, 0);
  ASSERT_NE(rep, nullptr);
  EXPECT_EQ(rep->status, uint32_t(IBV_WC_REM_INV_REQ_ERR));
  EXPECT_FALSE(closed);

  // The victim: its SEND arrived, its second receive untouched, its memory its own.
  auto wcs = send_completions(*snd, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
  post_xrc(*snd, make_wr(2, IBV_WR_SEND, &sge, 1), srqq->qpn);
  wcs = send_completions(*snd, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
  auto rcs = recv_completions(*srqq, 2);
  ASSERT_EQ(rcs.size(), 2u);
  for (const auto& c : rcs) EXPECT_EQ(c.src_qp, snd->qpn);
  EXPECT_EQ(memcmp(m2->ptr, victim.data(), 64), 0);
  EXPECT_EQ(memcmp(m2->ptr + 64, victim.data(), 64), 0);

  // A request that names no SRQ at all on an XRC connection is no frame: the link closes.
  wire::Request none = r;
  none.src_qpn = forged_qpn;
  none.seq = 1;
  none.xrc_srqn = 0;
  send_frame(wire::Type::kRequest, &none, sizeof(none), junk);
  collect();
  EXPECT_TRUE(closed);
}

}  // namespace
}  // namespace vrdma::daemon::testing
