// A reload (SIGHUP, `vrdma reload`): vrdmad parses its command line and configuration file
// again, applies the keys that can change while it runs, and reports the others as waiting for
// a restart. A bad file changes nothing: the error (file, line, key) is reported and vrdmad
// goes on with what it had.
//
// What can change at run time is the table of ReloadHooks (reload.cc): one entry per key, with
// the function that applies the key's new value. A key without an entry that changed is logged
// as "needs a restart". To make a setting reloadable, add its entry there.
#pragma once

#include <map>
#include <span>
#include <string>
#include <vector>

#include "daemon/core/daemon.h"
#include "daemon/core/options.h"

namespace vrdma::daemon {

struct ReloadHook {
  const char* key;  // the option's key ("log-level")
  // Applies the new settings' value of `key`, in the daemon's event loop. "" on success, else
  // why it could not (the old value then stays in force).
  std::string (*apply)(Daemon& daemon, const DaemonOptions& now);
};

std::span<const ReloadHook> reload_hooks();
bool reloadable(const std::string& key);

class Reloader {
 public:
  // `args`: vrdmad's command line (argv[0] included); `running`: what it was started with.
  Reloader(std::vector<std::string> args, const DaemonSettings& running);

  // Re-reads the configuration and applies what changed (see above), in the event loop: error 0,
  // or EINVAL when the configuration was refused; one line per change, or the error.
  ReloadOutcome reload(Daemon& daemon);

 private:
  std::vector<std::string> args_;
  std::string file_;  // the file read at start, "" if none
  // Per key, the values in force (given on the command line or in the file; absent: default).
  std::map<std::string, std::vector<std::string>> in_force_;
};

}  // namespace vrdma::daemon
