// vrdma qos: the QoS rules of a vrdmad's router (the Qos request), set at run time and shown
// with each container's counters.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "ctl/status_cmd.h"

namespace vrdma::ctl {

struct QosOptions {
  StatusOptions daemon;
  std::vector<std::string> rules;  // set: applied in order
  bool json = false;               // show: the counters as JSON
  CLI::App *set = nullptr, *show = nullptr;
};

CLI::App* add_qos_command(CLI::App& app, QosOptions& o);
// Exit status 0, or 1 when a daemon refused a rule or the request.
int qos_command(const QosOptions& o);

}  // namespace vrdma::ctl
