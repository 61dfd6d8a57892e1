// vrdmad's connection manager (rdma_cm) over its socket: listeners, connect / accept / RTU,
// reject, disconnect, and what a client's death tells the other side. Every client of the
// in-process daemon has the host's address (expected_ipv4()).
#include <arpa/inet.h>
#include <errno.h>
#include <gtest/gtest.h>

#include <cstring>

#include "daemon/cm/cm_table.h"
#include "daemon/core/decode.h"
#include "daemon_test_util.h"

namespace vrdma::daemon::testing {
namespace {

using proto::Op;

constexpr uint32_t kRc = static_cast<uint32_t>(proto::QpType::kRc);
constexpr uint32_t kUd = static_cast<uint32_t>(proto::QpType::kUd);

struct Client {
  Conn conn;
  TestArena arena;
  proto::HelloRep hello{};
  uint32_t qpn = 0;
  explicit Client(const std::string& path, uint32_t qp_type = kRc) : conn(Conn::open(path)) {
    hello = conn.hello();
    EXPECT_EQ(put_arena(conn, arena), 0);
    EXPECT_EQ(alloc_qpn(conn, qp_type, TestArena::qp_offset(0), &qpn), 0);
  }
  uint32_t ip() const { return hello.ipv4; }
};

template <typename Req>
int cm_call(Conn& c, Op op, const Req& req, Packet* reply = nullptr) {
  auto own = std::make_unique<Packet>();
  Packet& p = reply ? *reply : *own;
  if (!c.call(op, req, p)) return -1;
  return p.header.status;
}

int listen(Client& c, uint32_t ip, uint16_t port, uint64_t cookie, uint32_t* bound = nullptr) {
  proto::CmListenReq req{ip, port, 0, cookie};
  auto p = std::make_unique<Packet>();
  int rc = cm_call(c.conn, Op::kCmListen, req, p.get());
  if (rc == 0 && bound) {
    const auto* rep = p->as<proto::CmListenRep>();
    if (!rep) return -2;
    *bound = rep->ipv4;
  }
  return rc;
}

int connect(Client& c, uint32_t ip, uint16_t port, uint64_t cookie, uint32_t* conn_id,
            const char* priv = "hello", uint32_t qp_type = kRc) {
  proto::CmConnectReq req{};
  req.dst_ipv4 = ip;
  req.dst_port = port;
  req.src_port = 40000;
  req.local_qpn = c.qpn;
  req.qp_type = qp_type;
  req.qkey = 0x01234567;
  req.params = {4, 4, 7, 7};
  req.private_len = static_cast<uint8_t>(std::strlen(priv));
  std::memcpy(req.private_data, priv, req.private_len);
  req.cookie = cookie;
  auto p = std::make_unique<Packet>();
  int rc = cm_call(c.conn, Op::kCmConnect, req, p.get());
  if (rc == 0) {
    const auto* rep = p->as<proto::CmConnectRep>();
    if (!rep) return -2;
    *conn_id = rep->conn_id;
  }
  return rc;
}

bool take(Conn& c, Op op, Packet& p) {
  if (!c.take_async(p)) return false;
  EXPECT_EQ(p.header.op, static_cast<uint16_t>(op));
  return p.header.op == static_cast<uint16_t>(op);
}

TEST(DaemonCmTest, ListenWildcardOwnAddressAndConflicts) {
  DaemonFixture f;
  Client a(f.socket()), b(f.socket());
  uint32_t bound = 0;
  ASSERT_EQ(listen(a, 0, 7471, 1, &bound), 0);
  EXPECT_EQ(bound, a.ip());
  // The same (ip, port) from anyone on the host, wildcard or not, is taken.
  EXPECT_EQ(listen(b, 0, 7471, 2), EADDRINUSE);
  EXPECT_EQ(listen(a, a.ip(), 7471, 3), EADDRINUSE);
  // Not the client's own address.
  EXPECT_EQ(listen(b, htonl(0x0a0b0c0d), 7472, 4), EADDRNOTAVAIL);
  // Port 0 is refused by the decoder.
  EXPECT_EQ(listen(b, 0, 0, 5), EINVAL);
  // Unlisten frees it; only the owner may.
  proto::CmUnlistenReq u{a.ip(), 7471, 0};
  EXPECT_EQ(cm_call(b.conn, Op::kCmUnlisten, u), ENOENT);
  EXPECT_EQ(cm_call(a.conn, Op::kCmUnlisten, u), 0);
  EXPECT_EQ(listen(b, 0, 7471, 6), 0);
}

TEST(DaemonCmTest, ResolveKnowsOnlyThisHostsClients) {
  DaemonFixture f;
  Client a(f.socket());
  proto::CmResolveReq ok{a.ip()};
  auto p = std::make_unique<Packet>();
  ASSERT_EQ(cm_call(a.conn, Op::kCmResolve, ok, p.get()), 0);
  ASSERT_NE(p->as<proto::CmResolveRep>(), nullptr);
  EXPECT_EQ(p->as<proto::CmResolveRep>()->src_ipv4, a.ip());
  proto::CmResolveReq nobody{htonl(0x0a4d07fe)};
  EXPECT_EQ(cm_call(a.conn, Op::kCmResolve, nobody), EHOSTUNREACH);
}

TEST(DaemonCmTest, ConnectAcceptRtuAndDisconnect) {
  DaemonFixture f;
  Client srv(f.socket()), cli(f.socket());
  ASSERT_EQ(listen(srv, 0, 5000, 0xabc), 0);
  uint32_t conn = 0;
  ASSERT_EQ(connect(cli, srv.ip(), 5000, 0x77, &conn, "ping"), 0);
  EXPECT_NE(conn, 0u);

  auto p = std::make_unique<Packet>();
  ASSERT_TRUE(take(srv.conn, Op::kCmRequest, *p));
  const auto* req = p->as<proto::CmRequestEvent>();
  ASSERT_NE(req, nullptr);
  EXPECT_EQ(req->conn_id, conn);
  EXPECT_EQ(req->listen_cookie, 0xabcu);
  EXPECT_EQ(req->remote_qpn, cli.qpn);
  EXPECT_EQ(req->src_ipv4, cli.ip());
  EXPECT_EQ(req->dst_port, 5000);
  EXPECT_EQ(req->src_port, 40000);
  EXPECT_EQ(req->params.initiator_depth, 4);
  ASSERT_EQ(req->private_len, 4);
  EXPECT_EQ(std::memcmp(req->private_data, "ping", 4), 0);

  // Only the acceptor may accept; RTU only after the accept.
  proto::CmAcceptReq acc{};
  acc.conn_id = conn;
  acc.local_qpn = srv.qpn;
  acc.params = {2, 2, 0, 7};
  acc.private_len = 4;
  std::memcpy(acc.private_data, "pong", 4);
  proto::CmConnReq rtu{conn, 0};
  EXPECT_EQ(cm_call(cli.conn, Op::kCmRtu, rtu), EINVAL);
  EXPECT_EQ(cm_call(cli.conn, Op::kCmAccept, acc), ENOENT);
  ASSERT_EQ(cm_call(srv.conn, Op::kCmAccept, acc), 0);
  EXPECT_EQ(cm_call(srv.conn, Op::kCmAccept, acc), EINVAL);

  ASSERT_TRUE(take(cli.conn, Op::kCmReply, *p));
  const auto* rep = p->as<proto::CmEvent>();
  ASSERT_NE(rep, nullptr);
  EXPECT_EQ(rep->conn_id, conn);
  EXPECT_EQ(rep->cookie, 0x77u);
  EXPECT_EQ(rep->remote_qpn, srv.qpn);
  EXPECT_EQ(rep->params.responder_resources, 2);
  ASSERT_EQ(rep->private_len, 4);
  EXPECT_EQ(std::memcmp(rep->private_data, "pong", 4), 0);

  ASSERT_EQ(cm_call(cli.conn, Op::kCmRtu, rtu), 0);
  ASSERT_TRUE(take(srv.conn, Op::kCmEstablished, *p));
  EXPECT_EQ(p->as<proto::CmEvent>()->conn_id, conn);
  EXPECT_EQ(p->as<proto::CmEvent>()->cookie, 0u);

  // The acceptor leaves: the connector is told, once; the connection is gone.
  proto::CmConnReq bye{conn, 1};
  ASSERT_EQ(cm_call(srv.conn, Op::kCmDisconnect, bye), 0);
  ASSERT_TRUE(take(cli.conn, Op::kCmDisconnected, *p));
  EXPECT_EQ(p->as<proto::CmEvent>()->cookie, 0x77u);
  proto::CmConnReq bye2{conn, 0};
  EXPECT_EQ(cm_call(cli.conn, Op::kCmDisconnect, bye2), ENOENT);
}

TEST(DaemonCmTest, ConnectWithoutListenerOrToUnknownAddress) {
  DaemonFixture f;
  Client cli(f.socket());
  uint32_t conn = 0;
  EXPECT_EQ(connect(cli, cli.ip(), 6000, 1, &conn), ECONNREFUSED);
  EXPECT_EQ(connect(cli, htonl(0x0a4d07fe), 6000, 1, &conn), EHOSTUNREACH);
  // A QP that is not the client's own cannot be announced.
  Client other(f.socket());
  proto::CmConnectReq req{};
  req.dst_ipv4 = cli.ip();
  req.dst_port = 6000;
  req.local_qpn = other.qpn;
  req.qp_type = kRc;
  EXPECT_EQ(cm_call(cli.conn, Op::kCmConnect, req), EPERM);
  // Oversized private data never reaches the handler.
  req.local_qpn = cli.qpn;
  req.private_len = 57;
  EXPECT_EQ(cm_call(cli.conn, Op::kCmConnect, req), EINVAL);
}

TEST(DaemonCmTest, RejectCarriesPrivateData) {
  DaemonFixture f;
  Client srv(f.socket()), cli(f.socket());
  ASSERT_EQ(listen(srv, 0, 5001, 9), 0);
  uint32_t conn = 0;
  ASSERT_EQ(connect(cli, srv.ip(), 5001, 0x55, &conn), 0);
  auto p = std::make_unique<Packet>();
  ASSERT_TRUE(take(srv.conn, Op::kCmRequest, *p));
  proto::CmRejectReq rej{};
  rej.conn_id = conn;
  rej.private_len = 3;
  std::memcpy(rej.private_data, "no!", 3);
  ASSERT_EQ(cm_call(srv.conn, Op::kCmReject, rej), 0);
  ASSERT_TRUE(take(cli.conn, Op::kCmRejected, *p));
  const auto* ev = p->as<proto::CmEvent>();
  ASSERT_NE(ev, nullptr);
  EXPECT_EQ(ev->cookie, 0x55u);
  EXPECT_EQ(ev->reason, 0);
  ASSERT_EQ(ev->private_len, 3);
  EXPECT_EQ(std::memcmp(ev->private_data, "no!", 3), 0);
  EXPECT_EQ(cm_call(srv.conn, Op::kCmReject, rej), ENOENT);
}

TEST(DaemonCmTest, UdExchangeEndsWithTheReply) {
  DaemonFixture f;
  Client srv(f.socket(), kUd), cli(f.socket(), kUd);
  ASSERT_EQ(listen(srv, 0, 5002, 1), 0);
  uint32_t conn = 0;
  ASSERT_EQ(connect(cli, srv.ip(), 5002, 2, &conn, "", kUd), 0);
  auto p = std::make_unique<Packet>();
  ASSERT_TRUE(take(srv.conn, Op::kCmRequest, *p));
  EXPECT_EQ(p->as<proto::CmRequestEvent>()->qp_type, kUd);
  proto::CmAcceptReq acc{};
  acc.conn_id = conn;
  acc.local_qpn = srv.qpn;
  acc.qkey = 0x01234567;
  ASSERT_EQ(cm_call(srv.conn, Op::kCmAccept, acc), 0);
  ASSERT_TRUE(take(cli.conn, Op::kCmReply, *p));
  EXPECT_EQ(p->as<proto::CmEvent>()->remote_qpn, srv.qpn);
  EXPECT_EQ(p->as<proto::CmEvent>()->qkey, 0x01234567u);
  proto::CmConnReq rtu{conn, 0};
  EXPECT_EQ(cm_call(cli.conn, Op::kCmRtu, rtu), ENOENT);
}

TEST(DaemonCmTest, DeathTellsTheOtherSideAndFreesListeners) {
  DaemonFixture f;
  Client cli(f.socket());
  auto p = std::make_unique<Packet>();
  uint32_t pending = 0, established = 0;
  {
    Client srv(f.socket());
    ASSERT_EQ(listen(srv, 0, 5003, 1), 0);
    ASSERT_EQ(connect(cli, srv.ip(), 5003, 0x10, &established), 0);
    ASSERT_TRUE(take(srv.conn, Op::kCmRequest, *p));
    proto::CmAcceptReq acc{};
    acc.conn_id = established;
    acc.local_qpn = srv.qpn;
    ASSERT_EQ(cm_call(srv.conn, Op::kCmAccept, acc), 0);
    ASSERT_TRUE(take(cli.conn, Op::kCmReply, *p));
    proto::CmConnReq rtu{established, 0};
    ASSERT_EQ(cm_call(cli.conn, Op::kCmRtu, rtu), 0);
    ASSERT_EQ(connect(cli, srv.ip(), 5003, 0x20, &pending), 0);
    // srv dies here with one established connection and one unanswered request.
  }
  bool saw_disconnected = false, saw_rejected = false;
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(cli.conn.take_async(*p));
    const auto* ev = p->as<proto::CmEvent>();
    ASSERT_NE(ev, nullptr);
    if (p->header.op == static_cast<uint16_t>(Op::kCmDisconnected)) {
      EXPECT_EQ(ev->conn_id, established);
      EXPECT_EQ(ev->cookie, 0x10u);
      saw_disconnected = true;
    } else {
      EXPECT_EQ(p->header.op, static_cast<uint16_t>(Op::kCmRejected));
      EXPECT_EQ(ev->conn_id, pending);
      EXPECT_EQ(ev->cookie, 0x20u);
      EXPECT_EQ(ev->reason, ECONNREFUSED);
      saw_rejected = true;
    }
  }
  EXPECT_TRUE(saw_disconnected && saw_rejected);
  // Its listener is gone: the port is free and connecting is refused.
  uint32_t conn = 0;
  EXPECT_EQ(connect(cli, cli.ip(), 5003, 0x30, &conn), ECONNREFUSED);
  EXPECT_EQ(listen(cli, 0, 5003, 2), 0);
}

TEST(DaemonCmTest, ConnectorDeathDisconnectsTheAcceptor) {
  DaemonFixture f;
  Client srv(f.socket());
  ASSERT_EQ(listen(srv, 0, 5004, 1), 0);
  auto p = std::make_unique<Packet>();
  uint32_t conn = 0;
  {
    Client cli(f.socket());
    ASSERT_EQ(connect(cli, srv.ip(), 5004, 1, &conn), 0);
  }
  ASSERT_TRUE(take(srv.conn, Op::kCmRequest, *p));
  ASSERT_TRUE(take(srv.conn, Op::kCmDisconnected, *p));
  EXPECT_EQ(p->as<proto::CmEvent>()->conn_id, conn);
  EXPECT_EQ(p->as<proto::CmEvent>()->cookie, 0u);
}

TEST(DaemonCmTest, DecoderChecksCmRequests) {
  auto wire = [](Op op, const void* body, size_t len) {
    std::vector<uint8_t> pkt(sizeof(proto::Header) + len);
    proto::Header h{proto::kMagic, static_cast<uint16_t>(op), 0, 1, 0,
                    static_cast<uint32_t>(len)};
    std::memcpy(pkt.data(), &h, sizeof(h));
    if (len) std::memcpy(pkt.data() + sizeof(h), body, len);
    return pkt;
  };
  proto::CmConnReq bad_side{1, 2};
  EXPECT_EQ(decode_wire(wire(Op::kCmDisconnect, &bad_side, sizeof(bad_side)), 0, false).verdict,
            DecodeVerdict::kInvalid);
  proto::CmConnReq rtu_passive{1, 1};
  EXPECT_EQ(decode_wire(wire(Op::kCmRtu, &rtu_passive, sizeof(rtu_passive)), 0, false).verdict,
            DecodeVerdict::kInvalid);
  proto::CmConnReq ok{1, 0};
  Decoded d = decode_wire(wire(Op::kCmRtu, &ok, sizeof(ok)), 0, false);
  EXPECT_EQ(d.verdict, DecodeVerdict::kOk);
  EXPECT_EQ(d.op, Op::kCmRtu);
  EXPECT_EQ(decode_wire(wire(Op::kCmRtu, &ok, sizeof(ok) - 1), 0, false).verdict,
            DecodeVerdict::kMalformed);
  proto::CmRejectReq rej{};
  rej.private_len = 200;
  EXPECT_EQ(decode_wire(wire(Op::kCmReject, &rej, sizeof(rej)), 0, false).verdict,
            DecodeVerdict::kInvalid);
  proto::CmAcceptReq acc{};
  EXPECT_EQ(decode_wire(wire(Op::kCmAccept, &acc, sizeof(acc)), 1, false).verdict,
            DecodeVerdict::kMalformed);  // a stray descriptor
  // Events are the daemon's to send, never requests.
  proto::CmEvent ev{};
  EXPECT_EQ(decode_wire(wire(Op::kCmReply, &ev, sizeof(ev)), 0, false).verdict,
            DecodeVerdict::kMalformed);
}

TEST(DaemonCmTest, TableQuotasAndRemoval) {
  CmTable t;
  ASSERT_EQ(t.listen(1, 10, 80, 5), 0);
  EXPECT_EQ(t.listen(2, 10, 80, 6), EADDRINUSE);
  CmConnection* c = t.add(2, 7, 0x100, 1, kRc);
  ASSERT_NE(c, nullptr);
  uint32_t id = c->id;
  auto notices = t.remove_client(1);
  ASSERT_EQ(notices.size(), 1u);
  EXPECT_EQ(notices[0].client, 2u);
  EXPECT_EQ(notices[0].op, Op::kCmRejected);
  EXPECT_EQ(notices[0].conn_id, id);
  EXPECT_EQ(t.listener_count(), 0u);
  EXPECT_EQ(t.connection_count(), 0u);
}

}  // namespace
}  // namespace vrdma::daemon::testing
