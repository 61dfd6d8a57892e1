#include "platform/install_paths.h"

#include <unistd.h>

#ifndef VRDMA_LIBDIR
#error "VRDMA_LIBDIR must be defined by the build (directory of the drop-in libraries)"
#endif

namespace vrdma::platform {

namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() > tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace

std::string install_prefix() {
  char self[4096];
  ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return "";
  self[n] = 0;
  std::string dir(self);
  dir.resize(dir.rfind('/'));
  for (const std::string tail : {"/bin", "/sbin", "/libexec/vrdma"})
    if (ends_with(dir, tail)) return dir.substr(0, dir.size() - tail.size());
  return "";
}

std::string installed_lib_dir() {
  const std::string prefix = install_prefix();
  if (!prefix.empty()) {
    std::string dir = prefix + "/lib/vrdma";
    if (::access((dir + "/libibverbs.so.1").c_str(), R_OK) == 0) return dir;
  }
  return VRDMA_LIBDIR;
}

std::string installed_data_dir() {
  const std::string prefix = install_prefix();
  return prefix.empty() ? "" : prefix + "/share/vrdma";
}

}  // namespace vrdma::platform
