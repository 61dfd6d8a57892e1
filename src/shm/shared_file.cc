#include "shm/shared_file.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cstring>

#include "shm/layout.h"

namespace vrdma::shm {

int create_sealed(const char* name, uint64_t size, bool more_seals, int& fd) {
  int f = ::memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (f < 0) return errno;
  int seals = F_SEAL_SHRINK | F_SEAL_GROW | (more_seals ? 0 : F_SEAL_SEAL);
  if (::ftruncate(f, static_cast<off_t>(size)) < 0 || ::fcntl(f, F_ADD_SEALS, seals) < 0) {
    int e = errno;
    ::close(f);
    return e;
  }
  fd = f;
  return 0;
}

int check_sealed(int fd, uint64_t max_size, uint64_t& size) {
  struct stat st {};
  if (::fstat(fd, &st) < 0) return errno;
  if (!S_ISREG(st.st_mode)) return EBADF;
  int seals = ::fcntl(fd, F_GET_SEALS);
  if (seals < 0) return EPERM;  // not a file that can be sealed (not shmem)
  if ((seals & (F_SEAL_SHRINK | F_SEAL_GROW)) != (F_SEAL_SHRINK | F_SEAL_GROW)) return EPERM;
  struct statfs fs {};
  if (::fstatfs(fd, &fs) < 0) return errno;
  if (fs.f_type == HUGETLBFS_MAGIC) return EINVAL;  // faults when the pool runs dry
  if (st.st_size <= 0) return EINVAL;
  if (static_cast<uint64_t>(st.st_size) > max_size) return EFBIG;
  size = static_cast<uint64_t>(st.st_size);
  return 0;
}

namespace {

// The device of the kernel's internal shmem mount, which holds memfds and System V segments
// alike (and nothing a process can create by name).
dev_t internal_shmem_device() {
  static const dev_t dev = [] {
    int f = ::memfd_create("vrdma-probe", MFD_CLOEXEC);
    if (f < 0) return dev_t{0};
    struct stat st {};
    dev_t d = ::fstat(f, &st) == 0 ? st.st_dev : dev_t{0};
    ::close(f);
    return d;
  }();
  return dev;
}

}  // namespace

int check_sysv_segment(int fd, uint64_t max_size, uint64_t& size) {
  struct stat st {};
  if (::fstat(fd, &st) < 0) return errno;
  if (!S_ISREG(st.st_mode)) return EBADF;
  struct statfs fs {};
  if (::fstatfs(fd, &fs) < 0) return errno;
  if (fs.f_type == HUGETLBFS_MAGIC) return EINVAL;
  const dev_t shmem = internal_shmem_device();
  if (fs.f_type != TMPFS_MAGIC || shmem == 0 || st.st_dev != shmem) return EPERM;
  // The kernel names a segment's file "SYSV" and the key, in eight hex digits; a memfd's name
  // always starts "memfd:", whatever its creator asked for.
  char path[48], target[64] = {};
  snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
  ssize_t n = ::readlink(path, target, sizeof(target) - 1);
  if (n < 13 || std::strncmp(target, "/SYSV", 5) != 0) return EPERM;
  if (st.st_size <= 0 || st.st_size % kPage) return EINVAL;
  if (static_cast<uint64_t>(st.st_size) > max_size) return EFBIG;
  size = static_cast<uint64_t>(st.st_size);
  return 0;
}

int check_memory_file(int fd, uint64_t max_size, uint64_t& size) {
  int e = check_sealed(fd, max_size, size);
  if (e == EPERM && check_sysv_segment(fd, max_size, size) == 0) return 0;
  return e;
}

bool write_sealed(int fd) {
  int seals = ::fcntl(fd, F_GET_SEALS);
  return seals >= 0 && (seals & (F_SEAL_WRITE | F_SEAL_FUTURE_WRITE)) != 0;
}

int map_sealed(int fd, int prot, uint64_t max_size, void*& base, uint64_t& size) {
  uint64_t sz = 0;
  if (int e = check_sealed(fd, max_size, sz)) return e;
  void* p = ::mmap(nullptr, sz, prot, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return errno == EPERM ? EACCES : errno;
  base = p;
  size = sz;
  return 0;
}

int reopen_read_only(int fd) {
  char path[48];
  snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
  return ::open(path, O_RDONLY | O_CLOEXEC);
}

}  // namespace vrdma::shm
