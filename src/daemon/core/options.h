// vrdmad's options: the one table of them (add_options). The command line, the configuration
// file (/etc/vrdma/vrdmad.yaml: one key per option, the option's name without "--"),
// `vrdmad --print-config-template` and what a reload compares all come from it, so an option
// added here is a key of the file without further code.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "config/yaml_options.h"
#include "daemon/core/config.h"

namespace vrdma::daemon {

inline constexpr const char* kDefaultConfigFile = "/etc/vrdma/vrdmad.yaml";

// What the options say, before apply_options() checks and completes it.
struct DaemonOptions {
  DaemonConfig cfg;
  std::vector<std::string> tenants;    // NAME=CIDR
  std::vector<std::string> allow;      // FROM->TO
  std::vector<std::string> pod_cidrs;  // CIDR
  std::vector<std::string> qos;        // container=IP:... / tenant=NAME:... (qos/rules.h)
  std::string router_cpus;             // CPU list (common/cpu_list.h); "": any
  std::string log_level = "info";
  bool no_peer_pidfd = false;
  bool no_direct_path = false;
  bool operator==(const DaemonOptions&) const = default;
};

// The key of the quota option of `r` ("max-qps-per-container").
std::string quota_option(Resource r);

// Adds every option of vrdmad to `app`, bound to `opts`.
void add_options(CLI::App& app, DaemonOptions& opts);

// Checks what the options say together and completes opts->cfg (tenants, container networks,
// directory). "" or what is wrong ("--tenant: ...").
std::string check_options(DaemonOptions* opts);

// vrdmad's command line and the configuration file it names, parsed into DaemonOptions.
class DaemonSettings {
 public:
  DaemonSettings();
  DaemonSettings(const DaemonSettings&) = delete;
  DaemonSettings& operator=(const DaemonSettings&) = delete;

  // Throws CLI::ParseError (CLI::CallForHelp for --help, CLI::ConfigError for a bad file).
  void parse(int argc, const char* const* argv);

  CLI::App& app() { return app_; }
  const CLI::App& app() const { return app_; }
  DaemonOptions& options() { return opts_; }
  const std::string& file() const { return file_.file(); }
  bool print_template() const { return print_template_; }
  bool print_config() const { return print_config_; }

 private:
  CLI::App app_;
  DaemonOptions opts_;
  bool print_template_ = false;
  bool print_config_ = false;
  config::YamlOptions file_;
};

// The annotated example configuration file (installed as /etc/vrdma/vrdmad.yaml): every key
// commented out with its default. `reloadable(key)` tells which keys a reload applies.
std::string config_file_template(const CLI::App& app);

}  // namespace vrdma::daemon
