// vrdma status, demo and bench: looking at vrdmad and measuring it.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>

namespace vrdma::ctl {

class OperationsCommands {
 public:
  // Adds `vrdma status`, `vrdma demo` and `vrdma bench` to `app`; lives until run().
  explicit OperationsCommands(CLI::App& app);
  ~OperationsCommands();

  bool parsed() const;
  int run() const;

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace vrdma::ctl
