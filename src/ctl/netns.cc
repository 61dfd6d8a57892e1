#include "ctl/netns.h"

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <regex>
#include <set>
#include <utility>

#include "common/unique_fd.h"
#include "ctl/error.h"

namespace vrdma::ctl {

namespace {

constexpr long kNsfsMagic = 0x6e736673;  // NSFS_MAGIC

int open_netns(const std::string& netns) {
  std::string path = netns_path(netns);
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(errno_text("cannot open network namespace " + path, errno));
  return fd;
}

// Child side of spawn_in_netns: never returns. Only async-signal-safe calls.
[[noreturn]] void exec_in_netns(int netns_fd, int log_fd, char* const argv[]) {
  int null_fd = ::open("/dev/null", O_RDONLY);
  if (null_fd >= 0) ::dup2(null_fd, STDIN_FILENO);
  ::dup2(log_fd, STDOUT_FILENO);
  ::dup2(log_fd, STDERR_FILENO);
  if (::setns(netns_fd, CLONE_NEWNET) < 0) {
    dprintf(STDERR_FILENO, "vrdma: cannot enter the network namespace: %s\n", strerror(errno));
    _exit(126);
  }
  ::setsid();
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGPIPE}) ::signal(sig, SIG_DFL);
  ::execv(argv[0], argv);
  dprintf(STDERR_FILENO, "vrdma: cannot execute %s: %s\n", argv[0], strerror(errno));
  _exit(127);
}

}  // namespace

std::string netns_path(const std::string& netns) {
  return std::string(kNetnsDir) + "/" + netns;
}

std::string netns_prefix() {
  const char* env = ::getenv(kNetnsPrefixEnv);
  if (!env || !*env) return kDefaultNetnsPrefix;
  static const std::regex valid("[A-Za-z0-9_-]{1,16}");
  if (!std::regex_match(env, valid))
    throw Error(std::string(kNetnsPrefixEnv) + "='" + env +
                "': use 1 to 16 letters, digits, '-' or '_'");
  return env;
}

bool is_sandbox_netns(const std::string& netns) {
  const std::string prefix = netns_prefix();
  if (netns.compare(0, prefix.size(), prefix) != 0) return false;
  static const std::regex rest("net|h[0-9]+(c[0-9]+)?");
  return std::regex_match(netns.substr(prefix.size()), rest);
}

std::vector<std::string> list_sandbox_netns() {
  std::vector<std::string> names;
  DIR* dir = ::opendir(kNetnsDir);
  if (!dir) return names;
  while (dirent* e = ::readdir(dir)) {
    std::string name = e->d_name;
    if (is_sandbox_netns(name)) names.push_back(name);
  }
  ::closedir(dir);
  std::sort(names.begin(), names.end());
  return names;
}

bool netns_alive(const std::string& netns) {
  struct statfs fs;
  return ::statfs(netns_path(netns).c_str(), &fs) == 0 && fs.f_type == kNsfsMagic;
}

void enter_netns(const std::string& netns) {
  UniqueFd fd(open_netns(netns));
  if (::setns(fd.get(), CLONE_NEWNET) < 0)
    throw Error(errno_text("cannot enter network namespace " + netns, errno));
}

ScopedNetns::ScopedNetns(const std::string& netns) {
  home_fd_ = ::open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
  if (home_fd_ < 0) throw Error(errno_text("cannot open /proc/self/ns/net", errno));
  try {
    enter_netns(netns);
  } catch (...) {
    ::close(home_fd_);
    throw;
  }
}

ScopedNetns::~ScopedNetns() {
  // Staying in the wrong namespace would misdirect everything that follows.
  if (::setns(home_fd_, CLONE_NEWNET) < 0) {
    std::perror("vrdma: cannot return to the original network namespace");
    std::abort();
  }
  ::close(home_fd_);
}

void write_sysctl_in(const std::string& netns, const std::string& proc_path,
                     const std::string& value) {
  ScopedNetns in(netns);
  UniqueFd fd(::open(proc_path.c_str(), O_WRONLY | O_CLOEXEC));
  if (fd.get() < 0 ||
      ::write(fd.get(), value.data(), value.size()) != static_cast<ssize_t>(value.size()))
    throw Error(errno_text("cannot write " + proc_path + " in " + netns, errno));
}

bool remount_sys_for_current_netns() {
  if (::unshare(CLONE_NEWNS) < 0) return false;
  // Keep mount events from leaking back to the parent namespace.
  if (::mount("", "/", nullptr, MS_SLAVE | MS_REC, nullptr) < 0) return false;
  if (::umount2("/sys", MNT_DETACH) < 0 && errno != EINVAL) return false;
  return ::mount("sysfs", "/sys", "sysfs", 0, nullptr) == 0;
}

pid_t spawn_in_netns(const std::string& netns, const std::vector<std::string>& argv,
                     const std::string& log) {
  UniqueFd log_fd(::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644));
  if (log_fd.get() < 0) throw Error(errno_text("cannot open " + log, errno));
  UniqueFd netns_fd(open_netns(netns));
  std::vector<std::string> args = argv;
  std::vector<char*> ptrs;
  for (auto& a : args) ptrs.push_back(a.data());
  ptrs.push_back(nullptr);
  pid_t pid = ::fork();
  if (pid == 0) exec_in_netns(netns_fd.get(), log_fd.get(), ptrs.data());
  if (pid < 0) throw Error(errno_text("fork", errno));
  return pid;
}

std::vector<pid_t> pids_in_netns(const std::vector<std::string>& netns_names) {
  std::set<std::pair<dev_t, ino_t>> wanted;
  for (const auto& name : netns_names) {
    struct stat st;
    if (::stat(netns_path(name).c_str(), &st) == 0) wanted.insert({st.st_dev, st.st_ino});
  }
  std::vector<pid_t> pids;
  if (wanted.empty()) return pids;
  DIR* proc = ::opendir("/proc");
  if (!proc) return pids;
  pid_t self = ::getpid();
  while (dirent* e = ::readdir(proc)) {
    char* end;
    long pid = std::strtol(e->d_name, &end, 10);
    if (*end || pid <= 0 || pid == self) continue;
    struct stat st;
    std::string ns = std::string("/proc/") + e->d_name + "/ns/net";
    if (::stat(ns.c_str(), &st) == 0 && wanted.count({st.st_dev, st.st_ino}))
      pids.push_back(static_cast<pid_t>(pid));
  }
  ::closedir(proc);
  return pids;
}

void delete_netns(const std::string& netns) {
  std::string path = netns_path(netns);
  ::umount2(path.c_str(), MNT_DETACH);  // fails harmlessly if it was not mounted
  if (::unlink(path.c_str()) < 0 && errno != ENOENT)
    throw Error(errno_text("cannot remove network namespace " + path, errno));
}

}  // namespace vrdma::ctl
