// A YAML configuration file for a CLI11 program: every option of its CLI::App is a key of the
// file, named as the option without its leading "--" (`router-listen: 10.76.0.1:7471`), so an
// option added to the program is a key without further code. Repeatable options take a list
// (`tenant: [a=10.0.0.0/8, b=10.1.0.0/16]`), flags true or false. The command line wins over
// the file (and an option's environment variable, if it has one, too); a repeatable option given
// on the command line replaces the file's list.
//
//   CLI::App app;  ...add_option(...)...
//   config::YamlOptions file(app, "/etc/prog/prog.yaml");   // adds --config FILE
//   try { file.parse(argc, argv); } catch (const CLI::ParseError& e) { return app.exit(e); }
//
// --config FILE names the file: a missing FILE is an error, a missing default file is not,
// `--config ''` reads none. A file that names an unknown key, gives a key a value of the wrong
// shape (a list or a map where one value goes), a value its option cannot convert or its
// validator refuses, or a key twice, is refused with a CLI::ConfigError that names the file,
// the line and the key: "/etc/prog/prog.yaml:3: host-id: 'abc' is not a UINT".
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace vrdma::config {

class YamlOptions {
 public:
  // Adds --config FILE to `app`, whose options must all be added before parse().
  YamlOptions(CLI::App& app, std::string default_path);

  // Parses the command line into `app` (throws what CLI::App::parse throws, --help included),
  // then the configuration file into the options the command line did not set (throws
  // CLI::ConfigError). Required options may come from either.
  void parse(int argc, const char* const* argv);

  // The file read by parse(), "" if none.
  const std::string& file() const { return file_; }
  CLI::Option* option() const { return option_; }

 private:
  void apply_file(const std::string& path);

  CLI::App& app_;
  std::string default_path_;
  std::string given_path_;
  std::string file_;
  CLI::Option* option_ = nullptr;
};

// The key of an option in the file ("host-id" for --host-id); "" for options that have none
// (no long name, or not configurable, such as --help and --config).
std::string key_of(const CLI::Option& option);

// Whether the key takes a list (the option may be given several times).
bool takes_list(const CLI::Option& option);

// The annotated example file: `header` (lines of comments), then every key of `app`, commented
// out, with its option's description, `note(key)` when that is not empty, and its default.
// Uncommenting a key's line as it is sets the key to its default.
std::string config_template(const CLI::App& app, const std::string& header,
                            const std::function<std::string(const std::string& key)>& note = {});

// After parsing: every key with the values given to it (command line, environment or file);
// keys left at their defaults are absent.
std::map<std::string, std::vector<std::string>> given_values(const CLI::App& app);

// After parsing: every key with its value, given or default, as a YAML file.
std::string effective_config(const CLI::App& app);

// One value as a YAML scalar, quoted when plain text would read differently.
std::string yaml_scalar(const std::string& value);

}  // namespace vrdma::config
