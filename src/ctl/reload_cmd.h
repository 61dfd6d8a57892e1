// vrdma reload: makes vrdmad re-read its configuration file (the Reload request).
#pragma once

#include "ctl/status_cmd.h"

namespace vrdma::ctl {

// Reloads the daemon(s) `o` chooses (as for vrdma status) and prints what changed. Exit
// status: 0, or 1 when a daemon refused (bad file, not the host's administrator).
int reload_command(const StatusOptions& o);

}  // namespace vrdma::ctl
