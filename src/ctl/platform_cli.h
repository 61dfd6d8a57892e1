// The command line of vrdma's platform commands: `vrdma edits`, `vrdma cdi generate|list|hook`
// and `vrdma device-plugin`.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>

namespace vrdma::ctl {

class PlatformCommands {
 public:
  // Adds the subcommands to `app`; the object must live until run().
  explicit PlatformCommands(CLI::App& app);
  ~PlatformCommands();

  bool parsed() const;  // one of them was given
  int run() const;      // runs it; exit code

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace vrdma::ctl
