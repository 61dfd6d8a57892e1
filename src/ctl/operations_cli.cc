#include "ctl/operations_cli.h"

#include "ctl/qos_cmd.h"
#include "ctl/reload_cmd.h"
#include "ctl/script_cmd.h"
#include "ctl/status_cmd.h"
#include "ctl/top_cmd.h"

namespace vrdma::ctl {

struct OperationsCommands::State {
  StatusOptions status_opts, reload_opts;
  TopOptions top_opts;
  QosOptions qos_opts;
  CLI::App* qos = nullptr;
  CLI::App *status = nullptr, *reload = nullptr, *demo = nullptr, *bench = nullptr, *top = nullptr;
};

OperationsCommands::OperationsCommands(CLI::App& app) : s_(std::make_unique<State>()) {
  s_->demo = app.add_subcommand(
      "demo",
      "Run the demo: unmodified ib_write_bw and ib_send_lat between two containers, next to\n"
      "TCP (iperf3, sockperf) between the same containers (needs root)");
  s_->demo->allow_extras();  // passed on to the demo program (vrdma demo --help-demo)
  s_->demo->footer("Docs: docs/getting-started.md#the-demo");

  s_->bench = app.add_subcommand(
      "bench",
      "Run the evaluation suite in a sandbox of its own: vrdma against memcpy, UCX and TCP;\n"
      "writes results.json, report.md and plots (needs root; vrdma bench --help for options)");
  s_->bench->prefix_command();  // every argument goes to bench/suite.py,
  s_->bench->set_help_flag();   // --help included

  s_->status = app.add_subcommand("status", "Show a vrdmad's clients, QPs, MRs and counters");
  auto* host_opt = s_->status->add_option("--host", s_->status_opts.host, "Sandbox host (h1 or 1)");
  auto* socket_opt =
      s_->status->add_option("--socket", s_->status_opts.socket, "vrdmad socket path");
  auto* all_opt = s_->status->add_flag("--all", s_->status_opts.all, "Every sandbox host");
  host_opt->excludes(socket_opt)->excludes(all_opt);
  socket_opt->excludes(all_opt);
  s_->status->add_flag("--json", s_->status_opts.json, "Print the daemon's JSON");
  s_->status->footer(
      "Default socket: $VRDMA_SOCKET, else the sandbox's h0 if a sandbox is up, else\n"
      "/run/vrdma/vrdmad.sock. A sandbox host's daemon (--host, --all or that default) is asked\n"
      "from inside the host's namespace, where root sees every client; from a container\n"
      "(vrdma sandbox exec h0c0 -- vrdma status) it shows that container and its tenant only,\n"
      "with the memory keys of that container's own MRs only. Each container's line 'quota:'\n"
      "shows its use of vrdmad against its quotas (used/limit).\n"
      "Docs: docs/operating.md#watching-a-running-vrdmad");

  s_->top = app.add_subcommand(
      "top", "Watch a vrdmad's containers and links: throughput, message rates, errors, QPs");
  auto* top_host =
      s_->top->add_option("--host", s_->top_opts.daemon.host, "Sandbox host (h1 or 1)");
  auto* top_socket =
      s_->top->add_option("--socket", s_->top_opts.daemon.socket, "vrdmad socket path");
  top_host->excludes(top_socket);
  s_->top->add_option("-d,--interval", s_->top_opts.interval_s, "Seconds between refreshes")
      ->capture_default_str();
  s_->top
      ->add_option("-n,--iterations", s_->top_opts.iterations,
                   "Print this many screens one after another, then exit (batch mode; also "
                   "when stdout is not a terminal, with 1 screen by default)")
      ->check(CLI::Range(1, 1000000));
  s_->top->footer(
      "Per container: processes, QPs (! when one is in ERR), sent and received bytes and\n"
      "messages per second, errors per second and in total; per link to another host: bytes\n"
      "per second each way. From the daemon's status (the same per-QP counters as its\n"
      "metrics endpoint), chosen as for vrdma status. q quits.\n"
      "Docs: docs/operating.md#watching-a-running-vrdmad, docs/metrics.md");
  s_->reload = app.add_subcommand(
      "reload",
      "Make vrdmad re-read its configuration file and apply what can change while it runs;\n"
      "prints what changed (and what needs a restart), or why the file was refused");
  auto* r_host = s_->reload->add_option("--host", s_->reload_opts.host, "Sandbox host (h1 or 1)");
  auto* r_socket = s_->reload->add_option("--socket", s_->reload_opts.socket, "vrdmad socket path");
  auto* r_all = s_->reload->add_flag("--all", s_->reload_opts.all, "Every sandbox host");
  r_host->excludes(r_socket)->excludes(r_all);
  r_socket->excludes(r_all);
  s_->qos = add_qos_command(app, s_->qos_opts);
  s_->reload->footer(
      "The daemon is found as for `vrdma status`. Only the host's administrator may reload (root,\n"
      "or vrdmad's user, in vrdmad's network namespace). Exit status 1 when the file was\n"
      "refused: vrdmad then goes on with what it had. SIGHUP to vrdmad does the same (its log\n"
      "says what changed).\n"
      "Docs: docs/configuration.md#reloading");
}

OperationsCommands::~OperationsCommands() = default;

bool OperationsCommands::parsed() const {
  return s_->status->parsed() || s_->reload->parsed() || s_->demo->parsed() ||
         s_->bench->parsed() || s_->top->parsed() || s_->qos->parsed();
}

int OperationsCommands::run() const {
  if (s_->status->parsed()) return status_command(s_->status_opts);
  if (s_->top->parsed()) return top_command(s_->top_opts);
  if (s_->reload->parsed()) return reload_command(s_->reload_opts);
  if (s_->qos->parsed()) return qos_command(s_->qos_opts);
  if (s_->demo->parsed()) return run_script("bench/demo.py", s_->demo->remaining());
  return run_script("bench/suite.py", s_->bench->remaining());
}

}  // namespace vrdma::ctl
