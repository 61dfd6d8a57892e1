#include "ctl/device_plugin_cmd.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>

#include "ctl/error.h"
#include "ctl/proc.h"

namespace vrdma::ctl {

namespace {

constexpr const char* kProgram = "vrdma-device-plugin";

std::string find_plugin() {
  if (const char* env = ::getenv("VRDMA_DEVICE_PLUGIN"); env && *env) return env;
  const std::string dir = self_exe_dir();
  for (const std::string& cand :
       {dir + "/" + kProgram, dir + "/../k8s/" + kProgram, dir + "/../libexec/vrdma/" + kProgram})
    if (is_executable_file(cand)) return cand;
  throw Error(std::string("cannot find ") + kProgram + " (set VRDMA_DEVICE_PLUGIN)");
}

}  // namespace

int run_device_plugin(const std::vector<std::string>& args) {
  const std::string program = find_plugin();
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(program.c_str()));
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::cout.flush();
  ::execv(program.c_str(), argv.data());
  std::cerr << "vrdma device-plugin: cannot run " << program << ": " << std::strerror(errno)
            << "\n";
  return kExitError;
}

}  // namespace vrdma::ctl
