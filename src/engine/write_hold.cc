#include "engine/write_hold.h"

#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <initializer_list>

namespace vrdma {

namespace {

#ifndef UFFD_USER_MODE_ONLY
#define UFFD_USER_MODE_ONLY 1
#endif
#ifndef UFFD_FEATURE_WP_HUGETLBFS_SHMEM
#define UFFD_FEATURE_WP_HUGETLBFS_SHMEM (1 << 12)
#endif
#ifndef UFFD_FEATURE_WP_UNPOPULATED
#define UFFD_FEATURE_WP_UNPOPULATED (1 << 13)
#endif

#ifndef USERFAULTFD_IOC_NEW
#define USERFAULTFD_IOC_NEW _IO(0xAA, 0x00)
#endif

constexpr int kByDevice = 1 << 30;  // not a userfaultfd(2) flag: open through /dev/userfaultfd

// What this process may open: how (userfaultfd(2)'s flags, or kByDevice; -1: not at all) and
// the features wanted of those the kernel offers (memfd-backed ranges, pages never touched).
struct Support {
  int flags = -1;
  uint64_t features = 0;
};

int open_uffd(int how) {
  const int flags = O_CLOEXEC | O_NONBLOCK;
  if (how == kByDevice) {
    int dev = ::open("/dev/userfaultfd", O_RDWR | O_CLOEXEC);
    if (dev < 0) return -1;
    int fd = ::ioctl(dev, USERFAULTFD_IOC_NEW, flags);
    ::close(dev);
    return fd;
  }
#ifdef SYS_userfaultfd
  return static_cast<int>(::syscall(SYS_userfaultfd, flags | how));
#else
  return -1;
#endif
}

const Support& support() {
  static const Support s = [] {
    Support found;
    // Faults taken in the kernel too (a system call writing there waits) need CAP_SYS_PTRACE
    // or vm.unprivileged_userfaultfd, or /dev/userfaultfd (by its file permissions, and where a
    // seccomp profile refuses the system call, as podman's and docker's default profiles do);
    // user-mode faults only are allowed to everyone the system call is allowed to.
    for (int how : {0, kByDevice, UFFD_USER_MODE_ONLY}) {
      int fd = open_uffd(how);
      if (fd < 0) continue;
      uffdio_api api{};
      api.api = UFFD_API;
      if (::ioctl(fd, UFFDIO_API, &api) == 0 && (api.features & UFFD_FEATURE_PAGEFAULT_FLAG_WP)) {
        found.flags = how;
        found.features =
            api.features & (UFFD_FEATURE_WP_HUGETLBFS_SHMEM | UFFD_FEATURE_WP_UNPOPULATED);
      }
      ::close(fd);
      if (found.flags >= 0) break;
    }
    return found;
  }();
  return s;
}

}  // namespace

WriteHold::Source WriteHold::source() {
  switch (support().flags) {
    case 0:
      return Source::kSyscall;
    case kByDevice:
      return Source::kDevice;
    default:
      return Source::kThreads;
  }
}

bool WriteHold::hold(uint64_t start, uint64_t end, pid_t spared) {
  release();
  if (end <= start) return false;
  const int flags = support().flags;
  const bool whole = flags == 0 || flags == kByDevice;  // the kernel's writes wait too
  if (whole && protect(flags, start, end)) return true;
  // Stopped first, so that a system call copying into the range finishes before the protection
  // would make it fail.
  stop_.stop(spared);
  if (flags == UFFD_USER_MODE_ONLY) protect(flags, start, end);
  return active();
}

// Write-protects the range through a new userfaultfd opened by `flags`.
bool WriteHold::protect(int flags, uint64_t start, uint64_t end) {
  int fd = open_uffd(flags);
  if (fd < 0) return false;
  uffdio_api api{};
  api.api = UFFD_API;
  api.features = support().features;
  uffdio_register reg{};
  reg.range = {start, end - start};
  reg.mode = UFFDIO_REGISTER_MODE_WP;
  uffdio_writeprotect wp{};
  wp.range = reg.range;
  wp.mode = UFFDIO_WRITEPROTECT_MODE_WP;
  // A range of a kind userfaultfd cannot protect, or one another userfaultfd of the process
  // already watches, is refused here.
  if (::ioctl(fd, UFFDIO_API, &api) != 0 || ::ioctl(fd, UFFDIO_REGISTER, &reg) != 0 ||
      !(reg.ioctls & (1ull << _UFFDIO_WRITEPROTECT)) ||
      ::ioctl(fd, UFFDIO_WRITEPROTECT, &wp) != 0) {
    ::close(fd);  // unregisters whatever was registered
    return false;
  }
  fd_ = fd;
  start_ = start;
  end_ = end;
  return true;
}

void WriteHold::release() {
  if (fd_ < 0) {
    stop_.release();
    return;
  }
  // The pages did not move (release_moved() is for those that did): still registered and
  // protected, so the protection is lifted (and the writers woken) before the descriptor goes.
  uffdio_writeprotect wp{};
  wp.range = {start_, end_ - start_};
  wp.mode = 0;
  ::ioctl(fd_, UFFDIO_WRITEPROTECT, &wp);
  release_moved();
}

void WriteHold::release_moved() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  stop_.release();  // after the userfaultfd: a held thread's next write finds no protection
}

}  // namespace vrdma
