// vrdmad's configuration file: every option of vrdmad (taken from its option table, so options
// added later are covered or make this test fail) set through the file equals the same setting
// on the command line; bad files are refused with their line and key; the shipped example file
// is the generated template; a reload applies the log level and reports what needs a restart.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>

#include "common/cpu_list.h"
#include "common/log.h"
#include "daemon/core/daemon.h"
#include "daemon/core/options.h"
#include "daemon/core/reload.h"
#include "test_pki.h"

#ifndef VRDMA_SOURCE_DIR
#error "VRDMA_SOURCE_DIR must be defined by the build"
#endif

namespace vrdma::daemon {
namespace {

// A value for each option that needs a particular form (its validator's), different from its
// default. Options not listed get one by their type: text "example-value", numbers 7, flags
// true. An option added to vrdmad whose validator refuses that makes this test fail: add it.
const std::map<std::string, std::vector<std::string>> kExamples = {
    {"socket", {"/run/vrdma-test/vrdmad.sock"}},
    {"tenant", {"red=10.77.0.0/24", "blue=10.77.1.0/24"}},
    {"platform-tenants", {"/etc/vrdma/tenants"}},
    {"allow", {"red->blue", "blue->green"}},
    {"log-level", {"debug"}},
    {"socket-group", {"0"}},
    {"router-listen", {"10.76.0.1:7471"}},
    {"tls-ca", {"@DIR@/ca.pem"}},
    {"tls-cert", {"@DIR@/host.pem"}},
    {"tls-key", {"@DIR@/host.key"}},
    {"pod-cidr", {"10.77.0.0/24", "10.78.0.0/24"}},
    {"qos", {"container=10.77.0.5:weight=3,rate=100M", "tenant=red:weight=2,msgs=50k"}},
    {"directory", {"etcd://10.76.0.254:2379"}},
    {"peer", {"1=10.76.0.2:7471=10.77.1.0/24"}},
    {"metrics-listen", {"127.0.0.1:9464"}},
    {"router-cpus", {"0"}},
};

// Keys an option needs beside it to be accepted (check_options: a router needs TLS or
// --router-plaintext, so does an etcd directory; the three TLS files go together).
const std::map<std::string, std::vector<std::pair<std::string, std::string>>> kCompanions = {
    {"router-listen", {{"router-plaintext", "true"}}},
    {"tls-ca", {{"tls-cert", "@DIR@/host.pem"}, {"tls-key", "@DIR@/host.key"}}},
    {"tls-cert", {{"tls-ca", "@DIR@/ca.pem"}, {"tls-key", "@DIR@/host.key"}}},
    {"tls-key", {{"tls-ca", "@DIR@/ca.pem"}, {"tls-cert", "@DIR@/host.pem"}}},
    {"directory",
     {{"tls-ca", "@DIR@/ca.pem"}, {"tls-cert", "@DIR@/host.pem"}, {"tls-key", "@DIR@/host.key"}}},
};

std::string in_dir(std::string value, const std::string& dir) {
  if (auto at = value.find("@DIR@"); at != std::string::npos) value.replace(at, 5, dir);
  return value;
}

std::vector<std::string> example_for(const CLI::Option& opt, const std::string& key) {
  if (auto it = kExamples.find(key); it != kExamples.end()) return it->second;
  if (opt.get_expected_max() == 0) return {"true"};
  std::string type = opt.get_type_name();
  if (type.rfind("INT", 0) == 0 || type.rfind("UINT", 0) == 0 || type.rfind("FLOAT", 0) == 0)
    return {"7"};
  return {"example-value"};
}

struct Parsed {
  std::unique_ptr<DaemonSettings> settings = std::make_unique<DaemonSettings>();
  std::string error;  // of parse or check_options

  explicit Parsed(std::vector<std::string> args) {
    args.insert(args.begin(), "vrdmad");
    std::vector<const char*> argv;
    for (const auto& a : args) argv.push_back(a.c_str());
    try {
      settings->parse(static_cast<int>(argv.size()), argv.data());
      error = check_options(&settings->options());
    } catch (const CLI::ParseError& e) {
      error = e.what();
    }
  }
  const DaemonOptions& opts() const { return settings->options(); }
};

class DaemonOptionsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ::unsetenv(proto::kSocketEnv);
    dir_ = std::filesystem::temp_directory_path() /
           ("daemon_options_test." + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    // Real certificates: an etcd directory reads them when it is made.
    static const testing::TestPki pki(1);
    ASSERT_TRUE(pki.ok()) << pki.error();
    std::filesystem::copy_file(pki.ca(), dir_ / "ca.pem");
    std::filesystem::copy_file(pki.cert("host-0"), dir_ / "host.pem");
    std::filesystem::copy_file(pki.key("host-0"), dir_ / "host.key");
    level_ = log_level();
  }
  void TearDown() override {
    set_log_level(level_);
    std::filesystem::remove_all(dir_);
  }
  std::string write(const std::string& text, const std::string& name = "vrdmad.yaml") {
    std::string path = (dir_ / name).string();
    std::ofstream(path) << text;
    return path;
  }

  std::filesystem::path dir_;
  LogLevel level_ = LogLevel::kInfo;
};

TEST_F(DaemonOptionsTest, EveryOptionThroughTheFileEqualsTheCommandLine) {
  Parsed defaults({"--config", ""});
  ASSERT_EQ(defaults.error, "");
  int keys = 0;
  for (const CLI::Option* opt : defaults.settings->app().get_options()) {
    const std::string key = config::key_of(*opt);
    if (key.empty()) continue;
    ++keys;
    SCOPED_TRACE("key " + key);
    std::vector<std::string> values = example_for(*opt, key);
    for (auto& v : values) v = in_dir(v, dir_.string());
    std::string yaml;
    std::vector<std::string> cli = {"--config", ""};
    if (auto it = kCompanions.find(key); it != kCompanions.end()) {
      for (const auto& [k, v] : it->second) {
        yaml += k + ": " + config::yaml_scalar(in_dir(v, dir_.string())) + "\n";
        if (v == "true")
          cli.push_back("--" + k);
        else
          cli.insert(cli.end(), {"--" + k, in_dir(v, dir_.string())});
      }
    }
    yaml += key + ": ";
    if (config::takes_list(*opt)) {
      yaml += "\n";
      for (const auto& v : values) {
        yaml += "  - " + config::yaml_scalar(v) + "\n";
        cli.insert(cli.end(), {"--" + key, v});
      }
    } else if (opt->get_expected_max() == 0) {
      yaml += values[0] + "\n";
      cli.push_back("--" + key);
    } else {
      yaml += config::yaml_scalar(values[0]) + "\n";
      cli.insert(cli.end(), {"--" + key, values[0]});
    }
    Parsed from_file({"--config", write(yaml)});
    Parsed from_cli(cli);
    ASSERT_EQ(from_cli.error, "") << "the example value of --" << key
                                  << " is refused: add one to kExamples";
    ASSERT_EQ(from_file.error, "") << yaml;
    EXPECT_TRUE(from_file.opts() == from_cli.opts()) << yaml;
    EXPECT_FALSE(from_file.opts() == defaults.opts())
        << yaml << "changed nothing: give --" << key << " an example unlike its default";
  }
  EXPECT_GE(keys, 29);
}

TEST_F(DaemonOptionsTest, AllOptionsAtOnceAndTheCommandLineWins) {
  std::string path = write(
      "host-id: 3\nlog-level: warn\ntenant: [a=10.0.0.0/8]\nrouter-listen: 10.76.0.1:7471\n"
      "router-plaintext: true\npod-cidr: 10.77.0.0/24\ndirectory-lease: 9\n"
      "trust-unnamed-netns: true\nmax-qps-per-container: 12\n");
  Parsed p({"--config", path, "--host-id", "4", "--tenant", "b=10.1.0.0/16"});
  ASSERT_EQ(p.error, "");
  EXPECT_EQ(p.opts().cfg.host_id, 4u);
  EXPECT_EQ(p.opts().log_level, "warn");
  ASSERT_EQ(p.opts().cfg.tenants.size(), 1u);
  EXPECT_EQ(p.opts().cfg.tenants[0].name, "b");
  EXPECT_EQ(p.opts().cfg.router_listen, "10.76.0.1:7471");
  ASSERT_EQ(p.opts().cfg.pod_cidrs.size(), 1u);
  EXPECT_EQ(p.opts().cfg.directory_lease_s, 9);
  EXPECT_TRUE(p.opts().cfg.trust_unnamed_netns);
  EXPECT_TRUE(p.opts().cfg.router_plaintext);
  EXPECT_EQ(p.opts().cfg.quotas[Resource::kQps], 12u);
  EXPECT_EQ(p.settings->file(), path);
}

TEST_F(DaemonOptionsTest, BadValuesAreRefusedWithTheirLineAndKey) {
  struct Case {
    const char* yaml;
    const char* where;
    const char* what;
  };
  const Case cases[] = {
      {"host-id: 1\nrouter-listen: 10.76.0.1", "2: router-listen", "expected IPV4:PORT"},
      {"tenant:\n  - a=10.0.0.0/8\n  - nonsense", "3: tenant", "nonsense"},
      {"pod-cidr: [10.77.0.0/33]", "1: pod-cidr", "expected A.B.C.D/LEN"},
      {"peer: [1=nowhere]", "1: peer", ""},
      {"log-level: chatty", "1: log-level", "chatty not in"},
      {"host-id: h0", "1: host-id", "'h0' is not a valid UINT"},
      {"directory-lease: [1, 2]", "1: directory-lease", "not a list"},
      {"socket:\n  path: /x", "2: socket", "not a map"},
      {"sockett: /x", "1: sockett", "unknown key"},
      {"router-cpus: 3-1", "1: router-cpus", "runs backwards"},
      {"router-poll-us: 1000001", "1: router-poll-us", "not in range"},
      {"router-poll-us: -1", "1: router-poll-us", ""},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.yaml);
    std::string path = write(c.yaml);
    Parsed p({"--config", path});
    std::string expected = path + ":" + c.where + ":";
    EXPECT_EQ(p.error.rfind(expected, 0), 0u) << p.error << "\n  expected " << expected;
    EXPECT_NE(p.error.find(c.what), std::string::npos) << p.error;
  }
}

// --router-cpus: the list, ascending, in the router's configuration; a CPU vrdmad may not run
// on is refused with the CPUs it may.
TEST_F(DaemonOptionsTest, RouterCpusMustBeOnesTheDaemonMayUse) {
  const std::vector<uint32_t> allowed = allowed_cpus();
  ASSERT_FALSE(allowed.empty());
  const std::string first = std::to_string(allowed.front());
  Parsed ok({"--router-cpus", first + "," + first});
  EXPECT_EQ(ok.error, "");
  EXPECT_EQ(ok.opts().cfg.router_config().cpus, std::vector<uint32_t>{allowed.front()});
  Parsed none({});
  EXPECT_TRUE(none.opts().cfg.router_config().cpus.empty());
  const uint32_t outside = allowed.back() + 1;
  ASSERT_LT(outside, kMaxCpus);
  Parsed bad({"--router-cpus", first + "," + std::to_string(outside)});
  EXPECT_EQ(bad.error, "--router-cpus: CPU " + std::to_string(outside) +
                           " is not one vrdmad may run on (" + cpu_list_text(allowed) + ")");
  Parsed garbage({"--router-cpus", "one"});
  EXPECT_NE(garbage.error.find("not 'one'"), std::string::npos) << garbage.error;
}

// --router-poll-us: microseconds on the command line, nanoseconds in the router's
// configuration; by default the router sleeps at once; more than a second is refused.
TEST_F(DaemonOptionsTest, RouterPollIsMicrosecondsUpToASecond) {
  EXPECT_EQ(Parsed({}).opts().cfg.router_config().poll_ns, 0);
  Parsed ok({"--router-poll-us", "250"});
  EXPECT_EQ(ok.error, "");
  EXPECT_EQ(ok.opts().cfg.router_config().poll_ns, 250'000);
  EXPECT_EQ(Parsed({"--router-poll-us", "1000000"}).opts().cfg.router_config().poll_ns,
            1'000'000'000);
  Parsed big({"--router-poll-us", "1000001"});
  EXPECT_NE(big.error.find("--router-poll-us"), std::string::npos) << big.error;
  EXPECT_NE(Parsed({"--router-poll-us", "-5"}).error, "");
  EXPECT_NE(Parsed({"--router-poll-us", "soon"}).error, "");
}

// deploy/config/vrdmad.yaml (installed as /etc/vrdma/vrdmad.yaml) is what
// `vrdmad --print-config-template` prints, and as shipped it sets nothing.
TEST_F(DaemonOptionsTest, ShippedExampleIsTheGeneratedTemplate) {
  const std::string shipped_path = std::string(VRDMA_SOURCE_DIR) + "/deploy/config/vrdmad.yaml";
  std::ifstream in(shipped_path);
  ASSERT_TRUE(in) << shipped_path;
  std::stringstream shipped;
  shipped << in.rdbuf();
  DaemonSettings settings;
  EXPECT_EQ(shipped.str(), config_file_template(settings.app()))
      << shipped_path << " differs from the option table; regenerate it:\n"
      << "  build/src/daemon/vrdmad --print-config-template > deploy/config/vrdmad.yaml";
  Parsed as_shipped({"--config", shipped_path});
  Parsed defaults({"--config", ""});
  ASSERT_EQ(as_shipped.error, "");
  EXPECT_TRUE(as_shipped.opts() == defaults.opts());
  EXPECT_TRUE(config::given_values(as_shipped.settings->app()).empty());
}

class ReloadTest : public DaemonOptionsTest {
 protected:
  // The reloader of a daemon started with `--config FILE` and `extra` arguments.
  void start(const std::string& yaml, std::vector<std::string> extra = {}) {
    path_ = write(yaml);
    args_ = {"vrdmad", "--config", path_};
    args_.insert(args_.end(), extra.begin(), extra.end());
    std::vector<const char*> argv;
    for (const auto& a : args_) argv.push_back(a.c_str());
    running_ = std::make_unique<DaemonSettings>();
    running_->parse(static_cast<int>(argv.size()), argv.data());
    ASSERT_EQ(check_options(&running_->options()), "");
    set_log_level(*parse_log_level(running_->options().log_level));
    daemon_ = std::make_unique<Daemon>(running_->options().cfg);
    reloader_ = std::make_unique<Reloader>(args_, *running_);
  }
  ReloadOutcome reload_with(const std::string& yaml) {
    write(yaml);
    return reloader_->reload(*daemon_);
  }

  std::string path_;
  std::vector<std::string> args_;
  std::unique_ptr<DaemonSettings> running_;
  std::unique_ptr<Daemon> daemon_;
  std::unique_ptr<Reloader> reloader_;
};

TEST_F(ReloadTest, LogLevelAndTenantsAreAppliedOtherKeysNeedARestart) {
  start("log-level: info\nhost-id: 1\n");
  ASSERT_EQ(log_level(), LogLevel::kInfo);

  ReloadOutcome same = reload_with("log-level: info\nhost-id: 1\n");
  EXPECT_EQ(same.error, 0);
  EXPECT_EQ(same.text, "no change (" + path_ + ")\n");

  ReloadOutcome r = reload_with("log-level: debug\nhost-id: 2\ntenant: [a=10.0.0.0/8]\n");
  EXPECT_EQ(r.error, 0);
  EXPECT_EQ(log_level(), LogLevel::kDebug);
  EXPECT_NE(r.text.find("log-level: info -> debug (applied)\n"), std::string::npos) << r.text;
  EXPECT_NE(r.text.find("host-id: 1 -> 2 (needs a restart)\n"), std::string::npos) << r.text;
  EXPECT_NE(r.text.find("tenant: [] (default) -> a=10.0.0.0/8 (applied)\n"), std::string::npos)
      << r.text;
  ASSERT_EQ(daemon_->config().tenants.size(), 1u);
  EXPECT_EQ(daemon_->config().tenants[0].name, "a");

  // What needs a restart is still reported; the applied level is now in force.
  ReloadOutcome again = reload_with("log-level: debug\nhost-id: 2\ntenant: [a=10.0.0.0/8]\n");
  EXPECT_EQ(again.text.find("log-level"), std::string::npos) << again.text;
  EXPECT_EQ(again.text.find("tenant"), std::string::npos) << again.text;
  EXPECT_NE(again.text.find("host-id: 1 -> 2 (needs a restart)"), std::string::npos);

  // A key removed from the file goes back to its default.
  ReloadOutcome back = reload_with("host-id: 1\n");
  EXPECT_NE(back.text.find("log-level: debug -> info (default) (applied)"), std::string::npos)
      << back.text;
  EXPECT_EQ(log_level(), LogLevel::kInfo);
  EXPECT_TRUE(daemon_->config().tenants.empty());
}

TEST_F(ReloadTest, ABadFileChangesNothing) {
  start("log-level: warn\n");
  ReloadOutcome r = reload_with("log-level: debug\nhost-id: many\n");
  EXPECT_EQ(r.error, EINVAL);
  EXPECT_EQ(log_level(), LogLevel::kWarn);
  EXPECT_NE(r.text.find(path_ + ":2: host-id: 'many' is not a valid UINT"), std::string::npos)
      << r.text;
  ReloadOutcome fixed = reload_with("log-level: error\n");
  EXPECT_EQ(fixed.error, 0);
  EXPECT_EQ(log_level(), LogLevel::kError);
}

TEST_F(ReloadTest, TheCommandLineStillWins) {
  start("log-level: warn\n", {"--log-level", "error"});
  EXPECT_EQ(log_level(), LogLevel::kError);
  ReloadOutcome r = reload_with("log-level: debug\n");
  EXPECT_EQ(r.error, 0);
  EXPECT_EQ(log_level(), LogLevel::kError);
  EXPECT_EQ(r.text.rfind("no change", 0), 0u) << r.text;
}

TEST(ReloadHooks, EveryHookIsAKeyOfTheFile) {
  DaemonSettings settings;
  for (const auto& hook : reload_hooks()) {
    const CLI::Option* opt = settings.app().get_option_no_throw(std::string("--") + hook.key);
    ASSERT_NE(opt, nullptr) << hook.key;
    EXPECT_EQ(config::key_of(*opt), hook.key);
  }
}

}  // namespace
}  // namespace vrdma::daemon
