// vrdma: the command-line tool of vrdma (sandbox test bed, daemon status).
// Exit codes: 0 ok, 1 error, 2 usage; `sandbox exec` passes the command's through.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <iostream>

#include "ctl/error.h"
#include "ctl/operations_cli.h"
#include "ctl/platform_cli.h"
#include "ctl/sandbox_cli.h"

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
  app.footer(
      "Docs: docs/README.md, by task (in the source tree; installed in share/doc/vrdma/docs of\n"
      "vrdma's prefix): sandbox and demo in docs/getting-started.md, bench in\n"
      "docs/performance.md, status, top and reload in docs/operating.md, qos in docs/qos.md,\n"
      "edits, cdi and device-plugin in docs/containers.md. Each command's --help names its page;\n"
      "man vrdma holds them all, man vrdmad the daemon's options.");
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

  SandboxCommands sandbox(app);        // vrdma sandbox ...
  OperationsCommands operations(app);  // vrdma status, demo, bench
  PlatformCommands platform(app);      // vrdma edits, cdi, device-plugin

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? kExitOk : kExitUsage;
  }

  if (sandbox.needs_root() && ::geteuid() != 0) {
    std::cerr << "vrdma sandbox: must run as root\n";
    return kExitError;
  }
  try {
    if (sandbox.parsed()) return sandbox.run();
    if (operations.parsed()) return operations.run();
    if (platform.parsed()) return platform.run();
  } catch (const UsageError& e) {
    std::cerr << command_path(app) << ": " << e.what() << "\n";
    return kExitUsage;
  } catch (const std::exception& e) {
    std::cerr << command_path(app) << ": " << e.what() << "\n";
    return kExitError;
  }
  return kExitUsage;
}
