// Where an installed vrdma keeps its parts, found from the running program's own path, so that
// one build serves any prefix (/usr from the Debian package, /usr/local from `cmake --install`):
//
//   <prefix>/bin/vrdma   <prefix>/sbin/vrdmad   <prefix>/libexec/vrdma/ (device plugin, helpers)
//   <prefix>/lib/vrdma/  (the drop-in libraries)   <prefix>/share/vrdma/ (scripts, Python)
#pragma once

#include <string>

namespace vrdma::platform {

// The prefix of the running program's install layout, "" when it is not installed (a build
// tree, a copy elsewhere).
std::string install_prefix();

// <prefix>/lib/vrdma when the running program is installed and that directory holds the
// drop-in libibverbs.so.1; else the build's configured directory (VRDMA_LIBDIR).
std::string installed_lib_dir();

// <prefix>/share/vrdma when the running program is installed, else "".
std::string installed_data_dir();

}  // namespace vrdma::platform
