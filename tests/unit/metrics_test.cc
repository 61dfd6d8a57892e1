// The metrics endpoint's parts: the text format, the request parser (bad, oversized, split
// requests), the server in an event loop of the test's own (slow clients, too many clients,
// a real scrape over TCP), and the ledger that keeps container counters monotonic.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include "common/clock.h"
#include "common/unique_fd.h"
#include "daemon/metrics/exposition.h"
#include "daemon/metrics/http_request.h"
#include "daemon/metrics/metrics_server.h"
#include "daemon/metrics/snapshot.h"

namespace vrdma::daemon::metrics {
namespace {

using State = HttpRequest::State;

TEST(Exposition, FamiliesSamplesAndEscapes) {
  Exposition e;
  e.family("vrdma_x_total", Type::kCounter, "Help with \\ and\nnewline");
  e.sample({{"a", "q\"b\\c\nd"}}, uint64_t(7));
  e.family("vrdma_y", Type::kGauge, "A gauge");
  e.sample({}, 0.25);
  EXPECT_EQ(e.text(),
            "# HELP vrdma_x_total Help with \\\\ and\\nnewline\n"
            "# TYPE vrdma_x_total counter\n"
            "vrdma_x_total{a=\"q\\\"b\\\\c\\nd\"} 7\n"
            "# HELP vrdma_y A gauge\n"
            "# TYPE vrdma_y gauge\n"
            "vrdma_y 0.25\n");
}

TEST(HttpRequest, GoodRequestInPieces) {
  HttpRequest r;
  std::string req = "GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\nAccept: */*\r\n\r\n";
  for (size_t i = 0; i + 1 < req.size(); ++i)
    ASSERT_EQ(r.feed(req.substr(i, 1)), State::kIncomplete) << i;
  EXPECT_EQ(r.feed(req.substr(req.size() - 1)), State::kOk);
  EXPECT_EQ(r.method(), "GET");
  EXPECT_EQ(r.path(), "/metrics");
}

TEST(HttpRequest, BadRequests) {
  const char* bad[] = {
      "\r\n\r\n",
      "GET\r\n\r\n",
      "GET /metrics\r\n\r\n",
      "GET  HTTP/1.1\r\n\r\n",
      "GET metrics HTTP/1.1\r\n\r\n",
      "GET /met rics HTTP/1.1\r\n\r\n",
      "GET /metrics FTP/1.1\r\n\r\n",
      "G(T /metrics HTTP/1.1\r\n\r\n",
      "GET /metrics HTTP/1.1\r\nno colon\r\n\r\n",
      "GET /metrics HTTP/1.1\r\n: empty name\r\n\r\n",
      "GET /metrics HTTP/1.1\r\nX: a\x01b\r\n\r\n",
      "GET /\x80 HTTP/1.1\r\n\r\n",
  };
  for (const char* b : bad) {
    HttpRequest r;
    EXPECT_EQ(r.feed(b), State::kBad) << b;
    EXPECT_EQ(HttpRequest::status_code(r.state()), 400);
  }
  HttpRequest post;
  EXPECT_EQ(post.feed("POST /metrics HTTP/1.1\r\n\r\n"), State::kNotAllowed);
  HttpRequest v2;
  EXPECT_EQ(v2.feed("GET /metrics HTTP/2.0\r\n\r\n"), State::kBadVersion);
  HttpRequest head;
  EXPECT_EQ(head.feed("HEAD /metrics HTTP/1.0\n\n"), State::kOk);
}

TEST(HttpRequest, OversizedHeadIsRefusedWithoutKeepingIt) {
  HttpRequest r;
  std::string line = "GET /metrics HTTP/1.1\r\n";
  EXPECT_EQ(r.feed(line), State::kIncomplete);
  std::string filler = "X-Filler: " + std::string(1000, 'a') + "\r\n";
  State s = State::kIncomplete;
  for (int i = 0; i < 100 && s == State::kIncomplete; ++i) s = r.feed(filler);
  EXPECT_EQ(s, State::kTooLarge);
  EXPECT_EQ(HttpRequest::status_code(s), 431);
  // Later bytes change nothing, even a proper end.
  EXPECT_EQ(r.feed("\r\n\r\n"), State::kTooLarge);
  // A head exactly at the limit is fine.
  HttpRequest ok;
  std::string head = "GET /metrics HTTP/1.1\r\nX: ";
  head += std::string(HttpRequest::kMaxHead - head.size(), 'b');
  EXPECT_EQ(ok.feed(head + "\r\n\r\n"), State::kOk);
}

// The server in a loop of the test's own, on a thread; clients on the test's thread.
class ServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ep_.reset(::epoll_create1(EPOLL_CLOEXEC));
    ASSERT_TRUE(ep_);
    ASSERT_EQ(server_.start(ep_.get(), "127.0.0.1:0",
                            [this] {
                              ++renders_;
                              return std::string("vrdma_test 1\n");
                            }),
              0);
    ASSERT_NE(server_.port(), 0);
    loop_ = std::thread([this] {
      epoll_event ev[8];
      while (!stop_) {
        int64_t dl = server_.next_deadline();
        int timeout = 20;
        if (dl >= 0)
          timeout = std::min<int64_t>(20, std::max<int64_t>(1, (dl - now_ns()) / 1000000));
        int n = ::epoll_wait(ep_.get(), ev, 8, timeout);
        for (int i = 0; i < n; ++i) server_.on_event(ev[i].data.u64, ev[i].events, now_ns());
        server_.expire(now_ns());
      }
    });
  }
  void TearDown() override {
    stop_ = true;
    if (loop_.joinable()) loop_.join();
  }
  int connect_client() {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sa.sin_port = htons(server_.port());
    EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)), 0);
    return fd;
  }
  // Everything the server sends until it closes, within `ms`.
  static std::string read_all(int fd, int ms = 10000, bool* closed = nullptr) {
    std::string out;
    if (closed) *closed = false;
    char buf[4096];
    auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    while (std::chrono::steady_clock::now() < end) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 50) != 1) continue;
      ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
      if (n <= 0) {
        if (closed) *closed = true;
        break;
      }
      out.append(buf, static_cast<size_t>(n));
    }
    return out;
  }
  std::string request(const std::string& req) {
    UniqueFd fd(connect_client());
    ::send(fd.get(), req.data(), req.size(), MSG_NOSIGNAL);
    return read_all(fd.get());
  }

  UniqueFd ep_;
  MetricsServer server_;
  std::thread loop_;
  std::atomic<bool> stop_{false};
  std::atomic<int> renders_{0};
};

TEST_F(ServerTest, ServesTheExpositionFormat) {
  std::string r = request("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << r;
  EXPECT_NE(r.find("Content-Type: text/plain; version=0.0.4"), std::string::npos) << r;
  EXPECT_NE(r.find("Content-Length: 13\r\n"), std::string::npos) << r;
  EXPECT_EQ(r.substr(r.size() - 13), "vrdma_test 1\n");
  EXPECT_EQ(renders_, 1);
  EXPECT_EQ(server_.scrapes(), 1u);
}

TEST_F(ServerTest, AnswersErrorsAndRendersNothingForThem) {
  EXPECT_EQ(request("GET /other HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 404", 0), 0u);
  EXPECT_EQ(request("DELETE /metrics HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 405", 0), 0u);
  EXPECT_EQ(request("garbage\r\n\r\n").rfind("HTTP/1.1 400", 0), 0u);
  std::string big = "GET /metrics HTTP/1.1\r\nX: " + std::string(20000, 'a');
  EXPECT_EQ(request(big).rfind("HTTP/1.1 431", 0), 0u);
  std::string head = request("HEAD /metrics HTTP/1.1\r\n\r\n");
  EXPECT_EQ(head.rfind("HTTP/1.1 200", 0), 0u);
  EXPECT_EQ(head.find("vrdma_test"), std::string::npos);
  EXPECT_EQ(renders_, 1);  // HEAD renders (for its length), nothing else does
}

TEST_F(ServerTest, SlowAndSilentClientsAreCutOffWhileOthersAreServed) {
  // kMaxConnections clients that never finish their request...
  std::vector<UniqueFd> slow;
  for (size_t i = 0; i < MetricsServer::kMaxConnections; ++i) {
    slow.emplace_back(connect_client());
    ::send(slow.back().get(), "GET /met", 8, MSG_NOSIGNAL);
  }
  // ...fill the server: one more is closed at once without an answer.
  bool closed = false;
  {
    UniqueFd extra(connect_client());
    EXPECT_EQ(read_all(extra.get(), 3000, &closed), "");
    EXPECT_TRUE(closed);
  }
  // Past their deadline the slow ones are closed without an answer, and a scrape works again.
  for (auto& s : slow) {
    EXPECT_EQ(read_all(s.get(), 20000, &closed), "");
    EXPECT_TRUE(closed);
  }
  EXPECT_EQ(request("GET /metrics HTTP/1.0\r\n\r\n").rfind("HTTP/1.1 200", 0), 0u);
}

TEST(MetricsServer, RefusesBadAddresses) {
  UniqueFd ep(::epoll_create1(EPOLL_CLOEXEC));
  for (const char* a : {"", "127.0.0.1", "127.0.0.1:", "localhost:9464", "1.2.3:80",
                        "127.0.0.1:70000", "127.0.0.1:9x"}) {
    MetricsServer s;
    EXPECT_EQ(s.start(ep.get(), a, nullptr), EINVAL) << a;
  }
}

Snapshot one_qp(uint32_t client, uint32_t qpn, uint64_t bytes) {
  Snapshot s;
  ContainerSample c;
  c.name = "c0";
  c.ip = "10.0.0.1";
  c.clients = 1;
  QpSample q;
  q.client = client;
  q.qpn = qpn;
  q.counters.tx_bytes[1] = bytes;
  c.qps.push_back(q);
  s.containers.push_back(c);
  return s;
}

TEST(CounterLedger, ContainerCountersStayMonotonicAcrossQpsAndProcesses) {
  CounterLedger l;
  const std::string k = "c0/10.0.0.1";
  auto totals = [&](Snapshot s) { return l.totals(s)[k].tx_bytes[1]; };
  EXPECT_EQ(totals(one_qp(1, 10, 100)), 100u);
  // The QP is gone, another took its place: its last count stays with the container.
  EXPECT_EQ(totals(one_qp(1, 11, 5)), 105u);
  // The same QPN with smaller counters is a new QP.
  EXPECT_EQ(totals(one_qp(1, 11, 2)), 107u);
  // A QP destroyed between scrapes hands its final counters over, counted once.
  EXPECT_EQ(totals(one_qp(2, 12, 3)), 110u);
  CounterSet final_counters;
  final_counters.tx_bytes[1] = 10;
  l.retire(one_qp(2, 12, 0).containers[0], 2, 12, final_counters);
  // No process left: the container stays, with its totals and no QP.
  Snapshot empty;
  auto t = l.totals(empty);
  EXPECT_EQ(t[k].tx_bytes[1], 117u);
  ASSERT_EQ(empty.containers.size(), 1u);
  EXPECT_EQ(empty.containers[0].name, "c0");
  EXPECT_EQ(empty.containers[0].clients, 0u);
  EXPECT_EQ(totals(one_qp(3, 13, 1)), 118u);
}

TEST(Render, NamesAndLabels) {
  Snapshot s = one_qp(1, 10, 4096);
  s.containers[0].tenant = "t";
  s.containers[0].qps[0].state = 3;
  s.containers[0].qps[0].counters.send_completions[10] = 2;
  s.daemon.version = "9.9";
  LinkSample link;
  link.peer_host = 1;
  link.up = true;
  link.rtt_s = 0.001;
  s.links.push_back(link);
  CounterLedger l;
  std::string t = render(s, l);
  auto has = [&](const std::string& line) {
    EXPECT_NE(t.find(line), std::string::npos) << line << "\n" << t;
  };
  has("vrdma_build_info{host=\"0\",version=\"9.9\"} 1\n");
  has("vrdma_tx_bytes_total{host=\"0\",container=\"c0\",ip=\"10.0.0.1\",tenant=\"t\",op=\"write\"} "
      "4096\n");
  has("vrdma_completions_total{host=\"0\",container=\"c0\",ip=\"10.0.0.1\",tenant=\"t\","
      "queue=\"send\",status=\"IBV_WC_REM_ACCESS_ERR\"} 2\n");
  has("vrdma_qps{host=\"0\",container=\"c0\",ip=\"10.0.0.1\",tenant=\"t\",state=\"RTS\"} 1\n");
  has("vrdma_link_rtt_seconds{host=\"0\",peer_host=\"1\",direction=\"in\",security=\"\",lane=\"main\"} 0.001\n");
  has("# TYPE vrdma_rx_write_requests_total counter\n");
}

TEST(Render, DirectPathFiguresOfContainersWithAPort) {
  Snapshot s = one_qp(1, 10, 4096);
  s.containers[0].tenant = "t";
  s.containers[0].direct = true;
  s.containers[0].direct_sent_bytes = 123456789;
  s.containers[0].direct_received_bytes = 4321;
  s.containers[0].direct_connections = 2;
  ContainerSample other = s.containers[0];  // no direct port: no series
  other.name = "c1";
  other.ip = "10.0.0.2";
  other.direct = false;
  other.qps.clear();
  s.containers.push_back(other);
  CounterLedger l;
  std::string t = render(s, l);
  auto has = [&](const std::string& line) {
    EXPECT_NE(t.find(line), std::string::npos) << line << "\n" << t;
  };
  const std::string labels = "{host=\"0\",container=\"c0\",ip=\"10.0.0.1\",tenant=\"t\"} ";
  has("# TYPE vrdma_direct_sent_bytes_total counter\n");
  has("vrdma_direct_sent_bytes_total" + labels + "123456789\n");
  has("vrdma_direct_received_bytes_total" + labels + "4321\n");
  has("# TYPE vrdma_direct_connections gauge\n");
  has("vrdma_direct_connections" + labels + "2\n");
  EXPECT_EQ(t.find("vrdma_direct_sent_bytes_total{host=\"0\",container=\"c1\""), std::string::npos);
}

TEST(Render, QosFlowsByContainerAndClass) {
  Snapshot s;
  QosSample bulk;
  bulk.ip = "10.0.0.1";
  bulk.tenant = "t";
  bulk.cls = "bulk";
  bulk.weight = 3;
  bulk.rate = 100000000;
  bulk.bytes = 65536;
  bulk.msgs = 2;
  bulk.delay_ns_sum = 1500000000;
  bulk.delay_ns_max = 250000;
  bulk.holds = 7;
  QosSample lat = bulk;
  lat.cls = "latency";
  lat.msgs = 9;
  s.qos = {bulk, lat};
  CounterLedger l;
  std::string t = render(s, l);
  auto has = [&](const std::string& line) {
    EXPECT_NE(t.find(line), std::string::npos) << line << "\n" << t;
  };
  const std::string labels = "{host=\"0\",ip=\"10.0.0.1\",tenant=\"t\",class=\"bulk\"} ";
  has("# TYPE vrdma_qos_tx_bytes_total counter\n");
  has("vrdma_qos_tx_bytes_total" + labels + "65536\n");
  has("vrdma_qos_tx_messages_total" + labels + "2\n");
  has("vrdma_qos_tx_messages_total{host=\"0\",ip=\"10.0.0.1\",tenant=\"t\",class=\"latency\"} 9\n");
  has("vrdma_qos_queue_delay_seconds_total" + labels + "1.5\n");
  has("vrdma_qos_queue_delay_max_seconds" + labels + "0.00025\n");
  has("vrdma_qos_holds_total" + labels + "7\n");
  has("vrdma_qos_weight" + labels + "3\n");
  has("vrdma_qos_rate_limit_bytes_per_second" + labels + "100000000\n");
  has("vrdma_qos_rate_limit_messages_per_second" + labels + "0\n");
}

}  // namespace
}  // namespace vrdma::daemon::metrics
