// vrdma sandbox exec
#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>

#include "ctl/error.h"
#include "ctl/netns.h"
#include "ctl/sandbox.h"
#include "ctl/sandbox_mounts.h"

namespace vrdma::ctl {

namespace {

inline constexpr const char* kNameEnv = "VRDMA_SANDBOX_NAME";

// Applies the container edits' environment: LD_LIBRARY_PATH gets the library directory in
// front of what it had, the others are set.
void apply_env(const platform::ContainerEdits& edits, bool no_lib) {
  for (const auto& v : edits.env) {
    if (v.name == "LD_LIBRARY_PATH") {
      if (no_lib) continue;
      if (::access(v.value.c_str(), F_OK) != 0)
        std::cerr << "vrdma sandbox exec: warning: drop-in library directory " << v.value
                  << " does not exist (set VRDMA_LIBDIR)\n";
      const char* old = ::getenv("LD_LIBRARY_PATH");
      std::string value = old && *old ? v.value + ":" + old : v.value;
      ::setenv("LD_LIBRARY_PATH", value.c_str(), 1);
      continue;
    }
    ::setenv(v.name.c_str(), v.value.c_str(), 1);
  }
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

  std::string netns;
  const SandboxHost* host = nullptr;
  const SandboxContainer* container = sandbox->container(name);
  if (container) {
    netns = container->netns;
    host = sandbox->host(container->host);
  } else if ((host = sandbox->host(name))) {
    netns = host->netns;
  }
  if (!host) {
    std::string names;
    for (const auto& n : sandbox->names()) names += " " + n;
    throw UsageError("unknown name '" + name_arg + "'; valid names:" + names);
  }

  enter_netns(netns);
  // A container has its own mount namespace (device node, device view, /sys of its network
  // namespace); a host gets a /sys of its network namespace (best effort).
  if (!container || !enter_container_mounts(dir, name)) remount_sys_for_current_netns();
  apply_env(sandbox_edits(*host), no_lib);
  ::setenv(kNameEnv, name.c_str(), 1);

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
