#include "ctl/sandbox_mounts.h"

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "ctl/error.h"
#include "ctl/files.h"
#include "ctl/netns.h"
#include "platform/daemon_probe.h"
#include "platform/device_view.h"
#include "platform/install_paths.h"
#include "platform/mount_view.h"

namespace vrdma::ctl {

namespace {

constexpr int kHelloTimeoutMs = 3000;

// $VRDMA_LIBDIR; else, for a vrdma run from its build tree (build/src/ctl/vrdma), that build's
// lib directory; else the installed one (next to this vrdma's prefix, else VRDMA_LIBDIR).
std::string lib_dir() {
  const char* env = ::getenv("VRDMA_LIBDIR");
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
  return platform::installed_lib_dir();
}

// Child side of build_one: builds the namespace, reports "ok" or the error on `report`, then
// waits until the parent has pinned it (EOF on `pinned`). Never returns.
[[noreturn]] void build_in_child(const SandboxContainer& c, const platform::ContainerEdits& edits,
                                 int report, int pinned) {
  std::string result = "ok";
  try {
    const platform::MountNsId host = platform::current_mount_ns();
    enter_netns(c.netns);
    if (::unshare(CLONE_NEWNS) < 0) throw Error(errno_text("unshare(CLONE_NEWNS)", errno));
    // Host mounts still show up inside (a pinned network namespace, say); nothing made inside
    // shows up on the host.
    if (::mount("", "/", nullptr, MS_SLAVE | MS_REC, nullptr) < 0)
      throw Error(errno_text("make / a slave mount", errno));
    platform::mount_sysfs_for_current_netns(host);
    platform::mount_private_dev(host, edits.devices);
    auto probe = platform::probe_daemon(c.socket, kHelloTimeoutMs);
    if (!probe.hello) throw Error(probe.error);
    struct stat st {};
    const std::string node = edits.devices.front().container_path;
    if (::stat(node.c_str(), &st) < 0) throw Error(errno_text("stat " + node, errno));
    const platform::DeviceIdentity id =
        platform::identity_from_hello(*probe.hello, edits.uverbs_index, st.st_rdev);
    platform::mount_device_view(host, "/", platform::device_view(id));
  } catch (const std::exception& e) {
    result = e.what();
  }
  (void)!::write(report, result.data(), result.size());
  ::close(report);
  char b;
  while (::read(pinned, &b, 1) > 0) {
  }
  _exit(result == "ok" ? 0 : 1);
}

void build_one(const std::string& run_dir, const SandboxContainer& c,
               const platform::ContainerEdits& edits) {
  int report[2], pinned[2];
  if (::pipe2(report, O_CLOEXEC) < 0) throw Error(errno_text("pipe", errno));
  if (::pipe2(pinned, O_CLOEXEC) < 0) {
    ::close(report[0]);
    ::close(report[1]);
    throw Error(errno_text("pipe", errno));
  }
  pid_t pid = ::fork();
  if (pid == 0) {
    ::close(report[0]);
    ::close(pinned[1]);
    build_in_child(c, edits, report[1], pinned[0]);
  }
  ::close(report[1]);
  ::close(pinned[0]);
  std::string result;
  char buf[512];
  ssize_t n;
  while (pid > 0 && (n = ::read(report[0], buf, sizeof(buf))) != 0) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    result.append(buf, static_cast<size_t>(n));
  }
  ::close(report[0]);
  std::string error;
  if (pid < 0) {
    error = errno_text("fork", errno);
  } else if (result != "ok") {
    error = result.empty() ? "the namespace builder died" : result;
  } else {
    const std::string pin = mount_ns_path(run_dir, c.name);
    const std::string source = "/proc/" + std::to_string(pid) + "/ns/mnt";
    int fd = ::open(pin.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
      error = errno_text("create " + pin, errno);
    } else {
      ::close(fd);
      if (::mount(source.c_str(), pin.c_str(), nullptr, MS_BIND, nullptr) < 0)
        error = errno_text("pin " + source + " at " + pin, errno);
    }
  }
  ::close(pinned[1]);
  if (pid > 0) {
    while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
  if (!error.empty()) throw Error("mount namespace of " + c.name + ": " + error);
}

}  // namespace

std::string mounts_dir(const std::string& run_dir) {
  return run_dir + "/mnt";
}

std::string mount_ns_path(const std::string& run_dir, const std::string& container) {
  return mounts_dir(run_dir) + "/" + container;
}

platform::ContainerEdits sandbox_edits(const SandboxHost& host) {
  platform::EditsConfig config = platform::default_edits_config();
  config.lib_dir = lib_dir();
  auto slash = host.socket.rfind('/');
  config.socket_dir = host.socket.substr(0, slash);
  config.socket_name = host.socket.substr(slash + 1);
  return platform::container_edits(config);
}

void build_container_mounts(const Sandbox& sandbox, const std::function<void()>& step) {
  const std::string dir = mounts_dir(sandbox.run_dir);
  make_dirs(dir);
  // A private mount of its own: the pins must not propagate into the namespaces they pin.
  if (::mount(dir.c_str(), dir.c_str(), nullptr, MS_BIND, nullptr) < 0)
    throw Error(errno_text("bind " + dir, errno));
  if (::mount("", dir.c_str(), nullptr, MS_PRIVATE, nullptr) < 0)
    throw Error(errno_text("make " + dir + " private", errno));
  for (const auto& c : sandbox.containers) {
    step();
    const SandboxHost* host = sandbox.host(c.host);
    if (!host) throw Error("container " + c.name + " has no host " + c.host);
    build_one(sandbox.run_dir, c, sandbox_edits(*host));
  }
}

bool release_container_mounts(const std::string& run_dir, std::vector<std::string>& errors) {
  const std::string dir = mounts_dir(run_dir);
  DIR* d = ::opendir(dir.c_str());
  if (!d) return false;
  std::vector<std::string> pins;
  while (dirent* e = ::readdir(d))
    if (e->d_name[0] != '.') pins.push_back(dir + "/" + e->d_name);
  ::closedir(d);
  for (const auto& pin : pins) {
    if (::umount2(pin.c_str(), MNT_DETACH) < 0 && errno != EINVAL)
      errors.push_back(errno_text("cannot unpin " + pin, errno));
    if (::unlink(pin.c_str()) < 0 && errno != ENOENT)
      errors.push_back(errno_text("cannot remove " + pin, errno));
  }
  ::umount2(dir.c_str(), MNT_DETACH);  // EINVAL if it was never mounted (a crashed `up`)
  if (::rmdir(dir.c_str()) < 0 && errno != ENOENT)
    errors.push_back(errno_text("cannot remove " + dir, errno));
  return true;
}

bool enter_container_mounts(const std::string& run_dir, const std::string& container) {
  const std::string pin = mount_ns_path(run_dir, container);
  int fd = ::open(pin.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return false;
    throw Error(errno_text("cannot open " + pin, errno));
  }
  std::error_code ec;
  std::string cwd = std::filesystem::current_path(ec).string();
  int rc = ::setns(fd, CLONE_NEWNS);
  int err = errno;
  ::close(fd);
  if (rc < 0) throw Error(errno_text("cannot enter the mount namespace of " + container, err));
  // setns puts the process at the namespace's root; the host's files are all there.
  if (ec || ::chdir(cwd.c_str()) < 0) (void)!::chdir("/");
  return true;
}

}  // namespace vrdma::ctl
