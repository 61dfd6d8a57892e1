#include "ctl/sandbox_cli.h"

#include "ctl/sandbox.h"
#include "ctl/sandbox_state.h"

namespace vrdma::ctl {

struct SandboxCommands::State {
  SandboxUpOptions up_opts;
  bool list_json = false;
  std::string exec_name;
  std::vector<std::string> exec_command;
  bool exec_no_lib = false;
  CLI::App *up = nullptr, *down = nullptr, *list = nullptr, *exec = nullptr, *etcd = nullptr,
           *etcd_stop = nullptr, *etcd_start = nullptr, *etcd_get = nullptr;
  std::string etcd_prefix = "/vrdma/";
};

namespace {

void add_up(CLI::App* sandbox, SandboxCommands::State& s) {
  s.up = sandbox->add_subcommand("up", "Create the namespaces and start one vrdmad per host");
  s.up->add_option("--hosts", s.up_opts.hosts, "Number of hosts")
      ->check(CLI::Range(1, kMaxHosts))
      ->capture_default_str();
  s.up->add_option("--containers", s.up_opts.containers, "Containers per host")
      ->check(CLI::Range(1, kMaxContainersPerHost))
      ->capture_default_str();
  s.up->add_option("--log-level", s.up_opts.log_level, "Passed to every vrdmad as --log-level");
  s.up->add_option("--tenant", s.up_opts.tenants,
                   "NAME=CIDR, passed to every vrdmad as --tenant (repeatable). Without any, "
                   "every container of the sandbox is in one tenant, \"sandbox\"; with some, "
                   "only they count: a container no rule covers is a tenant of its own");
  s.up->add_option("--daemon-arg", s.up_opts.daemon_args,
                   "One more vrdmad option for every host, e.g. "
                   "--daemon-arg=--max-qps-per-container=64 (repeatable)")
      ->allow_extra_args(false);
  s.up->add_option("--directory", s.up_opts.directory,
                   "How the hosts find each other: etcd (default with --hosts > 1) or embedded "
                   "(every vrdmad gets the other hosts as --peer)")
      ->check(CLI::IsMember({kDirectoryEtcd, kDirectoryEmbedded}));
  s.up->add_flag("--router-plaintext", s.up_opts.router_plaintext,
                 "With --hosts > 1: routers link without TLS (INSECURE; to measure what TLS "
                 "costs)");
  s.up->footer(
      "vrdmad is $VRDMA_DAEMON, else next to this vrdma, else ../sbin/vrdmad or\n"
      "../daemon/vrdmad from it, else on PATH. Each logs to <run dir>/h<i>/vrdmad.log and\n"
      "listens on <run dir>/h<i>/vrdmad.sock (run dir: $VRDMA_RUN_DIR, default /run/vrdma).\n"
      "With --hosts > 1 each vrdmad also gets --host-id i, --router-listen 10.76.0.<i+1>:7471,\n"
      "--pod-cidr 10.77.<i>.0/24, --directory etcd://10.76.0.254:2379 and --tls-ca,\n"
      "--tls-cert, --tls-key from the sandbox's PKI (<run dir>/pki: a CA, a certificate per\n"
      "host, etcd's and etcd root's; the routers link over mutual TLS with them), and iptables\n"
      "in each host drops the containers' packets to the router port 7471. That etcd\n"
      "($VRDMA_ETCD, else etcd on PATH) runs in vrdma-net with TLS, client certificates and\n"
      "auth (a user and role per host), its data and etcd.log in <run dir>/etcd. A single host\n"
      "runs without a directory, as always.\n"
      "Tenants: vrdmad gives containers a device each in a tenant of its own; the sandbox\n"
      "declares one tenant for all its containers (--tenant sandbox=<their addresses>) unless\n"
      "--tenant rules are given. The hosts' own processes get no device.\n"
      "Docs: docs/getting-started.md#what-it-builds");
}

void add_down_and_list(CLI::App* sandbox, SandboxCommands::State& s) {
  s.down = sandbox->add_subcommand(
      "down", "Stop the daemons and every process in the sandbox, delete its namespaces");
  s.down->footer(
      "Deletes every namespace named like a sandbox's (vrdma-h<i>, vrdma-h<i>c<j>, vrdma-net),\n"
      "so it works after a crash (no state file), and says so when nothing is up. Stops the\n"
      "sandbox's etcd (if it still runs) and removes its data.\n"
      "Docs: docs/getting-started.md#commands");

  s.list = sandbox->add_subcommand("list", "Show hosts and containers, and what is alive");
  s.list->add_flag("--json", s.list_json, "Print the state file (sandbox.json)");
  s.list->footer("Docs: docs/getting-started.md#commands");
}

void add_exec(CLI::App* sandbox, SandboxCommands::State& s) {
  s.exec = sandbox->add_subcommand(
      "exec", "Run a command inside a container's or host's network namespace");
  s.exec->add_option("name", s.exec_name, "Container (h0c1) or host (h0)")->required();
  s.exec->add_option("command", s.exec_command, "The command and its arguments (after --)")
      ->required();
  s.exec->add_flag("--no-lib", s.exec_no_lib,
                   "Leave LD_LIBRARY_PATH alone (run without the drop-in libraries)");
  s.exec->footer(
      "Example: vrdma sandbox exec h0c0 -- ib_write_bw 10.77.0.11\n"
      "Sets VRDMA_SOCKET to the host's vrdmad socket, VRDMA_SANDBOX_NAME to NAME, and puts\n"
      "$VRDMA_LIBDIR (default: lib/vrdma of this vrdma's install prefix, else " VRDMA_LIBDIR
      ")\nfirst in LD_LIBRARY_PATH. The exit status is the command's (127 if it is not found).\n"
      "Docs: docs/getting-started.md#commands");
}

void add_etcd(CLI::App* sandbox, SandboxCommands::State& s) {
  s.etcd = sandbox->add_subcommand(
      "etcd",
      "Stop or start the etcd of a multi-host sandbox (to test a directory outage), or read it");
  s.etcd->require_subcommand(1);
  s.etcd_stop = s.etcd->add_subcommand(
      "stop", "Stop etcd (SIGTERM) and wait until it has exited; its data is kept");
  s.etcd_start = s.etcd->add_subcommand(
      "start", "Start etcd again on the same data directory and wait until it answers");
  s.etcd_get = s.etcd->add_subcommand(
      "get", "Print the keys under PREFIX and their values as one JSON object (as etcd's root)");
  s.etcd_get->add_option("prefix", s.etcd_prefix, "Key prefix")->capture_default_str();
  s.etcd->footer(
      "The daemons keep running: while etcd is down they cannot resolve other hosts' addresses,\n"
      "and once it is back they publish their entries again. Both are no-ops (exit 0) when\n"
      "etcd is already stopped or running; a sandbox without etcd is an error. etcd takes\n"
      "clients on TLS with certificates of the sandbox's CA only (<run dir>/pki), and its auth\n"
      "lets each host (vrdma-host-<i>) write only /vrdma/hosts/<i>/; `get` reads as root.\n"
      "Docs: docs/getting-started.md#commands, docs/cluster.md#the-directorys-etcd");
  s.etcd_stop->footer("Docs: docs/getting-started.md#commands");
  s.etcd_start->footer("Docs: docs/getting-started.md#commands");
  s.etcd_get->footer("Docs: docs/getting-started.md#commands");
}

}  // namespace

SandboxCommands::SandboxCommands(CLI::App& app) : s_(std::make_unique<State>()) {
  CLI::App* sandbox = app.add_subcommand(
      "sandbox",
      "A test bed on this machine: hosts and containers as network namespaces, one "
      "vrdmad per host");
  sandbox->require_subcommand(1);
  sandbox->footer(
      "Hosts are namespaces vrdma-h<i> with bridge vbr0 at 10.77.<i>.1/24; containers are\n"
      "vrdma-h<i>c<j> with eth0 at 10.77.<i>.<10+j>. With several hosts, each host's u0 at\n"
      "10.76.0.<i+1>/24 joins bridge ubr0 (10.76.0.254) of namespace vrdma-net, where the\n"
      "cluster directory (etcd, https://10.76.0.254:2379) runs. State lives in $VRDMA_RUN_DIR\n"
      "(default /run/vrdma); $VRDMA_NETNS_PREFIX replaces the namespaces' \"vrdma-\", so that\n"
      "two sandboxes with different values of both can be up at once. up, down, exec and etcd\n"
      "must run as root.\n"
      "Docs: docs/getting-started.md#the-sandbox");
  add_up(sandbox, *s_);
  add_down_and_list(sandbox, *s_);
  add_exec(sandbox, *s_);
  add_etcd(sandbox, *s_);
}

SandboxCommands::~SandboxCommands() = default;

bool SandboxCommands::parsed() const {
  return s_->up->parsed() || s_->down->parsed() || s_->list->parsed() || s_->exec->parsed() ||
         s_->etcd->parsed();
}

bool SandboxCommands::needs_root() const {
  return s_->up->parsed() || s_->down->parsed() || s_->exec->parsed() || s_->etcd->parsed();
}

int SandboxCommands::run() const {
  if (s_->up->parsed()) return sandbox_up(s_->up_opts);
  if (s_->down->parsed()) return sandbox_down();
  if (s_->list->parsed()) return sandbox_list(s_->list_json);
  if (s_->exec->parsed()) return sandbox_exec(s_->exec_name, s_->exec_command, s_->exec_no_lib);
  if (s_->etcd_stop->parsed()) return sandbox_etcd_stop();
  if (s_->etcd_get->parsed()) return sandbox_etcd_get(s_->etcd_prefix);
  return sandbox_etcd_start();
}

}  // namespace vrdma::ctl
