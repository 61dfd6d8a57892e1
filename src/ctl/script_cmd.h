// Subcommands implemented as Python programs shipped with vrdma (demo).
#pragma once

#include <string>
#include <vector>

namespace vrdma::ctl {

// Runs share/vrdma/<script> (or the source tree's copy) with python3,
// replacing this process. Returns only on failure (exit code).
int run_script(const std::string& script, const std::vector<std::string>& args);

}  // namespace vrdma::ctl
