#include "ctl/reload_cmd.h"

#include <iostream>

#include "ctl/daemon_client.h"
#include "ctl/status_cmd.h"

namespace vrdma::ctl {

int reload_command(const StatusOptions& o) {
  // One line per change; prefixed with the host when there are several.
  return for_each_daemon(o, "reload", [](DaemonClient& client, const std::string& label) {
    print_lines(std::cout, label, client.reload());
  });
}

}  // namespace vrdma::ctl
