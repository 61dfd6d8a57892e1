// vrdma top: a vrdmad's containers and links, refreshed in the terminal (like top/iftop).
#pragma once

#include "ctl/status_cmd.h"

namespace vrdma::ctl {

struct TopOptions {
  StatusOptions daemon;   // which vrdmad (--host, --socket); never --all
  double interval_s = 1;  // between refreshes
  int iterations = 0;     // > 0: print that many screens one after another and exit (batch)
};

int top_command(const TopOptions& options);

}  // namespace vrdma::ctl
