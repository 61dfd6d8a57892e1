#include "ctl/script_cmd.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>

#include "ctl/error.h"
#include "platform/install_paths.h"

#ifndef VRDMA_DATADIR
#error "VRDMA_DATADIR must be defined by the build"
#endif
#ifndef VRDMA_SOURCE_DIR
#error "VRDMA_SOURCE_DIR must be defined by the build"
#endif

namespace vrdma::ctl {

int run_script(const std::string& script, const std::vector<std::string>& args) {
  std::vector<std::string> dirs;
  if (const char* env = ::getenv("VRDMA_DATADIR"); env && *env) dirs.push_back(env);
  // An installed vrdma runs its own prefix's scripts, then the configured ones.
  if (std::string own = platform::installed_data_dir(); !own.empty()) dirs.push_back(own);
  dirs.push_back(VRDMA_DATADIR);
  dirs.push_back(VRDMA_SOURCE_DIR);
  std::string path;
  for (const auto& d : dirs) {
    std::string p = d + "/" + script;
    if (::access(p.c_str(), R_OK) == 0) {
      path = p;
      break;
    }
  }
  if (path.empty()) {
    std::string where;
    for (const auto& d : dirs) where += (where.empty() ? "" : ", ") + d;
    std::cerr << "vrdma: " << script << " not found in " << where << "\n";
    return kExitError;
  }
  // Let the script find this very vrdma (and so the matching vrdmad).
  char self[4096];
  ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n > 0 && !::getenv("VRDMA_BIN")) {
    self[n] = 0;
    ::setenv("VRDMA_BIN", self, 1);
  }
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>("python3"));
  argv.push_back(path.data());
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  ::execvp("python3", argv.data());
  std::cerr << "vrdma: cannot run python3: " << strerror(errno) << "\n";
  return kExitError;
}

}  // namespace vrdma::ctl
