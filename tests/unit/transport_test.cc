// The requester and the responder (src/transport) on their own, over each transport: a stream
// socket pair (what TCP gives the direct path), two ends joined in memory (the mediated path's
// link), and a fake that can delay, drop, reorder and cut frames. QP `a` of client A sends to
// QP `b` of client B: a transport::Requester carries a's work from its send queue to A's end of
// the link, a transport::Responder on B's end executes it against b, as the library's direct
// connections and vrdmad's router do. Clients, QPs and memory are the fake ones of
// router_fake.h (built as the library builds them); the clock is simulated.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <cstring>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/log.h"
#include "router_fake.h"
#include "transport/link.h"
#include "transport/requester.h"
#include "transport/responder.h"

namespace vrdma::daemon::testing {
namespace {

using transport::Link;
using transport::PayloadDest;

enum class Transport { kSocket, kJoined, kFake };

std::string transport_name(const ::testing::TestParamInfo<Transport>& p) {
  switch (p.param) {
    case Transport::kSocket:
      return "Socket";
    case Transport::kJoined:
      return "Joined";
    case Transport::kFake:
      return "Fake";
  }
  return "?";
}

// The fake network between two fake ends: whole frames, each delivered at its time unless the
// test dropped it; the test can hold the next frames back, swap two, or cut the connection.
struct FakeNet {
  struct Frame {
    std::vector<uint8_t> bytes;
    int64_t at = 0;  // deliverable from then on
  };
  std::deque<Frame> queue[2];  // [0]: A to B, [1]: B to A
  size_t offset[2] = {};       // bytes of the front frame already read
  int64_t* now = nullptr;
  int64_t delay_ns = 0;
  int drop_next[2] = {};  // requests / responses to drop
  bool swap_next[2] = {};  // the next two frames arrive in the other order
  bool cut = false;
  // Frames of a type the test cares about: drops and swaps apply to these only.
  static bool counted(const std::vector<uint8_t>& f) {
    const auto t = static_cast<wire::Type>(f[0]);
    return t == wire::Type::kRequest || t == wire::Type::kResponse;
  }
};

class FakeLink : public Link {
 public:
  FakeLink(uint32_t id, UniqueFd fd, bool outbound, FakeNet& net, int dir)
      : Link(id, std::move(fd), outbound), net_(net), dir_(dir) {
    connected();
  }

 protected:
  bool flush_out() override {
    if (net_.cut) return false;
    while (tail_ != head_) {
      const Out& o = out_at(tail_);
      FakeNet::Frame f;
      for (int i = 0; i < o.niov; ++i) {
        const auto* p = static_cast<const uint8_t*>(o.iov[i].iov_base);
        f.bytes.insert(f.bytes.end(), p, p + o.iov[i].iov_len);
      }
      bytes_out += f.bytes.size();
      ++tail_;
      f.at = *net_.now + net_.delay_ns;
      auto& q = net_.queue[dir_];
      if (FakeNet::counted(f.bytes) && net_.drop_next[dir_] > 0) {
        --net_.drop_next[dir_];
        continue;
      }
      if (FakeNet::counted(f.bytes) && held_) {
        // The frame held back goes after this one.
        q.push_back(std::move(f));
        q.push_back(std::move(*held_));
        held_.reset();
        continue;
      }
      if (FakeNet::counted(f.bytes) && net_.swap_next[dir_]) {
        net_.swap_next[dir_] = false;
        held_ = std::move(f);
        continue;
      }
      q.push_back(std::move(f));
    }
    tail_off_ = 0;
    return true;
  }
  ssize_t read_some(uint8_t* buf, size_t len) override {
    iovec v{buf, len};
    return read_vec(&v, 1);
  }
  ssize_t read_vec(const iovec* iov, int n) override {
    if (net_.cut) return 0;
    auto& q = net_.queue[1 - dir_];
    size_t& off = net_.offset[1 - dir_];
    size_t got = 0;
    for (int i = 0; i < n; ++i) {
      size_t at = 0;
      while (at < iov[i].iov_len && !q.empty() && q.front().at <= *net_.now) {
        auto& f = q.front();
        const size_t m = std::min(iov[i].iov_len - at, f.bytes.size() - off);
        memcpy(static_cast<uint8_t*>(iov[i].iov_base) + at, f.bytes.data() + off, m);
        at += m;
        off += m;
        if (off == f.bytes.size()) {
          q.pop_front();
          off = 0;
        }
      }
      got += at;
      if (at < iov[i].iov_len) break;
    }
    if (!got) {
      errno = EAGAIN;
      return -1;
    }
    return static_cast<ssize_t>(got);
  }

 private:
  FakeNet& net_;
  int dir_;
  std::optional<FakeNet::Frame> held_;  // a frame swapped behind the next
};

class Ends : public ::testing::TestWithParam<Transport>,
             public transport::RequesterEnv,
             public transport::ResponderEnv {
 protected:
  void SetUp() override {
    set_log_level(getenv("VRDMA_TEST_LOG") ? LogLevel::kDebug : LogLevel::kError);
    net.now = &now;
    ca = std::make_unique<FakeClient>(1, ip("10.1.0.5"), "t");
    cb = std::make_unique<FakeClient>(2, ip("10.2.0.5"), "t");
    ma = &ca->reg_mr(1 << 20, kAllAccess);
    mb = &cb->reg_mr(1 << 20, kAllAccess);
    make_link();
  }

  void make_link() {
    int sv[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
    if (GetParam() == Transport::kFake) {
      la = std::make_unique<FakeLink>(1, UniqueFd(sv[0]), true, net, 0);
      lb = std::make_unique<FakeLink>(2, UniqueFd(sv[1]), false, net, 1);
    } else {
      la = std::make_unique<Link>(1, UniqueFd(sv[0]), true);
      lb = std::make_unique<Link>(2, UniqueFd(sv[1]), false);
      la->connected();
      if (GetParam() == Transport::kJoined) Link::join(*la, *lb);
    }
    la->last_rx_ns = lb->last_rx_ns = now;
  }

  // QPs a (A) and b (B), RC unless told, both RTS, b's RTR naming a, connected.
  void make_qps(uint32_t type = IBV_QPT_RC, FakeQp::Options oa = {}, FakeQp::Options ob = {}) {
    qa = make_fake_qp(*ca, 0x100, type, oa);
    qb = make_fake_qp(*cb, 0x200, type, ob);
    qa->peer_ipv4 = cb->ipv4;
    qa->peer_qpn = qb->qpn;
    qb->peer_ipv4 = ca->ipv4;
    qb->peer_qpn = qa->qpn;
    for (FakeQp* q : {qa.get(), qb.get()}) {
      q->set_state(IBV_QPS_RTR);
      q->set_state(IBV_QPS_RTS);
    }
    pa = std::make_shared<shm::Peer>(*ca, ca->id);
    ASSERT_EQ(pa->attach_arena(), 0);
    pa->defer_retire();
    pb = std::make_shared<shm::Peer>(*cb, cb->id);
    ASSERT_EQ(pb->attach_arena(), 0);
    pb->defer_retire();
    sq.qpn = qa->qpn;
    sq.owner = ca->id;
    sq.type = type;
    sq.ipv4 = ca->ipv4;
    sq.dst_qpn = qb->qpn;
    sq.link_id = la->id();
    sq.peer = pa;
    ASSERT_EQ(transport::Requester::attach(sq, qa->shared_off), 0);
    ASSERT_NE(resp.connect(*lb, 1, ca->ipv4, qa->qpn, qb->qpn, type, cb->id), nullptr);
  }

  // One pass of both ends, the clock `dt` ahead. Whether the link still works.
  bool pass(int64_t dt = 1000) {
    now += dt;
    bool ok = true;
    la->rx_ready = lb->rx_ready = true;
    req.pump(sq, now, 256);
    if (!sq.failed && sq.done != sq.sent && transport::Requester::check_silence(sq, *la, now)) {
      req.abort(sq, IBV_WC_RETRY_EXC_ERR, true);
      ok = false;
    }
    ok &= la->flush(now);
    const char* why = nullptr;
    const uint64_t b_before = lb->bytes_in;
    if (!lb->receive(resp_handler, 64 * 1024, &why)) {
      why_b = why ? why : "";
      ok = false;
    } else if (lb->bytes_in != b_before) {
      lb->last_rx_ns = now;
    }
    resp.retry_held(now, [this](uint32_t) { return lb.get(); });
    ok &= lb->flush(now);
    uint64_t before = la->bytes_in;
    if (!la->receive(req_handler, 64 * 1024, &why)) {
      why_a = why ? why : "";
      ok = false;
    } else if (la->bytes_in != before) {
      la->last_rx_ns = now;
    }
    return ok;
  }
  std::vector<ibv_wc> completions(size_t n, int passes = 20000, int64_t dt = 1000) {
    std::vector<ibv_wc> out;
    for (int i = 0; i < passes && out.size() < n; ++i) {
      if (!pass(dt) && out.size() >= n) break;
      for (auto& wc : qa->poll_send()) out.push_back(wc);
    }
    return out;
  }
  std::vector<RecvCompletion> receives(size_t n, int passes = 20000) {
    std::vector<RecvCompletion> out;
    for (int i = 0; i < passes && out.size() < n; ++i) {
      pass();
      for (auto& c : qb->poll_recv()) out.push_back(c);
    }
    return out;
  }
  void post_rdma(uint64_t wr_id, ibv_wr_opcode op, ibv_sge sge, uint64_t raddr, uint32_t rkey) {
    ibv_send_wr wr = make_wr(wr_id, op, &sge, 1);
    if (op == IBV_WR_ATOMIC_CMP_AND_SWP || op == IBV_WR_ATOMIC_FETCH_AND_ADD) {
      wr.wr.atomic.remote_addr = raddr;
      wr.wr.atomic.rkey = rkey;
    } else {
      wr.wr.rdma.remote_addr = raddr;
      wr.wr.rdma.rkey = rkey;
    }
    qa->post_send(wr);
  }

  // RequesterEnv.
  transport::SendQp* find(uint32_t qpn) override { return qpn == sq.qpn ? &sq : nullptr; }
  Link* link_for(transport::SendQp&, const transport::Wqe&) override { return la.get(); }
  void failed(transport::SendQp& q, proto::FatalReason why) override {
    fatals.push_back({q.owner, q.qpn, why});
  }
  // ResponderEnv.
  bool names_peer(uint32_t qpn, uint32_t ipv4, uint32_t peer_qpn) override {
    return qpn == qb->qpn && qb->peer_ipv4 == ipv4 && qb->peer_qpn == peer_qpn;
  }
  bool target(uint32_t qpn, shm::PeerQp& out) override {
    return qpn == qb->qpn && shm::attach_peer_qp(pb, qb->obj_fd_id, 0, out) == 0;
  }

  // What each end's link hands its user.
  struct ReqHandler : transport::LinkHandler {
    explicit ReqHandler(Ends* e) : t(e) {}
    Ends* t;
    bool on_frame(Link& l, wire::Type type, const uint8_t* body, uint32_t payload,
                  PayloadDest& dest, const char** why) override {
      if (type == wire::Type::kResponse) {
        t->req.on_response(l, wire::read<wire::Response>(body), payload, dest, t->now);
        return true;
      }
      if (type == wire::Type::kPong) return true;
      *why = "unexpected";
      return false;
    }
    void on_payload_data(Link&, const uint8_t*, size_t) override {}
    void on_payload(Link& l) override { t->req.on_payload(l, t->now); }
  } req_handler{this};
  struct RespHandler : transport::LinkHandler {
    explicit RespHandler(Ends* e) : t(e) {}
    Ends* t;
    bool on_frame(Link& l, wire::Type type, const uint8_t* body, uint32_t payload,
                  PayloadDest& dest, const char** why) override {
      if (type == wire::Type::kRequest) {
        t->resp.on_request(l, wire::read<wire::Request>(body), payload, dest, t->now);
        return true;
      }
      if (type == wire::Type::kPing) {
        l.send(wire::Type::kPong, body, sizeof(wire::Ping));
        return true;
      }
      *why = "unexpected";
      return false;
    }
    void on_payload_data(Link& l, const uint8_t* d, size_t n) override {
      t->resp.on_payload_data(l, d, n);
    }
    void on_payload(Link& l) override { t->resp.on_payload(l); }
  } resp_handler{this};

  int64_t now = 1'000'000'000;
  FakeNet net;
  std::unique_ptr<FakeClient> ca, cb;
  FakeMr *ma = nullptr, *mb = nullptr;
  std::unique_ptr<FakeQp> qa, qb;
  std::shared_ptr<shm::Peer> pa, pb;
  std::unique_ptr<Link> la, lb;
  transport::SendQp sq;
  transport::Requester req{*this};
  transport::Responder resp{*this, transport::ResponderLimits{}};
  std::vector<Fatal> fatals;
  std::string why_a, why_b;
};

TEST_P(Ends, EveryOpcodeWithDataChecked) {
  make_qps();
  auto data = random_bytes(8192, 7);
  memcpy(ma->ptr, data.data(), data.size());
  // SEND and SEND_WITH_IMM into receives of b.
  qb->post_recv(1, {mb->sge(0, 4096)});
  qb->post_recv(2, {mb->sge(4096, 4096)});
  ibv_sge s1 = ma->sge(0, 4096), s2 = ma->sge(4096, 4096);
  qa->post_send(make_wr(10, IBV_WR_SEND, &s1, 1));
  ibv_send_wr imm = make_wr(11, IBV_WR_SEND_WITH_IMM, &s2, 1);
  imm.imm_data = htonl(0xabcd);
  qa->post_send(imm);
  auto wcs = completions(2);
  ASSERT_EQ(wcs.size(), 2u);
  EXPECT_EQ(wcs[0].wr_id, 10u);
  EXPECT_EQ(wcs[1].wr_id, 11u);
  for (auto& wc : wcs) EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  auto rcs = receives(2);
  ASSERT_EQ(rcs.size(), 2u);
  EXPECT_EQ(rcs[1].imm_data, htonl(0xabcd));
  EXPECT_EQ(memcmp(mb->ptr, data.data(), 8192), 0);
  // WRITE and WRITE_WITH_IMM.
  auto w = random_bytes(65536, 9);
  memcpy(ma->ptr + 65536, w.data(), w.size());
  post_rdma(20, IBV_WR_RDMA_WRITE, ma->sge(65536, 65536), mb->addr() + 131072, mb->key);
  qb->post_recv(3, {mb->sge(0, 16)});
  ibv_sge ws = ma->sge(65536, 16);
  ibv_send_wr wi = make_wr(21, IBV_WR_RDMA_WRITE_WITH_IMM, &ws, 1);
  wi.wr.rdma.remote_addr = mb->addr() + 200000;
  wi.wr.rdma.rkey = mb->key;
  wi.imm_data = 5;
  qa->post_send(wi);
  wcs = completions(2);
  ASSERT_EQ(wcs.size(), 2u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wcs[1].status, IBV_WC_SUCCESS);
  EXPECT_EQ(memcmp(mb->ptr + 131072, w.data(), w.size()), 0);
  rcs = receives(1);
  ASSERT_EQ(rcs.size(), 1u);
  EXPECT_EQ(rcs[0].imm_data, 5u);
  // READ of what b holds.
  auto r = random_bytes(40000, 11);
  memcpy(mb->ptr + 300000, r.data(), r.size());
  post_rdma(30, IBV_WR_RDMA_READ, ma->sge(300000, 40000), mb->addr() + 300000, mb->key);
  wcs = completions(1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wcs[0].byte_len, 40000u);
  EXPECT_EQ(memcmp(ma->ptr + 300000, r.data(), r.size()), 0);
  // Both atomics on one word of b.
  uint64_t v = 41;
  memcpy(mb->ptr + 500000, &v, 8);
  ibv_sge as = ma->sge(600000, 8);
  ibv_send_wr faa = make_wr(40, IBV_WR_ATOMIC_FETCH_AND_ADD, &as, 1);
  faa.wr.atomic.remote_addr = mb->addr() + 500000;
  faa.wr.atomic.rkey = mb->key;
  faa.wr.atomic.compare_add = 1;
  qa->post_send(faa);
  ibv_send_wr cas = make_wr(41, IBV_WR_ATOMIC_CMP_AND_SWP, &as, 1);
  cas.wr.atomic.remote_addr = mb->addr() + 500000;
  cas.wr.atomic.rkey = mb->key;
  cas.wr.atomic.compare_add = 42;
  cas.wr.atomic.swap = 1000;
  qa->post_send(cas);
  wcs = completions(2);
  ASSERT_EQ(wcs.size(), 2u);
  EXPECT_EQ(wcs[1].status, IBV_WC_SUCCESS);
  uint64_t old = 0, now_v = 0;
  memcpy(&old, ma->ptr + 600000, 8);
  memcpy(&now_v, mb->ptr + 500000, 8);
  EXPECT_EQ(old, 42u);  // what CAS found (after FAA's +1)
  EXPECT_EQ(now_v, 1000u);
  EXPECT_TRUE(fatals.empty());
}

TEST_P(Ends, ManyRequestsCompleteInOrder) {
  make_qps();
  constexpr int kN = 512, kBatch = 32;  // the send queue holds 64
  std::vector<ibv_wc> wcs;
  for (int i = 0; i < kN; ++i) {
    uint32_t v = static_cast<uint32_t>(i);
    memcpy(ma->ptr + i * 4, &v, 4);
    post_rdma(i, IBV_WR_RDMA_WRITE, ma->sge(i * 4, 4), mb->addr() + i * 4, mb->key);
    if (i % kBatch == kBatch - 1)
      for (auto& wc : completions(kBatch)) wcs.push_back(wc);
  }
  ASSERT_EQ(wcs.size(), static_cast<size_t>(kN));
  for (int i = 0; i < kN; ++i) {
    EXPECT_EQ(wcs[i].wr_id, static_cast<uint64_t>(i));
    EXPECT_EQ(wcs[i].status, IBV_WC_SUCCESS);
  }
  EXPECT_EQ(memcmp(ma->ptr, mb->ptr, kN * 4), 0);
}

TEST_P(Ends, NoReceiveIsHeldUntilOnePosted) {
  FakeQp::Options ob;
  ob.min_rnr_timer = 1;
  make_qps(IBV_QPT_RC, {}, ob);
  ibv_sge s = ma->sge(0, 64);
  qa->post_send(make_wr(1, IBV_WR_SEND, &s, 1));
  auto wcs = completions(1, 200);
  EXPECT_TRUE(wcs.empty()) << "no receive: held (rnr_retry 7 waits forever)";
  EXPECT_EQ(resp.held_count(), 1u);
  qb->post_recv(9, {mb->sge(0, 64)});
  wcs = completions(1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(resp.held_count(), 0u);
}

TEST_P(Ends, RnrRetriesRunOut) {
  FakeQp::Options oa;
  oa.rnr_retry = 2;
  make_qps(IBV_QPT_RC, oa);
  ibv_sge s = ma->sge(0, 64);
  qa->post_send(make_wr(1, IBV_WR_SEND, &s, 1));
  qa->post_send(make_wr(2, IBV_WR_SEND, &s, 1));
  auto wcs = completions(2, 20000, 100'000);
  ASSERT_EQ(wcs.size(), 2u);
  EXPECT_EQ(wcs[0].status, IBV_WC_RNR_RETRY_EXC_ERR);
  EXPECT_EQ(wcs[1].status, IBV_WC_WR_FLUSH_ERR);
}

TEST_P(Ends, NotReadyUntilTheDestinationAgrees) {
  make_qps();
  qb->peer_qpn = 0x999;  // its RTR names another QP: not ready for a
  post_rdma(1, IBV_WR_RDMA_WRITE, ma->sge(0, 8), mb->addr(), mb->key);
  EXPECT_TRUE(completions(1, 100).empty());
  qb->peer_qpn = qa->qpn;  // now it agrees
  auto wcs = completions(1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
}

TEST_P(Ends, NeverAgreeingEndsInRetryExceeded) {
  FakeQp::Options oa;
  oa.timeout = 10;  // 4 ms x (retry_cnt 7 + 1)
  make_qps(IBV_QPT_RC, oa);
  qb->peer_qpn = 0x999;
  post_rdma(1, IBV_WR_RDMA_WRITE, ma->sge(0, 8), mb->addr(), mb->key);
  auto wcs = completions(1, 20000, 100'000);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_RETRY_EXC_ERR);
}

TEST_P(Ends, BadKeyIsRemoteAccessErrorAndFlushesTheRest) {
  make_qps();
  post_rdma(1, IBV_WR_RDMA_WRITE, ma->sge(0, 8), mb->addr(), mb->key ^ 0x5a5a);
  post_rdma(2, IBV_WR_RDMA_WRITE, ma->sge(0, 8), mb->addr(), mb->key);
  auto wcs = completions(2);
  ASSERT_EQ(wcs.size(), 2u);
  EXPECT_EQ(wcs[0].status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(wcs[1].status, IBV_WC_WR_FLUSH_ERR);
  ASSERT_EQ(fatals.size(), 1u);
  EXPECT_EQ(fatals[0].qpn, qa->qpn);
  EXPECT_EQ(qa->state(), IBV_QPS_ERR);
}

TEST_P(Ends, OutOfBoundsWriteLeavesMemoryAlone) {
  make_qps();
  std::vector<uint8_t> before(mb->ptr, mb->ptr + 64);
  post_rdma(1, IBV_WR_RDMA_WRITE, ma->sge(0, 64), mb->addr() + mb->len - 32, mb->key);
  auto wcs = completions(1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(memcmp(before.data(), mb->ptr, 64), 0);
}

// What answers a READ brings all it asked for, what answers an atomic 8 bytes: b's end answering
// otherwise (a length it made up, success without the data, data after an atomic) fails a's QP
// with BAD_RESP_ERR, and no completion reports the made-up length.
TEST_P(Ends, ResponseThatDoesNotFitItsRequestIsABadResponse) {
  struct Case {
    ibv_wr_opcode op;
    uint32_t length;  // a's request
    uint64_t byte_len;
    uint32_t payload;  // what b's end answers
  };
  const Case cases[] = {
      {IBV_WR_RDMA_READ, 64, 40000, 0},           // more than asked for, no data
      {IBV_WR_RDMA_READ, 64, 64, 0},              // success without the data
      {IBV_WR_RDMA_READ, 64, 32, 32},             // less than asked for
      {IBV_WR_ATOMIC_FETCH_AND_ADD, 8, 4000, 0},  // an atomic's 8 bytes are not 4000
      {IBV_WR_ATOMIC_CMP_AND_SWP, 8, 8, 8},       // an atomic brings no data
  };
  std::vector<uint8_t> data(64, 0xab);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.op);
    qa.reset();
    qb.reset();
    sq = transport::SendQp{};
    make_qps();
    std::vector<uint8_t> before(ma->ptr, ma->ptr + 64);
    post_rdma(1, c.op, ma->sge(0, c.length), mb->addr(), mb->key);
    post_rdma(2, c.op, ma->sge(0, c.length), mb->addr(), mb->key);
    req.pump(sq, now, 256);
    ASSERT_TRUE(la->flush(now));
    // b's end answers the first request itself.
    wire::Response rep{qa->qpn, IBV_WC_SUCCESS, 0, c.byte_len, 0};
    shm::Seg seg{data.data(), c.payload};
    ASSERT_TRUE(lb->send(wire::Type::kResponse, &rep, sizeof(rep), &seg, 1, c.payload));
    ASSERT_TRUE(lb->flush(now));
    la->rx_ready = true;
    const char* why = nullptr;
    ASSERT_TRUE(la->receive(req_handler, 64 * 1024, &why)) << why;
    auto wcs = qa->poll_send();
    ASSERT_EQ(wcs.size(), 2u);
    EXPECT_EQ(wcs[0].wr_id, 1u);
    EXPECT_EQ(wcs[0].status, IBV_WC_BAD_RESP_ERR);
    EXPECT_EQ(wcs[0].byte_len, 0u);
    EXPECT_EQ(wcs[1].status, IBV_WC_WR_FLUSH_ERR);
    EXPECT_EQ(qa->state(), IBV_QPS_ERR);
    EXPECT_EQ(memcmp(before.data(), ma->ptr, 64), 0) << "nothing placed";
  }
}

TEST_P(Ends, CutLinkFailsOutstandingWorkWithinTheTimeout) {
  FakeQp::Options oa;
  oa.timeout = 12;  // 16.8 ms x 8 = 134 ms, raised to the 150 ms floor
  make_qps(IBV_QPT_RC, oa);
  post_rdma(1, IBV_WR_RDMA_WRITE, ma->sge(0, 8), mb->addr(), mb->key);
  ASSERT_EQ(completions(1).size(), 1u);
  // The other end stops answering (fake: the connection is cut; the others: b's end stalls).
  if (GetParam() == Transport::kFake)
    net.cut = true;
  else
    lb.reset();
  post_rdma(2, IBV_WR_RDMA_WRITE, ma->sge(0, 8), mb->addr(), mb->key);
  const int64_t start = now;
  std::vector<ibv_wc> wcs;
  for (int i = 0; i < 2000 && wcs.empty(); ++i) {
    now += 1'000'000;
    req.pump(sq, now, 256);
    const char* why = nullptr;
    la->rx_ready = true;
    if (!la->flush(now) || !la->receive(req_handler, 65536, &why) ||
        transport::Requester::check_silence(sq, *la, now))
      req.abort(sq, IBV_WC_RETRY_EXC_ERR, true);
    wcs = qa->poll_send();
  }
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_RETRY_EXC_ERR);
  EXPECT_LE(now - start, 400'000'000) << "within the QP's timeout and retries, give or take";
}

// What only the fake transport can do: lose, reorder and delay frames.
class FakeEnds : public Ends {};

TEST_P(FakeEnds, LostRequestEndsTheConnectionInError) {
  make_qps();
  net.drop_next[0] = 1;
  post_rdma(1, IBV_WR_RDMA_WRITE, ma->sge(0, 8), mb->addr(), mb->key);
  post_rdma(2, IBV_WR_RDMA_WRITE, ma->sge(8, 8), mb->addr() + 8, mb->key);
  auto wcs = completions(2, 2000);
  ASSERT_EQ(wcs.size(), 2u) << "no hang: the gap is seen";
  EXPECT_EQ(wcs[0].status, IBV_WC_RETRY_EXC_ERR);
  EXPECT_EQ(wcs[1].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(resp.find(lb->id(), qa->qpn), nullptr) << "the responder ended the connection";
}

TEST_P(FakeEnds, ReorderedRequestsAreRefused) {
  make_qps();
  uint64_t pattern = 0x1122334455667788ull;
  memcpy(ma->ptr, &pattern, 8);
  net.swap_next[0] = true;
  post_rdma(1, IBV_WR_RDMA_WRITE, ma->sge(0, 8), mb->addr(), mb->key);
  post_rdma(2, IBV_WR_RDMA_WRITE, ma->sge(0, 8), mb->addr() + 8, mb->key);
  auto wcs = completions(2, 2000);
  ASSERT_EQ(wcs.size(), 2u);
  EXPECT_NE(wcs[0].status, IBV_WC_SUCCESS);
  EXPECT_NE(wcs[1].status, IBV_WC_SUCCESS);
  uint64_t second = 0;
  memcpy(&second, mb->ptr + 8, 8);
  EXPECT_NE(second, pattern) << "a request out of its order is not executed";
}

TEST_P(FakeEnds, DelayedFramesStillCompleteInOrder) {
  make_qps();
  net.delay_ns = 20'000'000;  // 20 ms each way: well within timeout 14's 537 ms
  for (int i = 0; i < 50; ++i)
    post_rdma(i, IBV_WR_RDMA_WRITE, ma->sge(i * 8, 8), mb->addr() + i * 8, mb->key);
  auto wcs = completions(50, 20000, 100'000);
  ASSERT_EQ(wcs.size(), 50u);
  for (int i = 0; i < 50; ++i) {
    EXPECT_EQ(wcs[i].wr_id, static_cast<uint64_t>(i));
    EXPECT_EQ(wcs[i].status, IBV_WC_SUCCESS);
  }
}

TEST_P(FakeEnds, LostResponseIsSeenAtTheNextOne) {
  make_qps();
  net.drop_next[1] = 1;
  post_rdma(1, IBV_WR_RDMA_WRITE, ma->sge(0, 8), mb->addr(), mb->key);
  post_rdma(2, IBV_WR_RDMA_WRITE, ma->sge(8, 8), mb->addr() + 8, mb->key);
  auto wcs = completions(2, 2000);
  ASSERT_EQ(wcs.size(), 2u);
  EXPECT_EQ(wcs[0].status, IBV_WC_RETRY_EXC_ERR);
  EXPECT_EQ(wcs[1].status, IBV_WC_WR_FLUSH_ERR);
}

INSTANTIATE_TEST_SUITE_P(Transports, Ends,
                         ::testing::Values(Transport::kSocket, Transport::kJoined,
                                           Transport::kFake),
                         transport_name);
INSTANTIATE_TEST_SUITE_P(Transports, FakeEnds, ::testing::Values(Transport::kFake),
                         transport_name);

}  // namespace
}  // namespace vrdma::daemon::testing
