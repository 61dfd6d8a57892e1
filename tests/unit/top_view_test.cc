// vrdma top's figures from status replies: sums per container, rates between two samples, a
// counter that went back (a destroyed QP) counted as no progress, lines cut at the width.
#include "ctl/top_view.h"

#include <gtest/gtest.h>

namespace vrdma::ctl {
namespace {

nlohmann::ordered_json status(uint64_t tx_bytes, uint64_t errors, bool link_up) {
  using J = nlohmann::ordered_json;
  J qp = {{"qpn", 1},
          {"type", "RC"},
          {"state", "RTS"},
          {"tx_ops", tx_bytes / 1000},
          {"tx_bytes", tx_bytes},
          {"rx_ops", 0},
          {"rx_bytes", 0},
          {"errors", errors}};
  J err_qp = qp;
  err_qp["state"] = "ERR";
  err_qp["tx_bytes"] = 0;
  err_qp["tx_ops"] = 0;
  err_qp["errors"] = 0;
  return J{{"daemon",
            {{"pid", 7},
             {"host_id", 0},
             {"uptime_s", 3},
             {"clients", 3},
             {"directory", {{"backend", "embedded"}, {"available", true}}},
             {"router",
              {{"enabled", true},
               {"routed_qps", 1},
               {"links", J::array({{{"host_id", 1},
                                    {"direction", "out"},
                                    {"connected", link_up},
                                    {"bytes_in", tx_bytes / 2},
                                    {"bytes_out", tx_bytes}}})}}}}},
           {"clients", J::array({{{"container", "c0"},
                                  {"ip", "10.0.0.1"},
                                  {"tenant", "t"},
                                  {"kind", "verbs"},
                                  {"qps", J::array({qp, err_qp})},
                                  {"mrs", J::array()}},
                                 {{"container", "c0"},
                                  {"ip", "10.0.0.1"},
                                  {"tenant", "t"},
                                  {"kind", "cli"},
                                  {"qps", J::array()}}})}};
}

TEST(TopView, SumsPerContainerAndRates) {
  TopSample a = top_sample(status(1'000'000, 0, true));
  TopSample b = top_sample(status(3'000'000, 4, true));
  ASSERT_EQ(b.containers.size(), 1u);  // the CLI client is not a container's program
  const TopContainer& c = b.containers.at("c0");
  EXPECT_EQ(c.procs, 1u);
  EXPECT_EQ(c.qps, 2u);
  EXPECT_EQ(c.qps_err, 1u);
  EXPECT_EQ(c.tx_bytes, 3'000'000u);
  std::string screen = render_top("title", a, b, 2.0, 200);
  EXPECT_NE(screen.find("c0 "), std::string::npos) << screen;
  EXPECT_NE(screen.find("1.0 MB/s"), std::string::npos) << screen;  // 2 MB in 2 s, sent
  EXPECT_NE(screen.find("2!"), std::string::npos) << screen;        // a QP in ERR
  EXPECT_NE(screen.find("host 1 out"), std::string::npos) << screen;
  EXPECT_NE(screen.find("500.0 kB/s"), std::string::npos) << screen;         // the link, in
  EXPECT_NE(screen.find("       2        4"), std::string::npos) << screen;  // errors: 2/s, 4
}

TEST(TopView, CounterGoingBackIsNoProgressAndLinesAreCut) {
  TopSample a = top_sample(status(5'000'000, 0, true));
  TopSample b = top_sample(status(1'000'000, 0, false));
  std::string screen = render_top("title", a, b, 1.0, 40);
  EXPECT_EQ(screen.find("MB/s"), std::string::npos) << screen;
  for (size_t pos = 0, next; (next = screen.find('\n', pos)) != std::string::npos; pos = next + 1)
    EXPECT_LE(next - pos, 40u);
  EXPECT_EQ(human_rate(0, "B/s"), "0.0 B/s");
  EXPECT_EQ(human_rate(1234567, "B/s"), "1.2 MB/s");
  EXPECT_EQ(human_rate(999.96, "/s"), "1.0 k/s");
}

TEST(TopView, ToleratesMissingFields) {
  TopSample s = top_sample(nlohmann::ordered_json::parse(R"({"clients":[{"kind":"verbs"}]})"));
  EXPECT_EQ(s.containers.size(), 1u);
  EXPECT_NE(render_top("t", s, s, 1.0, 100).find("(host)"), std::string::npos);
}

}  // namespace
}  // namespace vrdma::ctl
