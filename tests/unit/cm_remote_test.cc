// rdma_cm between hosts, at the service (CmService) with a stand-in for the rest of vrdmad and
// for the directory: what another host may and may not do to this host's connections.
#include <arpa/inet.h>
#include <errno.h>
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <set>
#include <vector>

#include "common/clock.h"
#include "daemon/cm/cm_service.h"
#include "daemon/directory/directory.h"

namespace vrdma::daemon {
namespace {

using proto::Op;
constexpr uint32_t kRc = static_cast<uint32_t>(proto::QpType::kRc);

uint32_t ip(const char* text) {
  uint32_t v = 0;
  EXPECT_EQ(inet_pton(AF_INET, text, &v), 1);
  return v;
}

// Hosts 0 (this one), 1 and 2; host h owns 10.77.h.0/24 and routes at 10.76.0.(h+1).
class FakeDirectory : public Directory {
 public:
  FakeDirectory() {
    for (uint32_t h = 0; h < 3; ++h) add(h);
  }
  void add(uint32_t h) {
    HostEntry e;
    e.host_id = h;
    e.router = "10.76.0." + std::to_string(h + 1) + ":7471";
    Ipv4Cidr c;
    EXPECT_TRUE(parse_cidr("10.77." + std::to_string(h) + ".0/24", &c, nullptr));
    e.cidrs = {c};
    hosts[h] = e;
  }
  int start(const HostEntry&) override { return 0; }
  void stop() override {}
  void publish_container(uint32_t, const std::string&) override {}
  void withdraw_container(uint32_t) override {}
  void publish_listener(uint32_t, uint16_t) override {}
  void withdraw_listener(uint32_t, uint16_t) override {}
  Lookup host_of(uint32_t ipv4, HostEntry* out) override {
    for (auto& [id, h] : hosts)
      for (auto& c : h.cidrs)
        if (c.contains(ntohl(ipv4))) {
          *out = h;
          return Lookup::kFound;
        }
    return Lookup::kNotFound;
  }
  Lookup host_by_id(uint32_t id, HostEntry* out) override {
    auto it = hosts.find(id);
    if (it == hosts.end()) return Lookup::kNotFound;
    *out = it->second;
    return Lookup::kFound;
  }
  Lookup host_by_router(uint32_t, HostEntry*) override { return Lookup::kNotFound; }
  std::string describe() const override { return "fake"; }
  bool available() const override { return true; }
  size_t hosts_known() const override { return hosts.size(); }
  std::map<uint32_t, HostEntry> hosts;
};

struct Sent {
  uint32_t host;
  wire::Cm m;
  Op op() const { return static_cast<Op>(m.op); }
  uint32_t sender() const {
    uint32_t v;
    std::memcpy(&v, m.body, 4);
    return v;
  }
  uint32_t receiver() const {
    uint32_t v;
    std::memcpy(&v, m.body + 4, 4);
    return v;
  }
};
struct Event {
  uint32_t client;
  Op op;
  std::vector<uint8_t> payload;
  template <typename T>
  T as() const {
    T v{};
    std::memcpy(&v, payload.data(), std::min(sizeof(T), payload.size()));
    return v;
  }
};

class FakePort : public CmPort {
 public:
  bool cm_reply(const CmCaller&, int status, const void* payload, size_t len) override {
    last_status = status;
    reply.assign(static_cast<const uint8_t*>(payload), static_cast<const uint8_t*>(payload) + len);
    return true;
  }
  void cm_event(uint32_t client, Op op, const void* payload, size_t len) override {
    auto* p = static_cast<const uint8_t*>(payload);
    events.push_back({client, op, std::vector<uint8_t>(p, p + len)});
  }
  bool cm_client_tenant(uint32_t client, std::string* tenant) override {
    *tenant = "t";
    return client != 0;
  }
  std::string cm_tenant_of(uint32_t) override { return "t"; }
  bool cm_qp_of(uint32_t, uint32_t, uint32_t* type) override {
    *type = kRc;
    return true;
  }
  int cm_remote_host(uint32_t ipv4, uint32_t* host) override {
    HostEntry h;
    if (dir.host_of(ipv4, &h) != Lookup::kFound) return EHOSTUNREACH;
    *host = h.host_id;
    return 0;
  }
  int cm_send_to_host(uint32_t host, const wire::Cm& m) override {
    sent.push_back({host, m});
    return 0;
  }
  FakeDirectory dir;
  int last_status = -1;
  std::vector<uint8_t> reply;
  std::vector<Event> events;
  std::vector<Sent> sent;
};

// What the other host's daemon sends (cm_remote.cc's layout: both sides' ids, then the body).
wire::Cm message(Op op, uint32_t sender, uint32_t receiver, const void* body, size_t len) {
  wire::Cm m{};
  m.op = static_cast<uint16_t>(op);
  std::memcpy(m.body, &sender, 4);
  std::memcpy(m.body + 4, &receiver, 4);
  std::memcpy(m.body + 8, body, len);
  m.len = static_cast<uint32_t>(8 + len);
  return m;
}

wire::Cm remote_connect(uint32_t sender, uint32_t src_ipv4, uint32_t dst_ipv4, uint16_t port) {
  struct {
    proto::CmConnectReq req;
    uint32_t src_ipv4;
  } rc{};
  rc.req.dst_ipv4 = dst_ipv4;
  rc.req.dst_port = port;
  rc.req.local_qpn = 0x1234;
  rc.req.qp_type = kRc;
  rc.src_ipv4 = src_ipv4;
  return message(Op::kCmConnect, sender, 0, &rc, sizeof(rc));
}

class CmRemote : public ::testing::Test {
 protected:
  CmRemote() : cm(port, port.dir) {}
  CmCaller caller(uint32_t client, const char* addr, Op op) {
    CmCaller c;
    c.client = client;
    c.ipv4 = ip(addr);
    c.tenant = "t";
    c.op = op;
    return c;
  }
  // Client 7 (10.77.0.10) connects to 10.77.1.10:5000 on host 1; the connection's id here.
  uint32_t connect_to_host1() {
    proto::CmConnectReq r{};
    r.dst_ipv4 = ip("10.77.1.10");
    r.dst_port = 5000;
    r.local_qpn = 0x100;
    r.qp_type = kRc;
    r.cookie = 99;
    cm.on_request(caller(7, "10.77.0.10", Op::kCmConnect), r);
    EXPECT_EQ(port.last_status, 0);
    proto::CmConnectRep rep{};
    std::memcpy(&rep, port.reply.data(), sizeof(rep));
    return rep.conn_id;
  }
  // Client 8 listens on 10.77.0.20:6000.
  void listen() {
    proto::CmListenReq l{ip("10.77.0.20"), 6000, 0, 5};
    cm.on_request(caller(8, "10.77.0.20", Op::kCmListen), l);
    ASSERT_EQ(port.last_status, 0);
  }
  size_t events_of(Op op) const {
    size_t n = 0;
    for (auto& e : port.events) n += e.op == op;
    return n;
  }

  FakePort port;
  CmService cm;
};

TEST(CmTableIds, ComeFromTheRandomSourceNeverZeroNeverTwice) {
  std::vector<uint32_t> values = {0, 42, 42, 7, 0, 9};
  size_t i = 0;
  CmTable t([&] { return values[i++ % values.size()]; });
  EXPECT_EQ(t.add(1, 0, 1, 2, kRc)->id, 42u);
  EXPECT_EQ(t.add(1, 0, 1, 2, kRc)->id, 7u);  // 42 is taken
  EXPECT_EQ(t.add(1, 0, 1, 2, kRc)->id, 9u);  // 0 is never an id
}

TEST(CmTableIds, AreNotSequential) {
  CmTable t;
  std::set<uint32_t> ids;
  uint32_t prev = 0;
  int consecutive = 0;
  for (int i = 0; i < 200; ++i) {
    uint32_t id = t.add(1, 0, 1, 2, kRc)->id;
    EXPECT_NE(id, 0u);
    ids.insert(id);
    consecutive += id == prev + 1;
    prev = id;
  }
  EXPECT_EQ(ids.size(), 200u);
  EXPECT_LT(consecutive, 3);
}

TEST_F(CmRemote, ReplyAndRejectOnlyFromTheHostAsked) {
  uint32_t id = connect_to_host1();
  ASSERT_EQ(port.sent.size(), 1u);
  EXPECT_EQ(port.sent[0].host, 1u);
  proto::CmEvent ev{};
  ev.remote_qpn = 0x200;
  // Host 2 forges host 1's answers for our connection: nothing happens.
  cm.on_remote(2, message(Op::kCmReply, 555, id, &ev, sizeof(ev)));
  cm.on_remote(2, message(Op::kCmRejected, 555, id, &ev, sizeof(ev)));
  cm.on_remote(2, message(Op::kCmDisconnect, 555, id, &ev, sizeof(ev)));
  EXPECT_TRUE(port.events.empty());
  ASSERT_NE(cm.table().find(id), nullptr);
  // Host 1 answers: the connector hears it.
  cm.on_remote(1, message(Op::kCmReply, 555, id, &ev, sizeof(ev)));
  ASSERT_EQ(port.events.size(), 1u);
  EXPECT_EQ(port.events[0].op, Op::kCmReply);
  EXPECT_EQ(port.events[0].client, 7u);
  // A second reply (or a late reject) for an accepted connection is ignored.
  cm.on_remote(1, message(Op::kCmRejected, 555, id, &ev, sizeof(ev)));
  EXPECT_EQ(port.events.size(), 1u);
  // A disconnect from host 1 about another connection of its own is ignored; about this one,
  // heard.
  proto::CmConnReq dc{0, 1};
  cm.on_remote(1, message(Op::kCmDisconnect, 556, id, &dc, sizeof(dc)));
  EXPECT_EQ(port.events.size(), 1u);
  cm.on_remote(1, message(Op::kCmDisconnect, 555, id, &dc, sizeof(dc)));
  ASSERT_EQ(port.events.size(), 2u);
  EXPECT_EQ(port.events[1].op, Op::kCmDisconnected);
  EXPECT_EQ(cm.table().find(id), nullptr);
}

TEST_F(CmRemote, RequestsOnlyForAddressesTheSendingHostOwns) {
  listen();
  // Host 2 claims a connector at host 1's address: refused, the listener hears nothing.
  cm.on_remote(2, remote_connect(11, ip("10.77.1.10"), ip("10.77.0.20"), 6000));
  EXPECT_EQ(events_of(Op::kCmRequest), 0u);
  ASSERT_EQ(port.sent.size(), 1u);
  EXPECT_EQ(port.sent[0].host, 2u);
  EXPECT_EQ(port.sent[0].op(), Op::kCmRejected);
  // Its own address: the listener hears the request.
  cm.on_remote(2, remote_connect(12, ip("10.77.2.10"), ip("10.77.0.20"), 6000));
  EXPECT_EQ(events_of(Op::kCmRequest), 1u);
  // The same request again (a replay) makes no second connection.
  cm.on_remote(2, remote_connect(12, ip("10.77.2.10"), ip("10.77.0.20"), 6000));
  EXPECT_EQ(events_of(Op::kCmRequest), 1u);
  EXPECT_EQ(cm.table().connection_count(), 1u);
}

TEST_F(CmRemote, OneHostsFloodLeavesTheOthersTheirQuota) {
  listen();
  const size_t quota = CmTable::kMaxConnectionsFromHost;
  for (uint32_t i = 1; i <= quota + 50; ++i)
    cm.on_remote(2, remote_connect(i, ip("10.77.2.10"), ip("10.77.0.20"), 6000));
  EXPECT_EQ(events_of(Op::kCmRequest), quota);
  EXPECT_EQ(cm.table().connections_with(2).size(), quota);
  size_t refused = 0;
  for (auto& s : port.sent) refused += s.op() == Op::kCmRejected;
  EXPECT_EQ(refused, 50u);
  // Host 1 still gets through.
  cm.on_remote(1, remote_connect(1, ip("10.77.1.10"), ip("10.77.0.20"), 6000));
  EXPECT_EQ(events_of(Op::kCmRequest), quota + 1);
  EXPECT_EQ(cm.table().connections_with(1).size(), 1u);
}

TEST_F(CmRemote, PendingRequestsTimeOut) {
  cm.set_remote_timeout(1'000'000'000);
  uint32_t id = connect_to_host1();
  listen();
  cm.on_remote(1, remote_connect(77, ip("10.77.1.10"), ip("10.77.0.20"), 6000));
  ASSERT_EQ(events_of(Op::kCmRequest), 1u);
  port.sent.clear();
  cm.tick(now_ns() + 500'000'000);
  EXPECT_EQ(cm.table().connection_count(), 2u);
  cm.tick(now_ns() + 2'000'000'000);
  EXPECT_EQ(cm.table().connection_count(), 0u);
  // Our connector: rejected (timed out); host 1 told to forget it.
  ASSERT_EQ(events_of(Op::kCmRejected), 1u);
  for (auto& e : port.events)
    if (e.op == Op::kCmRejected) {
      EXPECT_EQ(e.client, 7u);
      EXPECT_EQ(e.as<proto::CmEvent>().conn_id, id);
      EXPECT_EQ(e.as<proto::CmEvent>().reason, ETIMEDOUT);
    }
  // Host 1's connector, that our listener never answered: refused.
  bool forgot = false, refused = false;
  for (auto& s : port.sent) {
    forgot |= s.op() == Op::kCmDisconnect && s.sender() == id;
    refused |= s.op() == Op::kCmRejected && s.receiver() == 77;
  }
  EXPECT_TRUE(forgot);
  EXPECT_TRUE(refused);
}

TEST_F(CmRemote, ADeadHostsConnectionsAreReleased) {
  uint32_t id = connect_to_host1();
  proto::CmEvent ev{};
  cm.on_remote(1, message(Op::kCmReply, 555, id, &ev, sizeof(ev)));
  listen();
  cm.on_remote(2, remote_connect(9, ip("10.77.2.10"), ip("10.77.0.20"), 6000));
  port.events.clear();
  // Host 1's link closed.
  cm.host_gone(1);
  ASSERT_EQ(port.events.size(), 1u);
  EXPECT_EQ(port.events[0].client, 7u);
  EXPECT_EQ(port.events[0].op, Op::kCmDisconnected);
  EXPECT_TRUE(cm.table().connections_with(1).empty());
  EXPECT_EQ(cm.table().connections_with(2).size(), 1u);
  // Host 2 leaves the directory: its connection goes at the next tick.
  port.dir.hosts.erase(2);
  cm.tick(now_ns());
  EXPECT_TRUE(cm.table().connections_with(2).empty());
}

}  // namespace
}  // namespace vrdma::daemon
