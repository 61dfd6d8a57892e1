#include "platform/mount_view.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace vrdma::platform {

namespace {

constexpr long kSysfsMagic = 0x62656572;  // SYSFS_MAGIC
constexpr const char* kStagingName = ".vrdma-view";

[[noreturn]] void fail(const std::string& what, int err) {
  throw std::runtime_error(what + ": " + std::strerror(err));
}

void do_mount(const char* source, const std::string& target, const char* type, unsigned long flags,
              const char* data) {
  if (::mount(source, target.c_str(), type, flags, data) < 0)
    fail(std::string("mount ") + (type ? type : source) + " on " + target, errno);
}

std::string strip_root(const std::string& root) {
  std::string r = root;
  while (!r.empty() && r.back() == '/') r.pop_back();
  return r;  // "" for "/"
}

// Creates an empty file or directory at path to bind over, like the thing it stands for.
void make_mount_point(const std::string& path, bool dir) {
  if (dir) {
    if (::mkdir(path.c_str(), 0755) < 0 && errno != EEXIST) fail("mkdir " + path, errno);
    return;
  }
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) fail("create " + path, errno);
  ::close(fd);
}

void make_parents(const std::string& path) {
  for (size_t slash = path.find('/', 1); slash != std::string::npos;
       slash = path.find('/', slash + 1)) {
    std::string dir = path.substr(0, slash);
    if (::mkdir(dir.c_str(), 0755) < 0 && errno != EEXIST) fail("mkdir " + dir, errno);
  }
}

}  // namespace

MountNsId current_mount_ns() {
  struct stat st {};
  if (::stat("/proc/self/ns/mnt", &st) < 0) fail("stat /proc/self/ns/mnt", errno);
  return {static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)};
}

void require_other_mount_ns(const MountNsId& host) {
  MountNsId self = current_mount_ns();
  struct stat init {};
  bool is_init =
      ::stat("/proc/1/ns/mnt", &init) == 0 &&
      self == MountNsId{static_cast<uint64_t>(init.st_dev), static_cast<uint64_t>(init.st_ino)};
  if (self == host || is_init)
    throw std::runtime_error(
        "refusing to change the host's mount namespace (run inside the container's)");
}

void mount_device_view(const MountNsId& host, const std::string& root_arg,
                       const std::vector<ViewEntry>& entries) {
  require_other_mount_ns(host);
  const std::string root = strip_root(root_arg);
  if (root.find_first_of(":,\\") != std::string::npos)
    throw std::runtime_error("root " + root +
                             ": an overlay cannot name paths with ':', ',' or '\\'");
  const std::string sys_class = root + "/sys/class";
  struct statfs fs {};
  if (::statfs((root + "/sys").c_str(), &fs) < 0) fail("statfs " + root + "/sys", errno);
  if (fs.f_type != kSysfsMagic) throw std::runtime_error(root + "/sys is not a sysfs mount (yet)");

  const std::string staging = root + "/dev/" + kStagingName;
  if (::mkdir(staging.c_str(), 0700) < 0) fail("mkdir " + staging, errno);
  try {
    do_mount("tmpfs", staging, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0755,size=1m");
    try {
      const std::string upper = staging + "/class";
      if (::mkdir(upper.c_str(), 0755) < 0) fail("mkdir " + upper, errno);
      write_view(upper, entries);
      // Read-only overlay of two lower layers: the view first, then what sysfs has.
      std::string opts = "lowerdir=" + upper + ":" + sys_class;
      do_mount("overlay", sys_class, "overlay", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
               opts.c_str());
    } catch (...) {
      ::umount2(staging.c_str(), MNT_DETACH);
      throw;
    }
    if (::umount2(staging.c_str(), MNT_DETACH) < 0) fail("umount " + staging, errno);
  } catch (...) {
    ::rmdir(staging.c_str());
    throw;
  }
  if (::rmdir(staging.c_str()) < 0) fail("rmdir " + staging, errno);
}

void mount_private_dev(const MountNsId& host, const std::vector<DeviceNode>& nodes) {
  require_other_mount_ns(host);
  int old = ::open("/dev", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (old < 0) fail("open /dev", errno);
  DIR* dir = ::fdopendir(old);
  if (!dir) {
    int err = errno;
    ::close(old);
    fail("opendir /dev", err);
  }
  const std::string old_path = "/proc/self/fd/" + std::to_string(old);
  try {
    do_mount("tmpfs", "/dev", "tmpfs", MS_NOSUID | MS_STRICTATIME, "mode=0755,size=64k");
    while (dirent* e = ::readdir(dir)) {
      std::string name = e->d_name;
      if (name == "." || name == "..") continue;
      struct stat st {};
      if (::fstatat(old, e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) continue;
      const std::string target = "/dev/" + name;
      if (S_ISLNK(st.st_mode)) {
        char link[4096];
        ssize_t n = ::readlinkat(old, e->d_name, link, sizeof(link) - 1);
        if (n < 0) continue;
        link[n] = 0;
        if (::symlink(link, target.c_str()) < 0) fail("symlink " + target, errno);
        continue;
      }
      make_mount_point(target, S_ISDIR(st.st_mode));
      do_mount((old_path + "/" + name).c_str(), target, nullptr, MS_BIND | MS_REC, nullptr);
    }
  } catch (...) {
    ::closedir(dir);
    throw;
  }
  ::closedir(dir);
  for (const auto& n : nodes) {
    struct stat st {};
    if (::stat(n.host_path.c_str(), &st) < 0) fail("stat " + n.host_path, errno);
    if (!S_ISCHR(st.st_mode)) throw std::runtime_error(n.host_path + " is not a character device");
    make_parents(n.container_path);
    make_mount_point(n.container_path, false);
    do_mount(n.host_path.c_str(), n.container_path, nullptr, MS_BIND, nullptr);
  }
}

void mount_sysfs_for_current_netns(const MountNsId& host) {
  require_other_mount_ns(host);
  if (::umount2("/sys", MNT_DETACH) < 0 && errno != EINVAL) fail("umount /sys", errno);
  do_mount("sysfs", "/sys", "sysfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr);
}

}  // namespace vrdma::platform
