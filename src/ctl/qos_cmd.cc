#include "ctl/qos_cmd.h"

#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "ctl/daemon_client.h"

namespace vrdma::ctl {

namespace {

void add_target_options(CLI::App* cmd, StatusOptions& d) {
  auto* host = cmd->add_option("--host", d.host, "Sandbox host (h1 or 1)");
  auto* socket = cmd->add_option("--socket", d.socket, "vrdmad socket path");
  auto* all = cmd->add_flag("--all", d.all, "Every sandbox host");
  host->excludes(socket)->excludes(all);
  socket->excludes(all);
}

std::string rate_text(uint64_t v, const char* unit) {
  if (!v) return "-";
  char buf[32];
  if (v >= 1'000'000'000)
    snprintf(buf, sizeof(buf), "%.3gG%s", double(v) / 1e9, unit);
  else if (v >= 1'000'000)
    snprintf(buf, sizeof(buf), "%.3gM%s", double(v) / 1e6, unit);
  else if (v >= 1000)
    snprintf(buf, sizeof(buf), "%.3gk%s", double(v) / 1e3, unit);
  else
    snprintf(buf, sizeof(buf), "%llu%s", static_cast<unsigned long long>(v), unit);
  return buf;
}

// The rules, then per container and class its share, limits and counters.
void show(DaemonClient& client, const std::string& label, bool json) {
  std::string rules = client.qos("");
  auto status = nlohmann::json::parse(client.status(), nullptr, false);
  const auto flows =
      status.is_object() && status.contains("qos") ? status["qos"] : nlohmann::json::array();
  if (json) {
    std::cout << nlohmann::json{{"rules", rules}, {"flows", flows}}.dump() << "\n";
    return;
  }
  std::cout << label << "rules:" << (rules.empty() ? " none (equal weights, no limits)" : "")
            << "\n";
  print_lines(std::cout, label + "  ", rules);
  char line[256];
  snprintf(line, sizeof(line), "%-15s %-12s %-7s %6s %9s %9s %14s %10s %10s %10s %7s", "container",
           "tenant", "class", "weight", "rate", "msgs/s", "bytes", "messages", "delay avg",
           "delay max", "holds");
  std::cout << label << line << "\n";
  for (const auto& f : flows) {
    snprintf(line, sizeof(line), "%-15s %-12s %-7s %6u %9s %9s %14llu %10llu %8.1fus %8.1fus %7llu",
             f.value("container", "").c_str(), f.value("tenant", "").c_str(),
             f.value("class", "").c_str(), f.value("weight", 1u),
             rate_text(f.value("rate", uint64_t(0)), "B").c_str(),
             rate_text(f.value("msgs_rate", uint64_t(0)), "").c_str(),
             static_cast<unsigned long long>(f.value("bytes", uint64_t(0))),
             static_cast<unsigned long long>(f.value("msgs", uint64_t(0))),
             double(f.value("delay_ns_avg", uint64_t(0))) / 1e3,
             double(f.value("delay_ns_max", uint64_t(0))) / 1e3,
             static_cast<unsigned long long>(f.value("holds", uint64_t(0))));
    std::cout << label << line << "\n";
  }
}

}  // namespace

CLI::App* add_qos_command(CLI::App& app, QosOptions& o) {
  CLI::App* qos = app.add_subcommand(
      "qos",
      "Quality of service on a vrdmad's router: weights and rate limits of containers\n"
      "and tenants between hosts, and what each container sent");
  qos->require_subcommand(1);
  o.set = qos->add_subcommand("set", "Apply QoS rules at once (until vrdmad restarts or reloads)");
  o.set
      ->add_option("rule", o.rules,
                   "container=IPV4[:weight=W,rate=BYTES/S,msgs=MSGS/S] or tenant=NAME[:...]; "
                   "a rule without values puts the defaults back (weight 1, no limit)")
      ->required();
  add_target_options(o.set, o.daemon);
  o.show = qos->add_subcommand("show", "Show the rules in force and each container's counters");
  o.show->add_flag("--json", o.json, "Print the rules and counters as JSON");
  add_target_options(o.show, o.daemon);
  qos->footer(
      "The daemon is found as for `vrdma status`; only the host's administrator may use this\n"
      "(root, or vrdmad's user, in vrdmad's network namespace). Numbers take k, M, G (powers\n"
      "of 1000); rate is in bytes per second. vrdmad's --qos option (or the qos key of its\n"
      "configuration file) gives the rules at start and on reload.\n"
      "Docs: docs/qos.md");
  o.set->footer("Docs: docs/qos.md#between-hosts");
  o.show->footer("Docs: docs/qos.md#between-hosts");
  return qos;
}

int qos_command(const QosOptions& o) {
  return for_each_daemon(o.daemon, "qos", [&o](DaemonClient& client, const std::string& label) {
    if (o.set->parsed()) {
      std::string text;
      for (const auto& r : o.rules) text = client.qos(r);
      std::cout << text;
    } else {
      show(client, label, o.json);
    }
  });
}

}  // namespace vrdma::ctl
