// The YAML configuration file of a CLI11 program (src/config): every kind of option set
// through the file equals the same setting on the command line; the command line wins; bad
// files are refused with the file, line and key.
#include "config/yaml_options.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

namespace vrdma::config {
namespace {

// A program with one option of every kind the file must handle.
struct Values {
  std::string name = "none";
  int count = 5;
  unsigned id = 0;
  std::string level = "info";
  bool verbose = false;
  std::vector<std::string> rules;
  std::vector<int> ports;
  std::string from_env = "unset";
  bool operator==(const Values&) const = default;
};

void PrintTo(const Values& v, std::ostream* os) {
  *os << "{name=" << v.name << " count=" << v.count << " id=" << v.id << " level=" << v.level
      << " verbose=" << v.verbose << " rules=" << v.rules.size() << " ports=" << v.ports.size()
      << " from_env=" << v.from_env << "}";
}

constexpr const char* kEnv = "VRDMA_YAML_OPTIONS_TEST_ENV";

struct Program {
  CLI::App app{"test program"};
  Values v;
  std::unique_ptr<YamlOptions> file;

  explicit Program(const std::string& default_path = "/nonexistent/default.yaml") {
    app.option_defaults()->always_capture_default();
    app.add_option("--name", v.name, "A text")->default_val("none");
    app.add_option("--count", v.count, "A number from 1 to 10")
        ->default_val(5)
        ->check(CLI::Range(1, 10));
    app.add_option("--id", v.id, "An unsigned number")->default_val(0);
    app.add_option("--level", v.level, "One of a set")
        ->check(CLI::IsMember({"error", "info", "debug"}))
        ->default_val("info");
    app.add_flag("--verbose", v.verbose, "A flag");
    app.add_option("--rule", v.rules, "Repeatable text")->allow_extra_args(false);
    app.add_option("--port", v.ports, "Repeatable number")
        ->allow_extra_args(false)
        ->check(CLI::Range(1, 65535));
    app.add_option("--from-env", v.from_env, "Also from the environment")->envname(kEnv);
    file = std::make_unique<YamlOptions>(app, default_path);
  }

  void parse(std::vector<std::string> args) {
    args.insert(args.begin(), "prog");
    std::vector<const char*> argv;
    for (const auto& a : args) argv.push_back(a.c_str());
    file->parse(static_cast<int>(argv.size()), argv.data());
  }
};

class YamlOptionsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("yaml_options_test." + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    ::unsetenv(kEnv);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string write(const std::string& text, const std::string& name = "prog.yaml") {
    std::string path = (dir_ / name).string();
    std::ofstream(path) << text;
    return path;
  }

  // The ConfigError message parsing `text` gives, "" if it parses.
  std::string error_of(const std::string& text) {
    std::string path = write(text);
    Program p;
    try {
      p.parse({"--config", path});
    } catch (const CLI::ConfigError& e) {
      return e.what();
    }
    return "";
  }

  std::filesystem::path dir_;
};

// Every kind of option: the file and the command line give the same values, which differ from
// the defaults.
TEST_F(YamlOptionsTest, EveryKindOfOptionFromTheFileEqualsTheCommandLine) {
  struct Case {
    const char* yaml;
    std::vector<std::string> cli;
  };
  const Case cases[] = {
      {"name: alpha", {"--name", "alpha"}},
      {"name: \"two words\"", {"--name", "two words"}},
      {"name: 42", {"--name", "42"}},
      {"name: \"\"", {"--name", ""}},
      {"count: 7", {"--count", "7"}},
      {"id: 4000000000", {"--id", "4000000000"}},
      {"level: debug", {"--level", "debug"}},
      {"verbose: true", {"--verbose"}},
      {"rule: one", {"--rule", "one"}},
      {"rule: [a=1, b=2]", {"--rule", "a=1", "--rule", "b=2"}},
      {"rule:\n  - a=1\n  - b=2\n  - c=3", {"--rule", "a=1", "--rule", "b=2", "--rule", "c=3"}},
      {"port: [80, 443]", {"--port", "80", "--port", "443"}},
      {"from-env: set", {"--from-env", "set"}},
      {"name: x\ncount: 2\nverbose: yes\nrule: [r]",
       {"--name", "x", "--count", "2", "--verbose", "--rule", "r"}},
  };
  Program defaults;
  defaults.parse({"--config", ""});
  for (const auto& c : cases) {
    SCOPED_TRACE(c.yaml);
    Program from_file, from_cli;
    from_file.parse({"--config", write(c.yaml)});
    std::vector<std::string> cli = c.cli;
    cli.insert(cli.begin(), {"--config", ""});
    from_cli.parse(cli);
    EXPECT_EQ(from_file.v, from_cli.v);
    EXPECT_FALSE(from_file.v == defaults.v) << "the setting changed nothing";
    EXPECT_EQ(given_values(from_file.app), given_values(from_cli.app));
  }
}

TEST_F(YamlOptionsTest, TheCommandLineWinsOverTheFileAndTheEnvironmentToo) {
  std::string path = write("name: file\ncount: 3\nrule: [f1, f2]\nverbose: false\nfrom-env: file");
  ::setenv(kEnv, "env", 1);
  Program p;
  p.parse({"--config", path, "--name", "cli", "--rule", "c1", "--verbose"});
  ::unsetenv(kEnv);
  EXPECT_EQ(p.v.name, "cli");
  EXPECT_EQ(p.v.count, 3);                               // from the file
  EXPECT_EQ(p.v.rules, std::vector<std::string>{"c1"});  // replaced, not merged
  EXPECT_TRUE(p.v.verbose);
  EXPECT_EQ(p.v.from_env, "env");
  EXPECT_EQ(p.file->file(), path);
}

TEST_F(YamlOptionsTest, DefaultFileIsOptionalAnExplicitOneIsNot) {
  {
    Program p((dir_ / "absent.yaml").string());
    p.parse({});
    EXPECT_EQ(p.file->file(), "");
    EXPECT_EQ(p.v, Values{});
  }
  {
    std::string path = write("count: 9", "default.yaml");
    Program p(path);
    p.parse({});
    EXPECT_EQ(p.file->file(), path);
    EXPECT_EQ(p.v.count, 9);
  }
  {
    Program p(write("count: 9", "default.yaml"));
    p.parse({"--config", ""});  // none, although the default exists
    EXPECT_EQ(p.file->file(), "");
    EXPECT_EQ(p.v.count, 5);
  }
  {
    Program p;
    std::string missing = (dir_ / "missing.yaml").string();
    try {
      p.parse({"--config", missing});
      ADD_FAILURE() << "a missing --config file was accepted";
    } catch (const CLI::FileError& e) {
      EXPECT_NE(std::string(e.what()).find(missing), std::string::npos) << e.what();
    }
  }
  {
    Program p(write("", "empty.yaml"));
    p.parse({});  // an empty file (or comments only) sets nothing
    EXPECT_EQ(p.v, Values{});
  }
}

TEST_F(YamlOptionsTest, BadFilesNameTheFileTheLineAndTheKey) {
  struct Case {
    const char* yaml;
    const char* where;  // "LINE: KEY" expected after the file name
    const char* what;   // a part of the reason
  };
  const Case cases[] = {
      {"name: a\nnmae: b", "2: nmae", "unknown key"},
      {"name: a\n\ncount: [1, 2]", "3: count", "takes one INT, not a list"},
      {"verbose: [true]", "1: verbose", "takes one true or false, not a list"},
      {"count:\n  a: 1", "2: count", "not a map"},
      {"rule:\n  x: y", "2: rule", "not a map"},
      {"count: many", "1: count", "many"},
      {"id: many", "1: id", "'many' is not a valid UINT"},
      {"id: -1", "1: id", "is not a valid UINT"},
      {"count: 11", "1: count", "not in range 1 to 10"},
      {"level: loud", "1: level", "loud not in {error,info,debug}"},
      {"verbose: maybe", "1: verbose", "'maybe' is not a valid"},
      {"port: [80, 70000]", "1: port", "not in range 1 to 65535"},
      {"rule:\n  - a\n  - [b, c]", "3: rule", "list items are single values"},
      {"name:", "1: name", "no value"},
      {"count: 1\nname: a\ncount: 2", "3: count", "given twice (also on line 1)"},
      {"config: other.yaml", "1: config", "cannot be set in a configuration file"},
      {"help: true", "1: help", "cannot be set in a configuration file"},
      {"- name\n- count", "1", "expected KEY: VALUE lines, not a list"},
      {"just text", "1", "expected KEY: VALUE lines"},
      {"name: a\ncount: [1, 2\n", "3", "not YAML"},
      {"name: a\n---\ncount: 2", "3", "one YAML document only"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.yaml);
    std::string msg = error_of(c.yaml);
    std::string expected = (dir_ / "prog.yaml").string() + ":" + c.where + ":";
    EXPECT_EQ(msg.rfind(expected, 0), 0u) << msg << "\n  expected to start with " << expected;
    EXPECT_NE(msg.find(c.what), std::string::npos) << msg << "\n  expected to contain " << c.what;
  }
}

TEST_F(YamlOptionsTest, RequiredOptionsMayComeFromTheFile) {
  auto make = [](std::string* value) {
    auto app = std::make_unique<CLI::App>("required");
    app->add_option("--must", *value, "Required")->required();
    return app;
  };
  std::string value;
  auto app = make(&value);
  YamlOptions file(*app, write("must: here", "req.yaml"));
  const char* argv[] = {"prog"};
  file.parse(1, argv);
  EXPECT_EQ(value, "here");

  std::string none;
  auto app2 = make(&none);
  YamlOptions file2(*app2, (dir_ / "absent.yaml").string());
  EXPECT_THROW(file2.parse(1, argv), CLI::RequiredError);
}

// The template lists every key once; uncommenting every key's line as it is sets the defaults.
TEST_F(YamlOptionsTest, TemplateUncommentedGivesTheDefaults) {
  Program p;
  std::string t = config_template(p.app, "# header line\n", [](const std::string& key) {
    return key == "level" ? std::string("(note)") : "";
  });
  EXPECT_EQ(t.rfind("# header line\n", 0), 0u);
  EXPECT_NE(t.find("# One of a set\n# (note)\n#level: info\n"), std::string::npos) << t;
  EXPECT_NE(t.find("#rule: []\n"), std::string::npos) << t;
  EXPECT_NE(t.find("#verbose: false\n"), std::string::npos) << t;
  EXPECT_EQ(t.find("#config:"), std::string::npos) << t;
  EXPECT_EQ(t.find("#help:"), std::string::npos) << t;

  std::string uncommented;
  std::istringstream lines(t);
  std::string line;
  int keys = 0;
  while (std::getline(lines, line)) {
    if (line.size() > 1 && line[0] == '#' && line[1] != ' ') {
      uncommented += line.substr(1) + "\n";
      ++keys;
    }
  }
  EXPECT_EQ(keys, 8);
  Program from_template;
  from_template.parse({"--config", write(uncommented)});
  EXPECT_EQ(from_template.v, Values{});
}

// What effective_config prints reads back as the same settings.
TEST_F(YamlOptionsTest, EffectiveConfigReadsBackTheSame) {
  Program p;
  p.parse({"--config", "", "--name", "a: b", "--count", "3", "--verbose", "--rule", "x", "--rule",
           "true", "--port", "8080", "--level", "debug"});
  std::string text = effective_config(p.app);
  Program again;
  again.parse({"--config", write(text)});
  EXPECT_EQ(again.v, p.v) << text;
}

TEST(YamlScalar, QuotesWhatWouldReadDifferently) {
  EXPECT_EQ(yaml_scalar("plain"), "plain");
  EXPECT_EQ(yaml_scalar("/run/vrdma/vrdmad.sock"), "/run/vrdma/vrdmad.sock");
  EXPECT_EQ(yaml_scalar(""), "\"\"");
  EXPECT_EQ(yaml_scalar("true"), "\"true\"");
  EXPECT_EQ(yaml_scalar("a: b"), "\"a: b\"");
  EXPECT_EQ(yaml_scalar("# x"), "\"# x\"");
}

}  // namespace
}  // namespace vrdma::config
