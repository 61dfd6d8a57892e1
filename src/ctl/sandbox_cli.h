// vrdma sandbox: the test bed's subcommands (up, down, list, exec, etcd).
#pragma once

#include <CLI/CLI.hpp>
#include <memory>

namespace vrdma::ctl {

class SandboxCommands {
 public:
  // Adds `vrdma sandbox ...` to `app`; the object must live until run().
  explicit SandboxCommands(CLI::App& app);
  ~SandboxCommands();

  bool parsed() const;      // one of them was given
  bool needs_root() const;  // the one given changes namespaces or processes
  int run() const;          // runs it; exit code

  struct State;  // the options and subcommands, filled by CLI11

 private:
  std::unique_ptr<State> s_;
};

}  // namespace vrdma::ctl
