// The drop-in librdmacm over the drop-in libibverbs, against an in-process vrdmad: address
// and route resolution, connect / accept with private data both ways and data moved over the
// connected QPs, reject, errors, disconnect, and the synchronous endpoint API. The process is
// one client of the daemon, so both ends of every connection live here. Every wait is bounded.
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netdb.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "daemon_test_util.h"

namespace {

using vrdma::daemon::testing::DaemonFixture;

constexpr int kWaitMs = 5000;

DaemonFixture& shared_daemon() {
  static auto* d = [] {
    auto* fx = new DaemonFixture();
    setenv("VRDMA_SOCKET", fx->socket().c_str(), 1);
    return fx;
  }();
  return *d;
}

uint32_t own_ip() { return vrdma::daemon::testing::expected_ipv4(); }

sockaddr_in addr(uint32_t ip, uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = ip;
  a.sin_port = htons(port);
  return a;
}

uint16_t next_port() {
  static std::atomic<uint16_t> p{20000};
  return p++;
}

// The next event of the channel, within the time limit; nullptr if none came.
rdma_cm_event* next_event(rdma_event_channel* ch, int timeout_ms = kWaitMs) {
  pollfd p{ch->fd, POLLIN, 0};
  if (poll(&p, 1, timeout_ms) != 1) return nullptr;
  rdma_cm_event* ev = nullptr;
  if (rdma_get_cm_event(ch, &ev)) return nullptr;
  return ev;
}

// Takes the next event and checks its type; the event is acked unless `keep`.
bool expect_event(rdma_event_channel* ch, rdma_cm_event_type want, rdma_cm_event** keep = nullptr,
                  int* status = nullptr) {
  rdma_cm_event* ev = next_event(ch);
  if (!ev) {
    ADD_FAILURE() << "no event, wanted " << rdma_event_str(want);
    return false;
  }
  bool ok = ev->event == want;
  EXPECT_EQ(ev->event, want) << rdma_event_str(ev->event) << " status " << ev->status;
  if (status) *status = ev->status;
  if (keep) *keep = ev;
  else rdma_ack_cm_event(ev);
  return ok;
}

class RdmacmTest : public ::testing::Test {
 protected:
  void SetUp() override {
    shared_daemon();
    sch = rdma_create_event_channel();
    cch = rdma_create_event_channel();
    ASSERT_NE(sch, nullptr) << strerror(errno);
    ASSERT_NE(cch, nullptr);
  }
  void TearDown() override {
    for (rdma_cm_id* id : ids) {
      if (id->qp) rdma_destroy_qp(id);
      rdma_destroy_id(id);
    }
    for (ibv_mr* mr : mrs) ibv_dereg_mr(mr);
    for (ibv_cq* cq : cqs) ibv_destroy_cq(cq);
    rdma_destroy_event_channel(sch);
    rdma_destroy_event_channel(cch);
  }

  rdma_cm_id* listener(uint16_t port) {
    rdma_cm_id* id = nullptr;
    EXPECT_EQ(rdma_create_id(sch, &id, this, RDMA_PS_TCP), 0);
    ids.push_back(id);
    sockaddr_in a = addr(0, port);
    EXPECT_EQ(rdma_bind_addr(id, reinterpret_cast<sockaddr*>(&a)), 0) << strerror(errno);
    EXPECT_EQ(rdma_listen(id, 8), 0) << strerror(errno);
    return id;
  }

  // A client id with its address and route resolved.
  rdma_cm_id* resolved_client(uint32_t ip, uint16_t port) {
    rdma_cm_id* id = nullptr;
    EXPECT_EQ(rdma_create_id(cch, &id, nullptr, RDMA_PS_TCP), 0);
    ids.push_back(id);
    sockaddr_in dst = addr(ip, port);
    EXPECT_EQ(rdma_resolve_addr(id, nullptr, reinterpret_cast<sockaddr*>(&dst), 2000), 0);
    if (!expect_event(cch, RDMA_CM_EVENT_ADDR_RESOLVED)) return id;
    EXPECT_NE(id->verbs, nullptr);
    EXPECT_EQ(id->route.addr.src_sin.sin_addr.s_addr, own_ip());
    EXPECT_EQ(rdma_resolve_route(id, 2000), 0);
    expect_event(cch, RDMA_CM_EVENT_ROUTE_RESOLVED);
    return id;
  }

  void make_qp(rdma_cm_id* id) {
    ibv_cq* cq = ibv_create_cq(id->verbs, 64, nullptr, nullptr, 0);
    ASSERT_NE(cq, nullptr);
    cqs.push_back(cq);
    ibv_qp_init_attr a{};
    a.send_cq = a.recv_cq = cq;
    a.qp_type = IBV_QPT_RC;
    a.cap.max_send_wr = a.cap.max_recv_wr = 16;
    a.cap.max_send_sge = a.cap.max_recv_sge = 1;
    ASSERT_EQ(rdma_create_qp(id, nullptr, &a), 0) << strerror(errno);
    ASSERT_NE(id->qp, nullptr);
    EXPECT_EQ(id->qp->state, IBV_QPS_INIT);
  }

  ibv_mr* reg(rdma_cm_id* id, std::vector<uint8_t>& buf) {
    ibv_mr* mr = ibv_reg_mr(id->pd, buf.data(), buf.size(),
                            IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                IBV_ACCESS_REMOTE_READ);
    EXPECT_NE(mr, nullptr);
    mrs.push_back(mr);
    return mr;
  }

  static bool poll_one(ibv_cq* cq, ibv_wc* wc) {
    auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(kWaitMs);
    while (std::chrono::steady_clock::now() < end) {
      int n = ibv_poll_cq(cq, 1, wc);
      if (n < 0) return false;
      if (n == 1) return true;
      std::this_thread::yield();
    }
    return false;
  }

  // A connected pair: client id and the server's new id, both ESTABLISHED.
  void connect_pair(uint16_t port, rdma_cm_id** client, rdma_cm_id** server) {
    listener(port);
    rdma_cm_id* c = resolved_client(own_ip(), port);
    make_qp(c);
    const char hello[] = "hello from the client";
    rdma_conn_param p{};
    p.private_data = hello;
    p.private_data_len = sizeof(hello);
    p.responder_resources = 4;
    p.initiator_depth = 4;
    p.retry_count = 7;
    p.rnr_retry_count = 7;
    ASSERT_EQ(rdma_connect(c, &p), 0) << strerror(errno);

    rdma_cm_event* req = nullptr;
    ASSERT_TRUE(expect_event(sch, RDMA_CM_EVENT_CONNECT_REQUEST, &req));
    rdma_cm_id* s = req->id;
    ids.push_back(s);
    EXPECT_EQ(req->listen_id, ids[0]);
    EXPECT_EQ(s->context, this);  // inherited from the listener
    ASSERT_EQ(req->param.conn.private_data_len, sizeof(hello));
    EXPECT_EQ(std::memcmp(req->param.conn.private_data, hello, sizeof(hello)), 0);
    EXPECT_EQ(req->param.conn.initiator_depth, 4);
    EXPECT_EQ(req->param.conn.qp_num, c->qp->qp_num);
    EXPECT_EQ(s->route.addr.dst_sin.sin_addr.s_addr, own_ip());
    EXPECT_EQ(s->route.addr.dst_sin.sin_port, c->route.addr.src_sin.sin_port);
    EXPECT_EQ(rdma_get_src_port(s), htons(port));
    EXPECT_EQ(s->verbs, c->verbs);  // one context per process
    rdma_ack_cm_event(req);
    make_qp(s);

    const char welcome[] = "welcome";
    rdma_conn_param ap{};
    ap.private_data = welcome;
    ap.private_data_len = sizeof(welcome);
    ap.responder_resources = 4;
    ap.initiator_depth = 4;
    ap.rnr_retry_count = 7;
    ASSERT_EQ(rdma_accept(s, &ap), 0) << strerror(errno);

    rdma_cm_event* est = nullptr;
    ASSERT_TRUE(expect_event(cch, RDMA_CM_EVENT_ESTABLISHED, &est));
    ASSERT_EQ(est->param.conn.private_data_len, sizeof(welcome));
    EXPECT_EQ(std::memcmp(est->param.conn.private_data, welcome, sizeof(welcome)), 0);
    EXPECT_EQ(est->param.conn.qp_num, s->qp->qp_num);
    rdma_ack_cm_event(est);
    EXPECT_EQ(c->qp->state, IBV_QPS_RTS);
    ASSERT_TRUE(expect_event(sch, RDMA_CM_EVENT_ESTABLISHED));
    EXPECT_EQ(s->qp->state, IBV_QPS_RTS);
    *client = c;
    *server = s;
  }

  rdma_event_channel* sch = nullptr;
  rdma_event_channel* cch = nullptr;
  std::vector<rdma_cm_id*> ids;
  std::vector<ibv_mr*> mrs;
  std::vector<ibv_cq*> cqs;
};

TEST_F(RdmacmTest, ConnectAcceptWriteSendDisconnect) {
  rdma_cm_id *c = nullptr, *s = nullptr;
  connect_pair(next_port(), &c, &s);
  ASSERT_TRUE(c && s);

  std::vector<uint8_t> src(8192), dst(8192, 0), msg(64), rcv(64, 0);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 7 + 3);
  for (size_t i = 0; i < msg.size(); ++i) msg[i] = static_cast<uint8_t>(0xa0 + i);
  ibv_mr* src_mr = reg(c, src);
  ibv_mr* dst_mr = reg(s, dst);
  ibv_mr* msg_mr = reg(c, msg);
  ibv_mr* rcv_mr = reg(s, rcv);

  ASSERT_EQ(rdma_post_recv(s, nullptr, rcv.data(), rcv.size(), rcv_mr), 0);
  ASSERT_EQ(rdma_post_write(c, nullptr, src.data(), src.size(), src_mr, IBV_SEND_SIGNALED,
                            reinterpret_cast<uint64_t>(dst.data()), dst_mr->rkey),
            0);
  ibv_wc wc{};
  ASSERT_TRUE(poll_one(c->qp->send_cq, &wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
  EXPECT_EQ(dst, src);

  ASSERT_EQ(rdma_post_send(c, nullptr, msg.data(), msg.size(), msg_mr, IBV_SEND_SIGNALED), 0);
  ASSERT_TRUE(poll_one(c->qp->send_cq, &wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  ASSERT_TRUE(poll_one(s->qp->recv_cq, &wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.opcode, IBV_WC_RECV);
  EXPECT_EQ(wc.byte_len, msg.size());
  EXPECT_EQ(rcv, msg);

  // Both sides get exactly one DISCONNECTED; a second disconnect is harmless.
  ASSERT_EQ(rdma_disconnect(c), 0);
  EXPECT_EQ(c->qp->state, IBV_QPS_ERR);
  expect_event(cch, RDMA_CM_EVENT_DISCONNECTED);
  expect_event(sch, RDMA_CM_EVENT_DISCONNECTED);
  EXPECT_EQ(rdma_disconnect(s), 0);
  EXPECT_EQ(rdma_disconnect(c), 0);
  EXPECT_EQ(next_event(sch, 100), nullptr);
  EXPECT_EQ(next_event(cch, 100), nullptr);
}

TEST_F(RdmacmTest, ServerDisconnectReachesTheClient) {
  rdma_cm_id *c = nullptr, *s = nullptr;
  connect_pair(next_port(), &c, &s);
  ASSERT_TRUE(c && s);
  ASSERT_EQ(rdma_disconnect(s), 0);
  expect_event(sch, RDMA_CM_EVENT_DISCONNECTED);
  expect_event(cch, RDMA_CM_EVENT_DISCONNECTED);
}

TEST_F(RdmacmTest, InitQpAttrDescribesTheConnection) {
  rdma_cm_id *c = nullptr, *s = nullptr;
  connect_pair(next_port(), &c, &s);
  ASSERT_TRUE(c && s);
  ibv_qp_attr a{};
  int mask = 0;
  a.qp_state = IBV_QPS_RTR;
  ASSERT_EQ(rdma_init_qp_attr(c, &a, &mask), 0);
  EXPECT_EQ(a.dest_qp_num, s->qp->qp_num);
  EXPECT_TRUE(mask & IBV_QP_DEST_QPN);
  EXPECT_EQ(a.ah_attr.is_global, 1);
  EXPECT_EQ(a.path_mtu, IBV_MTU_4096);
  a.qp_state = IBV_QPS_INIT;
  ASSERT_EQ(rdma_init_qp_attr(c, &a, &mask), 0);
  EXPECT_EQ(a.qp_access_flags,
            IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
  // perftest modifies the accepted QP with the RNR timer alone.
  ibv_qp_attr rnr{};
  rnr.min_rnr_timer = 12;
  EXPECT_EQ(ibv_modify_qp(s->qp, &rnr, IBV_QP_MIN_RNR_TIMER), 0);
}

TEST_F(RdmacmTest, RejectCarriesPrivateData) {
  uint16_t port = next_port();
  listener(port);
  rdma_cm_id* c = resolved_client(own_ip(), port);
  make_qp(c);
  rdma_conn_param p{};
  p.retry_count = 7;
  ASSERT_EQ(rdma_connect(c, &p), 0);
  rdma_cm_event* req = nullptr;
  ASSERT_TRUE(expect_event(sch, RDMA_CM_EVENT_CONNECT_REQUEST, &req));
  rdma_cm_id* s = req->id;
  ids.push_back(s);
  rdma_ack_cm_event(req);
  const char why[] = "go away";
  ASSERT_EQ(rdma_reject(s, why, sizeof(why)), 0);
  rdma_cm_event* rej = nullptr;
  int status = 0;
  ASSERT_TRUE(expect_event(cch, RDMA_CM_EVENT_REJECTED, &rej, &status));
  EXPECT_EQ(status, 28);  // IB_CM_REJ_CONSUMER_DEFINED
  ASSERT_EQ(rej->param.conn.private_data_len, sizeof(why));
  EXPECT_EQ(std::memcmp(rej->param.conn.private_data, why, sizeof(why)), 0);
  rdma_ack_cm_event(rej);
}

TEST_F(RdmacmTest, NoListenerIsRejected) {
  rdma_cm_id* c = resolved_client(own_ip(), next_port());
  make_qp(c);
  rdma_conn_param p{};
  ASSERT_EQ(rdma_connect(c, &p), 0);
  int status = 0;
  expect_event(cch, RDMA_CM_EVENT_REJECTED, nullptr, &status);
  EXPECT_EQ(status, 8);  // IB_CM_REJ_INVALID_SERVICE_ID
}

TEST_F(RdmacmTest, DestroyingAnUnansweredRequestRejectsIt) {
  uint16_t port = next_port();
  listener(port);
  rdma_cm_id* c = resolved_client(own_ip(), port);
  make_qp(c);
  rdma_conn_param p{};
  ASSERT_EQ(rdma_connect(c, &p), 0);
  rdma_cm_event* req = nullptr;
  ASSERT_TRUE(expect_event(sch, RDMA_CM_EVENT_CONNECT_REQUEST, &req));
  rdma_cm_id* s = req->id;
  rdma_ack_cm_event(req);
  ASSERT_EQ(rdma_destroy_id(s), 0);
  expect_event(cch, RDMA_CM_EVENT_REJECTED);
}

TEST_F(RdmacmTest, UnknownAddressIsAddrError) {
  rdma_cm_id* id = nullptr;
  ASSERT_EQ(rdma_create_id(cch, &id, nullptr, RDMA_PS_TCP), 0);
  ids.push_back(id);
  sockaddr_in dst = addr(inet_addr("192.0.2.1"), 7000);
  ASSERT_EQ(rdma_resolve_addr(id, nullptr, reinterpret_cast<sockaddr*>(&dst), 2000), 0);
  int status = 0;
  expect_event(cch, RDMA_CM_EVENT_ADDR_ERROR, nullptr, &status);
  EXPECT_LT(status, 0);
  // Nothing to route to.
  EXPECT_EQ(rdma_resolve_route(id, 2000), -1);
}

TEST_F(RdmacmTest, SecondListenerOnTheSamePortIsEaddrinuse) {
  uint16_t port = next_port();
  listener(port);
  rdma_cm_id* id = nullptr;
  ASSERT_EQ(rdma_create_id(sch, &id, nullptr, RDMA_PS_TCP), 0);
  ids.push_back(id);
  sockaddr_in a = addr(own_ip(), port);
  ASSERT_EQ(rdma_bind_addr(id, reinterpret_cast<sockaddr*>(&a)), 0);
  EXPECT_EQ(rdma_listen(id, 1), -1);
  EXPECT_EQ(errno, EADDRINUSE);
  // An address that is not ours cannot be bound.
  rdma_cm_id* other = nullptr;
  ASSERT_EQ(rdma_create_id(sch, &other, nullptr, RDMA_PS_TCP), 0);
  ids.push_back(other);
  sockaddr_in foreign = addr(inet_addr("192.0.2.1"), port);
  EXPECT_EQ(rdma_bind_addr(other, reinterpret_cast<sockaddr*>(&foreign)), -1);
  EXPECT_EQ(errno, EADDRNOTAVAIL);
}

TEST_F(RdmacmTest, NonBlockingChannel) {
  int flags = fcntl(cch->fd, F_GETFL);
  ASSERT_EQ(fcntl(cch->fd, F_SETFL, flags | O_NONBLOCK), 0);
  rdma_cm_event* ev = nullptr;
  EXPECT_EQ(rdma_get_cm_event(cch, &ev), -1);
  EXPECT_EQ(errno, EAGAIN);
  rdma_cm_id* id = nullptr;
  ASSERT_EQ(rdma_create_id(cch, &id, nullptr, RDMA_PS_TCP), 0);
  ids.push_back(id);
  sockaddr_in dst = addr(own_ip(), 1);
  ASSERT_EQ(rdma_resolve_addr(id, nullptr, reinterpret_cast<sockaddr*>(&dst), 2000), 0);
  ASSERT_EQ(rdma_get_cm_event(cch, &ev), 0);
  EXPECT_EQ(ev->event, RDMA_CM_EVENT_ADDR_RESOLVED);
  rdma_ack_cm_event(ev);
  EXPECT_EQ(rdma_get_cm_event(cch, &ev), -1);
  EXPECT_EQ(errno, EAGAIN);
}

TEST(RdmacmAddrinfo, PassiveNumericAndErrors) {
  shared_daemon();
  rdma_addrinfo hints{}, *res = nullptr;
  hints.ai_flags = RAI_PASSIVE;
  hints.ai_port_space = RDMA_PS_TCP;
  ASSERT_EQ(rdma_getaddrinfo(nullptr, "7471", &hints, &res), 0);
  ASSERT_NE(res, nullptr);
  ASSERT_NE(res->ai_src_addr, nullptr);
  auto* sin = reinterpret_cast<sockaddr_in*>(res->ai_src_addr);
  EXPECT_EQ(sin->sin_addr.s_addr, INADDR_ANY);
  EXPECT_EQ(ntohs(sin->sin_port), 7471);
  EXPECT_EQ(res->ai_qp_type, IBV_QPT_RC);
  rdma_freeaddrinfo(res);

  rdma_addrinfo active{};
  active.ai_port_space = RDMA_PS_TCP;
  ASSERT_EQ(rdma_getaddrinfo("10.1.2.3", "99", &active, &res), 0);
  sin = reinterpret_cast<sockaddr_in*>(res->ai_dst_addr);
  EXPECT_EQ(sin->sin_addr.s_addr, inet_addr("10.1.2.3"));
  EXPECT_EQ(ntohs(sin->sin_port), 99);
  rdma_freeaddrinfo(res);
  EXPECT_NE(rdma_getaddrinfo("no-such-host.invalid", "1", &active, &res), 0);
}

// rdma_server / rdma_client in miniature: synchronous ids, CQs and channels made by
// rdma_create_qp, an inline send without MR.
TEST(RdmacmSync, CreateEpGetRequestAcceptConnect) {
  shared_daemon();
  uint16_t port = next_port();
  std::string service = std::to_string(port);
  ibv_qp_init_attr attr{};
  attr.cap.max_send_wr = attr.cap.max_recv_wr = 4;
  attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
  attr.cap.max_inline_data = 16;
  attr.sq_sig_all = 1;

  rdma_addrinfo hints{}, *res = nullptr;
  hints.ai_flags = RAI_PASSIVE;
  hints.ai_port_space = RDMA_PS_TCP;
  ASSERT_EQ(rdma_getaddrinfo(nullptr, service.c_str(), &hints, &res), 0);
  rdma_cm_id* listen_id = nullptr;
  ASSERT_EQ(rdma_create_ep(&listen_id, res, nullptr, &attr), 0) << strerror(errno);
  rdma_freeaddrinfo(res);
  ASSERT_EQ(rdma_listen(listen_id, 0), 0);

  std::atomic<bool> server_ok{false};
  std::thread server([&] {
    rdma_cm_id* id = nullptr;
    if (rdma_get_request(listen_id, &id)) return;
    uint8_t buf[16] = {};
    ibv_mr* mr = rdma_reg_msgs(id, buf, sizeof(buf));
    bool ok = mr && id->qp && id->recv_cq && id->recv_cq_channel;
    EXPECT_TRUE(ok);
    ok = ok && rdma_post_recv(id, nullptr, buf, sizeof(buf), mr) == 0;
    EXPECT_TRUE(ok);
    ok = ok && rdma_accept(id, nullptr) == 0;
    EXPECT_TRUE(ok) << strerror(errno);
    ibv_wc wc{};
    ok = ok && rdma_get_recv_comp(id, &wc) == 1 && wc.status == IBV_WC_SUCCESS;
    EXPECT_TRUE(ok) << ibv_wc_status_str(wc.status);
    ok = ok && std::memcmp(buf, "rdma_client msg", 16) == 0;
    EXPECT_TRUE(ok);
    const char reply[16] = "server reply";
    ok = ok && rdma_post_send(id, nullptr, const_cast<char*>(reply), sizeof(reply), nullptr,
                              IBV_SEND_INLINE) == 0;
    ok = ok && rdma_get_send_comp(id, &wc) == 1 && wc.status == IBV_WC_SUCCESS;
    rdma_cm_event* ev = nullptr;
    // The client disconnects when it has the reply.
    pollfd p{id->channel->fd, POLLIN, 0};
    ok = ok && poll(&p, 1, kWaitMs) == 1 && rdma_get_cm_event(id->channel, &ev) == 0 &&
         ev->event == RDMA_CM_EVENT_DISCONNECTED;
    if (ev) rdma_ack_cm_event(ev);
    rdma_disconnect(id);
    if (mr) rdma_dereg_mr(mr);
    rdma_destroy_ep(id);
    server_ok = ok;
  });

  rdma_addrinfo chints{};
  chints.ai_port_space = RDMA_PS_TCP;
  in_addr ip{own_ip()};
  ASSERT_EQ(rdma_getaddrinfo(inet_ntoa(ip), service.c_str(), &chints, &res), 0);
  rdma_cm_id* id = nullptr;
  ibv_qp_init_attr cattr = attr;
  ASSERT_EQ(rdma_create_ep(&id, res, nullptr, &cattr), 0) << strerror(errno);
  rdma_freeaddrinfo(res);
  uint8_t buf[16] = {};
  ibv_mr* mr = rdma_reg_msgs(id, buf, sizeof(buf));
  ASSERT_NE(mr, nullptr);
  ASSERT_EQ(rdma_post_recv(id, nullptr, buf, sizeof(buf), mr), 0);
  ASSERT_EQ(rdma_connect(id, nullptr), 0) << strerror(errno);
  const char msg[16] = "rdma_client msg";
  ASSERT_EQ(rdma_post_send(id, nullptr, const_cast<char*>(msg), sizeof(msg), nullptr,
                           IBV_SEND_INLINE),
            0);
  ibv_wc wc{};
  ASSERT_EQ(rdma_get_send_comp(id, &wc), 1);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  ASSERT_EQ(rdma_get_recv_comp(id, &wc), 1);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_STREQ(reinterpret_cast<char*>(buf), "server reply");
  rdma_disconnect(id);
  server.join();
  EXPECT_TRUE(server_ok);
  rdma_dereg_mr(mr);
  rdma_destroy_ep(id);
  rdma_destroy_ep(listen_id);
}

TEST(RdmacmSync, ConnectWithoutListenerFails) {
  shared_daemon();
  rdma_addrinfo hints{}, *res = nullptr;
  hints.ai_port_space = RDMA_PS_TCP;
  in_addr ip{own_ip()};
  ASSERT_EQ(rdma_getaddrinfo(inet_ntoa(ip), std::to_string(next_port()).c_str(), &hints, &res),
            0);
  ibv_qp_init_attr attr{};
  attr.cap.max_send_wr = attr.cap.max_recv_wr = 1;
  attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
  rdma_cm_id* id = nullptr;
  ASSERT_EQ(rdma_create_ep(&id, res, nullptr, &attr), 0);
  rdma_freeaddrinfo(res);
  EXPECT_EQ(rdma_connect(id, nullptr), -1);
  EXPECT_EQ(errno, ECONNREFUSED);
  rdma_destroy_ep(id);

  // A synchronous resolve of an address nobody owns fails at once.
  hints.ai_port_space = RDMA_PS_TCP;
  ASSERT_EQ(rdma_getaddrinfo("192.0.2.1", "1", &hints, &res), 0);
  EXPECT_EQ(rdma_create_ep(&id, res, nullptr, nullptr), -1);
  EXPECT_EQ(errno, EHOSTUNREACH);
  rdma_freeaddrinfo(res);
}

}  // namespace
