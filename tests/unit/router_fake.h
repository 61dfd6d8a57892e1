// Two routers in one process, joined by the fake transport: socket pairs adopted as links
// (Router::adopt_link), a directory of two hosts, and fake clients whose arenas, QPs, CQs,
// send queues, receive queues and registered memory are built from the same pieces the
// library builds them from (engine/arena.h, shm/layout.h and shm/rings.h), in memfds the
// routers map as vrdmad's would. Time is simulated: the tests advance it.
#pragma once

#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "daemon/directory/directory.h"
#include "daemon/router/router.h"
#include "engine/arena.h"
#include "shm/layout.h"
#include "shm/peer.h"
#include "shm/rings.h"

namespace vrdma::daemon::testing {

uint32_t ip(const char* text);  // network order

// The cluster's directory: fixed hosts, the tenants of container addresses.
class FakeDirectory : public Directory {
 public:
  void add_host(uint32_t id, const std::string& router, const std::string& cidr);
  void remove_host(uint32_t id);
  std::map<uint32_t, std::string> tenants;  // container address (network order) ->
  // IPv4 multicast group (network order) -> (host, container address) of its members.
  std::map<uint32_t, std::vector<std::pair<uint32_t, uint32_t>>> groups;

  int start(const HostEntry&) override { return 0; }
  void stop() override {}
  void publish_container(uint32_t, const ContainerInfo&) override {}
  void withdraw_container(uint32_t) override {}
  void publish_listener(uint32_t, uint16_t) override {}
  void withdraw_listener(uint32_t, uint16_t) override {}
  Lookup host_of(uint32_t ipv4_net, HostEntry* out) override;
  Lookup host_by_id(uint32_t host_id, HostEntry* out) override;
  Lookup host_by_router(uint32_t ipv4_net, HostEntry* out) override;
  Lookup tenant_of(uint32_t ipv4_net, std::string* tenant) override;
  void group_members(uint32_t group_net,
                     std::vector<std::pair<uint32_t, uint32_t>>* out) override;
  std::string describe() const override { return "fake"; }
  bool available() const override { return true; }
  size_t hosts_known() const override { return hosts_.size(); }

 private:
  std::vector<HostEntry> hosts_;
};

class FakeClient;

// Registered memory of a fake client: its own memfd, mapped by the owner at `ptr` (the address
// work requests name, as with ibv_reg_mr).
struct FakeMr {
  uint32_t key = 0, slot = 0, access = 0, pd = 0;
  uint32_t fd_id = 0;
  uint8_t* ptr = nullptr;
  uint64_t len = 0, map_len = 0;
  uint64_t addr() const { return reinterpret_cast<uint64_t>(ptr); }
  ibv_sge sge(uint64_t off, uint32_t n) const { return ibv_sge{addr() + off, n, key}; }
};

// A shared receive queue: an SRQ object (ObjectKind::kSrq) with its receive queue.
struct FakeSrq {
  FakeClient* client = nullptr;
  uint32_t fd_id = 0;
  uint8_t* base = nullptr;
  uint64_t size = 0;
  shm::RqView rq;
  uint64_t tail = 0;
  std::map<uint64_t, uint64_t> wr_ids;  // position -> wr_id (the owner's private table)
  void post_recv(uint64_t wr_id, std::vector<ibv_sge> sges);
};

// What a receive completion says once the owner matched it with its receive.
struct RecvCompletion {
  uint64_t wr_id = 0;
  uint32_t byte_len = 0, imm_data = 0, src_qp = 0;
  uint8_t opcode = 0, status = 0, flags = 0;
};

struct FakeQp {
  struct Options {
    uint32_t sq_cap = 64, rq_cap = 64, max_sge = 4, max_inline = 64, cq_cap = 256;
    uint32_t access = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
    uint32_t pd = 1;
    uint32_t qkey = 0x11111111;
    uint32_t timeout = 14, retry_cnt = 7, rnr_retry = 7, min_rnr_timer = 1;
    bool sq_sig_all = false;
    FakeSrq* srq = nullptr;
    // Its address's class as the library keeps it (SL << 8 | GRH traffic class): SL 1 is the
    // latency class.
    uint32_t traffic_class = 0;
  };
  FakeClient* client = nullptr;
  uint32_t qpn = 0, type = 0;
  Options opt;
  uint32_t shared_off = 0;
  shm::QpShared* shared = nullptr;
  shm::SendQueue* sq = nullptr;
  shm::CqView scq;
  uint64_t scq_head = 0;
  uint32_t obj_fd_id = 0;
  uint8_t* obj_base = nullptr;
  uint64_t obj_size = 0;
  shm::QpObject* obj = nullptr;
  shm::RingView ring;
  uint64_t ring_head = 0;
  shm::RqView rq;  // its own (no SRQ)
  uint64_t rq_tail = 0;
  std::map<uint64_t, uint64_t> wr_ids;
  uint32_t peer_ipv4 = 0, peer_qpn = 0;  // what its RTR named
  uint32_t xrcd = 0;  // XRC_RECV QPs and XRC SRQs (type proto::QpType::kXrcSrq): their domain

  LocalQp info() const;
  void set_state(ibv_qp_state st);
  uint32_t state() const { return shared->state.load(); }
  // ibv_post_send of a QP whose destination is on another host, as the library writes it
  // into the send queue (UD: the destination's address for the AH's GID; XRC_SEND: the SRQ
  // number of wr.qp_type.xrc.remote_srqn).
  void post_send(const ibv_send_wr& wr, uint32_t ud_dst_ipv4 = 0);
  void post_recv(uint64_t wr_id, std::vector<ibv_sge> sges);
  std::vector<ibv_wc> poll_send();
  std::vector<RecvCompletion> poll_recv();
  uint64_t outstanding() const { return sq->tail.load() - sq->done.load(); }
};

// A QP of client `c`, built as the library builds one: its shared state, send queue and send
// CQ in the client's arena, its QP object (attributes, receive queue unless opt.srq, the ring
// of receive completions) in a sealed memfd of its own. In INIT.
std::unique_ptr<FakeQp> make_fake_qp(FakeClient& c, uint32_t qpn, uint32_t type,
                                     FakeQp::Options opt = {});

class FakeClient : public shm::FdSource {
 public:
  FakeClient(uint32_t id, uint32_t ipv4, std::string tenant);
  ~FakeClient() override;
  FakeClient(const FakeClient&) = delete;
  FakeClient& operator=(const FakeClient&) = delete;

  const uint32_t id, ipv4;
  const std::string tenant;
  Arena arena;
  int doorbell = -1;  // its router's doorbell eventfd for it (the router owns it)

  FakeMr& reg_mr(uint64_t len, uint32_t access, uint32_t pd = 1);
  void dereg_mr(FakeMr& mr);  // its key dies at once (the key table's generation)
  uint32_t add_fd(int fd);    // takes it; returns its fd id

  // What vrdmad answers the router for this client.
  int fetch_fd(uint32_t owner, uint32_t fd_id, uint32_t via_qpn, int& fd) override;
  int grant_mr(uint32_t owner, uint32_t via_qpn, uint32_t key, uint32_t access,
               shm::MrGrant& out) override;

 private:
  std::map<uint32_t, int> fds_;
  uint32_t next_fd_id_ = 2;
  shm::KeyTable* keys_ = nullptr;
  uint64_t keys_size_ = 0;
  uint32_t next_slot_ = 1;
  std::vector<std::unique_ptr<FakeMr>> mrs_;
  std::vector<std::pair<void*, size_t>> maps_;
};

struct Fatal {
  uint32_t client, qpn;
  proto::FatalReason why;
};

// One host: its router with fake hooks, its clients and QPs.
class FakeHost {
 public:
  FakeHost(uint32_t host_id, FakeDirectory& dir, const RouterLimits& lim,
           uint32_t bulk_links = 1);
  ~FakeHost();
  Router& router() { return *router_; }
  uint32_t id() const { return host_id_; }

  FakeClient& client(const char* ipv4, const std::string& tenant = "t");
  FakeQp& qp(FakeClient& c, uint32_t type, FakeQp::Options opt = {});
  FakeSrq& srq(FakeClient& c, uint32_t cap = 64, uint32_t max_sge = 4);
  // The client is gone (vrdmad marks its arena and QPs dead and tells the router).
  void client_gone(FakeClient& c);
  // UD QP `q` joins IPv4 multicast group `group_net`: this host's members (what vrdmad keeps)
  // and the directory's entry for its container.
  void join(FakeQp& q, uint32_t group_net);
  // Hands the router what its epoll holds (doorbells rung), as its thread does.
  void events(int64_t now);

  std::vector<Fatal> fatals;
  std::vector<uint32_t> hosts_gone;  // what the host_gone hook heard

 private:
  uint32_t host_id_;
  FakeDirectory& dir_;
  int epoll_ = -1;
  std::unique_ptr<Router> router_;
  std::vector<std::unique_ptr<FakeClient>> clients_;
  std::vector<std::unique_ptr<FakeQp>> qps_;
  std::vector<std::unique_ptr<FakeSrq>> srqs_;
  std::map<uint32_t, FakeQp*> by_qpn_;
  std::map<std::pair<std::string, uint32_t>, std::vector<uint32_t>> mcast_;  // (tenant, group)
  uint32_t next_client_ = 1, next_qpn_ = 1;
};

// Host 1 (containers 10.1.0.0/16) and host 2 (10.2.0.0/16), a link each way.
class RouterPair : public ::testing::Test {
 protected:
  RouterPair();
  ~RouterPair() override;
  RouterLimits limits;  // tests may shrink them before start()
  // start() also joins the hosts by a latency lane (wire.h), a pair each way, as the routers'
  // own links would be once a latency-class QP connects.
  bool latency_lane = false;
  // start() also joins the hosts by the other bulk links (RouterConfig::bulk_links), a pair
  // each way per lane, and gives both routers that setting.
  uint32_t bulk_links = 1;
  void start();

  FakeDirectory dir;
  std::unique_ptr<FakeHost> h1, h2;
  int64_t now = 0;

  // Polls both routers (the simulated clock advances `dt` each pass) until pred() holds or
  // `passes` are done. Returns pred()'s last answer.
  bool run_until(const std::function<bool()>& pred, int passes = 20000, int64_t dt = 1000);
  void run(int passes, int64_t dt = 1000);
  // Only host 1's router runs (host 2's is stalled, its link silent).
  void run_only_h1(int64_t duration, int64_t dt = 1'000'000);

  // RC/UC: both QPs' RTR name each other, both go to RTS, both routers connect them.
  // (Router::connect_qp takes its reply deadline from the real clock, 3 s ahead: connect
  // before the simulated clock has run seconds ahead of it.)
  void connect(FakeQp& a, FakeQp& b);
  // `a` reaches `b` (one direction: the router connects a's queue to b).
  int connect_one(FakeQp& a, FakeQp& b);
  // Cuts the main links between the hosts (both directions of both socket pairs).
  void cut_links();
  // The same for the latency lane's links / bulk link k's (1 .. bulk_links - 1).
  void cut_latency_links();
  void cut_bulk_links(uint32_t k);
  // Host `h`'s link to or from the other host in `lane` (none: nullopt).
  static std::optional<Router::LinkInfo> link_of(FakeHost& h, bool outbound, uint32_t lane);
  void kill_h2() { h2.reset(); }

  std::vector<int> link_fds_;  // h1's ends: [0] outbound to h2, [1] inbound from h2
  std::vector<int> latency_fds_;  // the same in the latency lane
  std::vector<int> bulk_fds_;     // the same per other bulk link (k - 1) * 2 + direction
};

inline constexpr uint32_t kAllAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                       IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;

// Client 10.1.0.5 on host 1 with RC QP `a`, client 10.2.0.5 on host 2 with RC QP `b`,
// connected; a 2 MiB MR on each side.
class RoutedRc : public RouterPair {
 protected:
  void SetUp() override;
  // Another pair of QPs between the same clients, connected unless `connect_now` is false.
  std::pair<FakeQp*, FakeQp*> new_pair(FakeQp::Options oa = {}, FakeQp::Options ob = {},
                                       bool connect_now = true);
  // Waits for `n` completions.
  std::vector<ibv_wc> send_completions(FakeQp& q, size_t n, int passes = 20000, int64_t dt = 1000);
  std::vector<RecvCompletion> recv_completions(FakeQp& q, size_t n, int passes = 20000);
  // Posts a WRITE / READ / atomic naming remote memory.
  void post_rdma(FakeQp& q, uint64_t wr_id, ibv_wr_opcode op, ibv_sge sge, uint64_t raddr,
                 uint32_t rkey, uint32_t flags = IBV_SEND_SIGNALED);
  bool has_fatal(FakeHost& h, uint32_t qpn, proto::FatalReason why) const;

  FakeClient *c1 = nullptr, *c2 = nullptr;
  FakeQp *a = nullptr, *b = nullptr;
  FakeMr *m1 = nullptr, *m2 = nullptr;
};

// Random bytes.
std::vector<uint8_t> random_bytes(size_t n, uint32_t seed);
ibv_send_wr make_wr(uint64_t wr_id, ibv_wr_opcode op, ibv_sge* sge, int nsge,
                    uint32_t flags = IBV_SEND_SIGNALED);

}  // namespace vrdma::daemon::testing
