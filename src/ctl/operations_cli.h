// vrdma status, reload, demo and bench: looking at vrdmad, reconfiguring it, measuring it.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>

namespace vrdma::ctl {

class OperationsCommands {
 public:
  // Adds `vrdma status`, `reload`, `demo` and `bench` to `app`; lives until run().
  explicit OperationsCommands(CLI::App& app);
  ~OperationsCommands();

  bool parsed() const;
  int run() const;

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace vrdma::ctl
