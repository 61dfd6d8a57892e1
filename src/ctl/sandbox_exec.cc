// vrdma sandbox exec
#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>

#include "common/protocol.h"
#include "ctl/error.h"
#include "ctl/netns.h"
#include "ctl/sandbox.h"

#ifndef VRDMA_LIBDIR
#error "VRDMA_LIBDIR must be defined by the build (directory of the drop-in libraries)"
#endif

namespace vrdma::ctl {

namespace {

inline constexpr const char* kLibDirEnv = "VRDMA_LIBDIR";
inline constexpr const char* kNameEnv = "VRDMA_SANDBOX_NAME";

// $VRDMA_LIBDIR; else, for a vrdma run from its build tree
// (build/src/ctl/vrdma), that build's lib directory; else the installed one.
std::string lib_dir() {
  const char* env = ::getenv(kLibDirEnv);
  if (env && *env) return env;
  char self[4096];
  ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n > 0) {
    self[n] = 0;
    std::string dir(self);
    dir = dir.substr(0, dir.rfind('/'));
    const std::string tail = "/src/ctl";
    if (dir.size() > tail.size() && dir.compare(dir.size() - tail.size(), tail.size(), tail) == 0) {
      std::string build_lib = dir.substr(0, dir.size() - tail.size()) + "/lib";
      if (::access((build_lib + "/libibverbs.so.1").c_str(), R_OK) == 0) return build_lib;
    }
  }
  return VRDMA_LIBDIR;
}

void prepend_library_path(const std::string& dir) {
  const char* old = ::getenv("LD_LIBRARY_PATH");
  std::string value = old && *old ? dir + ":" + old : dir;
  ::setenv("LD_LIBRARY_PATH", value.c_str(), 1);
}

}  // namespace

int sandbox_exec(const std::string& name_arg, const std::vector<std::string>& command,
                 bool no_lib) {
  const std::string dir = run_dir();
  auto sandbox = load_sandbox(dir);
  if (!sandbox) throw Error("no sandbox is up (vrdma sandbox up first)");
  std::string name = name_arg;
  const std::string prefix = netns_prefix();
  if (name.rfind(prefix, 0) == 0) name = name.substr(prefix.size());

  std::string netns, socket;
  if (const SandboxContainer* c = sandbox->container(name)) {
    netns = c->netns;
    socket = c->socket;
  } else if (const SandboxHost* h = sandbox->host(name)) {
    netns = h->netns;
    socket = h->socket;
  } else {
    std::string names;
    for (const auto& n : sandbox->names()) names += " " + n;
    throw UsageError("unknown name '" + name_arg + "'; valid names:" + names);
  }

  enter_netns(netns);
  remount_sys_for_current_netns();  // best effort: /sys/class/net of the namespace
  ::setenv(proto::kSocketEnv, socket.c_str(), 1);
  ::setenv(kNameEnv, name.c_str(), 1);
  if (!no_lib) {
    std::string libs = lib_dir();
    if (::access(libs.c_str(), F_OK) != 0)
      std::cerr << "vrdma sandbox exec: warning: drop-in library directory " << libs
                << " does not exist (set " << kLibDirEnv << ")\n";
    prepend_library_path(libs);
  }

  std::vector<char*> argv;
  for (const auto& a : command) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::cout.flush();
  ::execvp(argv[0], argv.data());
  int err = errno;
  std::cerr << "vrdma sandbox exec: " << command[0] << ": " << std::strerror(err) << "\n";
  return err == ENOENT ? 127 : 126;
}

}  // namespace vrdma::ctl
