// The Reload request and request_reload() (SIGHUP): the daemon runs its reload handler in its
// event loop and answers with what the handler says.
#include <errno.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "daemon_test_util.h"

namespace vrdma::daemon::testing {
namespace {

using proto::Op;

std::string text_of(const Packet& p) {
  return std::string(reinterpret_cast<const char*>(p.payload), p.header.len);
}

TEST(DaemonReload, ReloadRequestRunsTheHandlerInTheLoopAndRepliesItsText) {
  DaemonFixture f;
  std::atomic<int> calls{0};
  std::atomic<bool> in_loop{false};
  const auto loop_id = f.thread().get_id();
  f.daemon().set_reload_handler([&] {
    in_loop = std::this_thread::get_id() == loop_id;
    int n = ++calls;
    if (n == 2) return ReloadOutcome{EINVAL, "f.yaml:3: host-id: bad\n"};
    return ReloadOutcome{0, "log-level: info -> debug (applied)\n"};
  });
  Conn c = Conn::open(f.socket());
  c.hello(proto::ClientKind::kCli);
  auto p = std::make_unique<Packet>();
  ASSERT_TRUE(c.call(Op::kReload, nullptr, 0, *p));
  EXPECT_EQ(p->header.status, 0);
  EXPECT_EQ(text_of(*p), "log-level: info -> debug (applied)\n");
  EXPECT_TRUE(in_loop);

  ASSERT_TRUE(c.call(Op::kReload, nullptr, 0, *p));  // a refused configuration
  EXPECT_EQ(p->header.status, EINVAL);
  EXPECT_EQ(text_of(*p), "f.yaml:3: host-id: bad\n");

  f.daemon().request_reload();  // what SIGHUP does
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (calls < 3 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(calls, 3);
  EXPECT_FALSE(c.status().empty());  // still serving
}

TEST(DaemonReload, WithoutAHandlerReloadIsNotSupported) {
  DaemonFixture f;
  Conn c = Conn::open(f.socket());
  c.hello(proto::ClientKind::kCli);
  auto p = std::make_unique<Packet>();
  ASSERT_TRUE(c.call(Op::kReload, nullptr, 0, *p));
  EXPECT_EQ(p->header.status, EOPNOTSUPP);
}

TEST(DaemonReload, ReloadWithAPayloadIsMalformed) {
  DaemonFixture f;
  f.daemon().set_reload_handler([] { return ReloadOutcome{0, "no change\n"}; });
  Conn c = Conn::open(f.socket());
  c.hello(proto::ClientKind::kCli);
  auto p = std::make_unique<Packet>();
  char junk[8] = {};
  ASSERT_TRUE(c.call(Op::kReload, junk, sizeof(junk), *p));
  EXPECT_NE(p->header.status, 0);
}

}  // namespace
}  // namespace vrdma::daemon::testing
