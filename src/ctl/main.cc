// vrdma: the command-line tool of vrdma (sandbox test bed, daemon status).
// Exit codes: 0 ok, 1 error, 2 usage; `sandbox exec` passes the command's through.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <iostream>

#include "ctl/error.h"
#include "ctl/platform_cli.h"
#include "ctl/sandbox.h"
#include "ctl/sandbox_state.h"
#include "ctl/script_cmd.h"
#include "ctl/status_cmd.h"

#ifndef VRDMA_VERSION
#define VRDMA_VERSION "unknown"
#endif

namespace {

using namespace vrdma::ctl;

// The deepest subcommand given on the command line (or the app itself).
const CLI::App* deepest(const CLI::App& app) {
  const CLI::App* cur = &app;
  for (auto subs = cur->get_subcommands(); !subs.empty(); subs = cur->get_subcommands())
    cur = subs.front();
  return cur;
}

// "vrdma sandbox up".
std::string command_path(const CLI::App& app) {
  std::string path;
  for (const CLI::App* a = deepest(app); a; a = a->get_parent())
    path = a->get_name() + (path.empty() ? "" : " " + path);
  return path;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"vrdma: software RDMA for containers (control tool)", "vrdma"};
  app.add_flag_callback(
      "--version",
      [] {
        std::cout << "vrdma " VRDMA_VERSION "\n";
        throw CLI::Success();
      },
      "Print the version and exit");
  app.require_subcommand(1);
  app.failure_message([&app](const CLI::App*, const CLI::Error& e) {
    std::string path = command_path(app);
    std::string what = e.what();
    auto extra = deepest(app)->remaining();  // e.g. an unknown subcommand
    if (dynamic_cast<const CLI::RequiredError*>(&e) && !extra.empty())
      what = "unknown command '" + extra.front() + "'";
    if (dynamic_cast<const CLI::ExtrasError*>(&e) && deepest(app)->get_name() == "exec")
      what += " (put -- before the command: vrdma sandbox exec NAME -- CMD ARGS...)";
    return path + ": " + what + "\nRun '" + path + " --help' for more information.\n";
  });

  // vrdma sandbox ...
  CLI::App* sandbox = app.add_subcommand(
      "sandbox",
      "A test bed on this machine: hosts and containers as network namespaces, one "
      "vrdmad per host");
  sandbox->require_subcommand(1);
  sandbox->footer(
      "Hosts are namespaces vrdma-h<i> with bridge vbr0 at 10.77.<i>.1/24; containers are\n"
      "vrdma-h<i>c<j> with eth0 at 10.77.<i>.<10+j>. With several hosts, each host's u0 at\n"
      "10.76.0.<i+1>/24 joins bridge ubr0 (10.76.0.254) of namespace vrdma-net, where the\n"
      "cluster directory (etcd, http://10.76.0.254:2379) runs. State lives in $VRDMA_RUN_DIR\n"
      "(default /run/vrdma); $VRDMA_NETNS_PREFIX replaces the namespaces' \"vrdma-\", so that\n"
      "two sandboxes with different values of both can be up at once. up, down, exec and etcd\n"
      "must run as root.");

  SandboxUpOptions up_opts;
  CLI::App* up =
      sandbox->add_subcommand("up", "Create the namespaces and start one vrdmad per host");
  up->add_option("--hosts", up_opts.hosts, "Number of hosts")
      ->check(CLI::Range(1, kMaxHosts))
      ->capture_default_str();
  up->add_option("--containers", up_opts.containers, "Containers per host")
      ->check(CLI::Range(1, kMaxContainersPerHost))
      ->capture_default_str();
  up->add_option("--log-level", up_opts.log_level, "Passed to every vrdmad as --log-level");
  up->add_option("--tenant", up_opts.tenants,
                 "NAME=CIDR, passed to every vrdmad as --tenant (repeatable)");
  up->add_option("--directory", up_opts.directory,
                 "How the hosts find each other: etcd (default with --hosts > 1) or embedded "
                 "(every vrdmad gets the other hosts as --peer)")
      ->check(CLI::IsMember({kDirectoryEtcd, kDirectoryEmbedded}));
  up->add_flag("--router-plaintext", up_opts.router_plaintext,
               "With --hosts > 1: routers link without TLS (INSECURE; to measure what TLS costs)");
  up->footer(
      "vrdmad is $VRDMA_DAEMON, else next to this vrdma, else ../sbin/vrdmad or\n"
      "../daemon/vrdmad from it, else on PATH. Each logs to <run dir>/h<i>/vrdmad.log and\n"
      "listens on <run dir>/h<i>/vrdmad.sock (run dir: $VRDMA_RUN_DIR, default /run/vrdma).\n"
      "With --hosts > 1 each vrdmad also gets --host-id i, --router-listen 10.76.0.<i+1>:7471,\n"
      "--pod-cidr 10.77.<i>.0/24, --directory etcd://10.76.0.254:2379 and its certificate\n"
      "(--tls-ca, --tls-cert, --tls-key from <run dir>/pki, made with openssl; the routers\n"
      "link over mutual TLS), and iptables in each host drops the containers' packets to the\n"
      "router port 7471; that etcd\n"
      "($VRDMA_ETCD, else etcd on PATH) runs in vrdma-net with its data and etcd.log in\n"
      "<run dir>/etcd. A single host runs without a directory, as always.");

  CLI::App* down = sandbox->add_subcommand(
      "down", "Stop the daemons and every process in the sandbox, delete its namespaces");
  down->footer(
      "Deletes every namespace named like a sandbox's (vrdma-h<i>, vrdma-h<i>c<j>, vrdma-net),\n"
      "so it works after a crash (no state file), and says so when nothing is up. Stops the\n"
      "sandbox's etcd (if it still runs) and removes its data.");

  bool list_json = false;
  CLI::App* list = sandbox->add_subcommand("list", "Show hosts and containers, and what is alive");
  list->add_flag("--json", list_json, "Print the state file (sandbox.json)");

  std::string exec_name;
  std::vector<std::string> exec_command;
  bool exec_no_lib = false;
  CLI::App* exec = sandbox->add_subcommand(
      "exec", "Run a command inside a container's or host's network namespace");
  exec->add_option("name", exec_name, "Container (h0c1) or host (h0)")->required();
  exec->add_option("command", exec_command, "The command and its arguments (after --)")->required();
  exec->add_flag("--no-lib", exec_no_lib,
                 "Leave LD_LIBRARY_PATH alone (run without the drop-in libraries)");
  exec->footer(
      "Example: vrdma sandbox exec h0c0 -- ib_write_bw 10.77.0.11\n"
      "Sets VRDMA_SOCKET to the host's vrdmad socket, VRDMA_SANDBOX_NAME to NAME, and puts\n"
      "$VRDMA_LIBDIR (default " VRDMA_LIBDIR
      ") first in LD_LIBRARY_PATH. The exit status is\n"
      "the command's (127 if it is not found).");

  CLI::App* etcd = sandbox->add_subcommand(
      "etcd", "Stop or start the etcd of a multi-host sandbox (to test a directory outage)");
  etcd->require_subcommand(1);
  CLI::App* etcd_stop = etcd->add_subcommand(
      "stop", "Stop etcd (SIGTERM) and wait until it has exited; its data is kept");
  CLI::App* etcd_start = etcd->add_subcommand(
      "start", "Start etcd again on the same data directory and wait until it answers");
  etcd->footer(
      "The daemons keep running: while etcd is down they cannot resolve other hosts' addresses,\n"
      "and once it is back they publish their entries again. Both are no-ops (exit 0) when\n"
      "etcd is already stopped or running; a sandbox without etcd is an error.");

  // vrdma status
  StatusOptions status_opts;
  CLI::App* demo = app.add_subcommand(
      "demo",
      "Run the demo: unmodified ib_write_bw and ib_send_lat between two containers, next to\n"
      "TCP (iperf3, sockperf) between the same containers (needs root)");
  demo->allow_extras();  // passed on to the demo program (vrdma demo --help-demo)

  CLI::App* bench = app.add_subcommand(
      "bench",
      "Run the evaluation suite in a sandbox of its own: vrdma against memcpy, UCX and TCP;\n"
      "writes results.json, report.md and plots (needs root; vrdma bench --help for options)");
  bench->prefix_command();  // every argument goes to bench/suite.py,
  bench->set_help_flag();   // --help included

  CLI::App* status = app.add_subcommand("status", "Show a vrdmad's clients, QPs, MRs and counters");
  auto* host_opt = status->add_option("--host", status_opts.host, "Sandbox host (h1 or 1)");
  auto* socket_opt = status->add_option("--socket", status_opts.socket, "vrdmad socket path");
  auto* all_opt = status->add_flag("--all", status_opts.all, "Every sandbox host");
  host_opt->excludes(socket_opt)->excludes(all_opt);
  socket_opt->excludes(all_opt);
  status->add_flag("--json", status_opts.json, "Print the daemon's JSON");
  status->footer(
      "Default socket: $VRDMA_SOCKET, else the sandbox's h0 if a sandbox is up, else\n"
      "/run/vrdma/vrdmad.sock. A sandbox host's daemon (--host, --all or that default) is asked\n"
      "from inside the host's namespace, where root sees every client; from a container\n"
      "(vrdma sandbox exec h0c0 -- vrdma status) it shows that container's tenant only.");

  PlatformCommands platform(app);  // vrdma edits, cdi, device-plugin

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? kExitOk : kExitUsage;
  }

  if ((up->parsed() || down->parsed() || exec->parsed() || etcd->parsed()) &&
      ::geteuid() != 0) {
    std::cerr << "vrdma sandbox: must run as root\n";
    return kExitError;
  }
  try {
    if (up->parsed()) return sandbox_up(up_opts);
    if (down->parsed()) return sandbox_down();
    if (list->parsed()) return sandbox_list(list_json);
    if (exec->parsed()) return sandbox_exec(exec_name, exec_command, exec_no_lib);
    if (etcd_stop->parsed()) return sandbox_etcd_stop();
    if (etcd_start->parsed()) return sandbox_etcd_start();
    if (status->parsed()) return status_command(status_opts);
    if (platform.parsed()) return platform.run();
    if (demo->parsed()) return run_script("bench/demo.py", demo->remaining());
    if (bench->parsed()) return run_script("bench/suite.py", bench->remaining());
  } catch (const UsageError& e) {
    std::cerr << command_path(app) << ": " << e.what() << "\n";
    return kExitUsage;
  } catch (const std::exception& e) {
    std::cerr << command_path(app) << ": " << e.what() << "\n";
    return kExitError;
  }
  return kExitUsage;
}
