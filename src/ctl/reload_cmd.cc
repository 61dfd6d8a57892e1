#include "ctl/reload_cmd.h"

#include <iostream>

#include "ctl/daemon_client.h"
#include "ctl/error.h"

namespace vrdma::ctl {

int reload_command(const StatusOptions& o) {
  std::vector<Target> targets = choose_targets(o);
  int rc = kExitOk;
  for (const Target& t : targets) {
    const std::string label = targets.size() > 1 ? t.label + ": " : "";
    try {
      std::optional<ScopedNetns> in_host;
      enter_host_of(t, in_host);
      DaemonClient client(t.socket);
      std::string text = client.reload();
      // One line per change; prefixed with the host when there are several.
      size_t start = 0;
      while (start < text.size()) {
        size_t end = text.find('\n', start);
        if (end == std::string::npos) end = text.size();
        std::cout << label << text.substr(start, end - start) << "\n";
        start = end + 1;
      }
    } catch (const Error& e) {
      if (targets.size() == 1) throw;
      std::cerr << "vrdma reload: " << t.label << ": " << e.what() << "\n";
      rc = kExitError;
    }
  }
  return rc;
}

}  // namespace vrdma::ctl
