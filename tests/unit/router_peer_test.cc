// The responder facing a router that does not follow the protocol: the test plays host 1's
// router on a second link (raw frames on a socket pair) and host 2's router must refuse what
// no connection, no consent or no owned address covers, and keep each connection in sequence.
#include <errno.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "router_fake.h"

namespace vrdma::daemon::testing {
namespace {

struct Frame {
  wire::Type type;
  std::vector<uint8_t> body, payload;
};

class RawPeer : public RoutedRc {
 protected:
  void SetUp() override {
    RoutedRc::SetUp();
    int sv[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
    raw_ = sv[0];
    // A second link from host 1: host 2's router takes it as any other.
    ASSERT_EQ(h2->router().adopt_link(UniqueFd(sv[1]), 1, false, now), 0);
    c3 = &h2->client("10.2.0.9", "other");
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
  // Runs the routers a while and returns the frames host 2 sent on the raw link (pings
  // aside).
  std::vector<Frame> frames(int passes = 200) {
    run(passes);
    uint8_t buf[65536];
    for (;;) {
      ssize_t n = ::recv(raw_, buf, sizeof(buf), MSG_DONTWAIT);
      if (n <= 0) break;
      in_.insert(in_.end(), buf, buf + n);
    }
    std::vector<Frame> out;
    size_t pos = 0;
    while (in_.size() - pos >= sizeof(wire::Header)) {
      wire::Header h;
      memcpy(&h, in_.data() + pos, sizeof(h));
      size_t body = wire::body_size(static_cast<wire::Type>(h.type));
      if (in_.size() - pos < sizeof(h) + body + h.payload) break;
      Frame f{static_cast<wire::Type>(h.type), {}, {}};
      const uint8_t* p = in_.data() + pos + sizeof(h);
      f.body.assign(p, p + body);
      f.payload.assign(p + body, p + body + h.payload);
      pos += sizeof(h) + body + h.payload;
      if (f.type != wire::Type::kPong) out.push_back(std::move(f));
    }
    in_.erase(in_.begin(), in_.begin() + pos);
    return out;
  }
  int32_t connect_status(uint32_t src_ipv4, uint32_t src_qpn, FakeQp& dst, uint32_t type) {
    wire::Connect c{++req_, src_ipv4, dst.client->ipv4, src_qpn, dst.qpn, type, 0};
    send_frame(wire::Type::kConnect, &c, sizeof(c));
    for (const Frame& f : frames()) {
      if (f.type != wire::Type::kConnectRep) continue;
      auto rep = wire::read<wire::ConnectRep>(f.body.data());
      if (rep.req_id == req_) return rep.status;
    }
    return -1;
  }
  wire::Request write_req(uint32_t src_qpn, FakeQp& dst, uint64_t seq, uint32_t len) {
    wire::Request r{};
    r.src_qpn = src_qpn;
    r.dst_qpn = dst.qpn;
    r.seq = seq;
    r.opcode = IBV_WR_RDMA_WRITE;
    r.qp_type = IBV_QPT_RC;
    r.rkey = m2->key;
    r.remote_addr = m2->addr();
    r.length = len;
    r.timeout = 14;
    r.retry_cnt = 7;
    return r;
  }
  std::vector<wire::Response> responses(int passes = 200) {
    std::vector<wire::Response> out;
    for (const Frame& f : frames(passes))
      if (f.type == wire::Type::kResponse) out.push_back(wire::read<wire::Response>(f.body.data()));
    return out;
  }

  int raw_ = -1;
  uint64_t req_ = 100;
  std::vector<uint8_t> in_;
  FakeClient* c3 = nullptr;
};

TEST_F(RawPeer, ConnectsAreRefusedForForeignAddressesTenantsAndTypes) {
  const uint32_t mine = c1->ipv4;
  EXPECT_EQ(connect_status(ip("10.2.0.77"), 0x10099, *b, IBV_QPT_RC), wire::kRefused)
      << "a source address host 1 does not own";
  FakeQp& other = h2->qp(*c3, IBV_QPT_RC);
  EXPECT_EQ(connect_status(mine, 0x10099, other, IBV_QPT_RC), wire::kRefused)
      << "a QP of another tenant";
  EXPECT_EQ(connect_status(mine, 0x10099, *b, IBV_QPT_UC), wire::kRefused) << "another type";
  FakeQp ghost = *b;
  ghost.qpn = 0x2ffff;
  EXPECT_EQ(connect_status(mine, 0x10099, ghost, IBV_QPT_RC), wire::kRefused) << "no such QP";
  EXPECT_EQ(connect_status(mine, 0x10099, *b, IBV_QPT_RC), 0);
}

TEST_F(RawPeer, ARequestWithoutAConnectionIsRefusedAndWritesNothing) {
  wire::Request r = write_req(a->qpn, *b, 0, 16);
  send_frame(wire::Type::kRequest, &r, sizeof(r), std::vector<uint8_t>(16, 0xcd));
  auto rs = responses();
  ASSERT_EQ(rs.size(), 1u);
  EXPECT_EQ(rs[0].status, uint32_t(IBV_WC_REM_INV_REQ_ERR));
  EXPECT_EQ(m2->ptr[0], 0);
}

TEST_F(RawPeer, ARequestTheDestinationDidNotAgreeToIsNeverExecuted) {
  // Connected on this link as QP 0x10099, which b's RTR does not name (b named a): held as
  // "not ready", never written, and failed at its deadline.
  ASSERT_EQ(connect_status(c1->ipv4, 0x10099, *b, IBV_QPT_RC), 0);
  wire::Request r = write_req(0x10099, *b, 0, 16);
  r.timeout = 8;  // 1 ms
  r.retry_cnt = 1;
  send_frame(wire::Type::kRequest, &r, sizeof(r), std::vector<uint8_t>(16, 0xcd));
  auto rs = responses(5000);
  ASSERT_EQ(rs.size(), 1u);
  EXPECT_EQ(rs[0].status, uint32_t(IBV_WC_RETRY_EXC_ERR));
  EXPECT_EQ(m2->ptr[0], 0);
}

TEST_F(RawPeer, ARequestOutOfSequenceEndsTheConnection) {
  // A second connection from a's address and QPN on this link (the first is on the real one):
  // b's RTR names a, so requests in sequence execute.
  ASSERT_EQ(connect_status(c1->ipv4, a->qpn, *b, IBV_QPT_RC), 0);
  std::vector<uint8_t> data(16, 0x11);
  wire::Request r0 = write_req(a->qpn, *b, 0, 16);
  send_frame(wire::Type::kRequest, &r0, sizeof(r0), data);
  auto rs = responses();
  ASSERT_EQ(rs.size(), 1u);
  EXPECT_EQ(rs[0].status, uint32_t(IBV_WC_SUCCESS));
  EXPECT_EQ(m2->ptr[0], 0x11);
  // seq 2 instead of 1: refused, and the connection is gone: seq 1 is refused too.
  wire::Request r2 = write_req(a->qpn, *b, 2, 16);
  r2.remote_addr += 100;
  send_frame(wire::Type::kRequest, &r2, sizeof(r2), data);
  wire::Request r1 = write_req(a->qpn, *b, 1, 16);
  r1.remote_addr += 200;
  send_frame(wire::Type::kRequest, &r1, sizeof(r1), data);
  rs = responses();
  ASSERT_EQ(rs.size(), 2u);
  EXPECT_EQ(rs[0].status, uint32_t(IBV_WC_REM_INV_REQ_ERR));
  EXPECT_EQ(rs[1].status, uint32_t(IBV_WC_REM_INV_REQ_ERR));
  EXPECT_EQ(m2->ptr[100], 0);
  EXPECT_EQ(m2->ptr[200], 0);
}

TEST_F(RawPeer, AnOpcodeTheDestinationsTypeRefusesFailsTheConnection) {
  FakeQp& uc = h2->qp(*c2, IBV_QPT_UC);
  uc.peer_ipv4 = c1->ipv4;
  uc.peer_qpn = 0x10077;
  uc.set_state(IBV_QPS_RTS);
  ASSERT_EQ(connect_status(c1->ipv4, 0x10077, uc, IBV_QPT_UC), 0);
  wire::Request r{};
  r.src_qpn = 0x10077;
  r.dst_qpn = uc.qpn;
  r.opcode = IBV_WR_RDMA_READ;  // not on UC
  r.qp_type = IBV_QPT_RC;       // a lie: the destination's type decides
  r.rkey = m2->key;
  r.remote_addr = m2->addr();
  r.length = 8;
  send_frame(wire::Type::kRequest, &r, sizeof(r));
  auto rs = responses();
  ASSERT_EQ(rs.size(), 1u);
  EXPECT_EQ(rs[0].status, uint32_t(IBV_WC_REM_INV_REQ_ERR));
}

}  // namespace
}  // namespace vrdma::daemon::testing
