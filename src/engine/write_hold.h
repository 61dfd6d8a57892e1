// Holding the writes of the process's other threads to a range while its pages move.
//
// A registration (and a deregistration) moves whole pages to another file: a copy, then one
// mremap over them. The pages hold the application's other objects too, and a write another
// thread makes to them between the copy and the mremap would land in the old pages and be lost.
// A WriteHold write-protects the range through userfaultfd: such a write waits in the kernel
// until the hold ends, then goes to the new pages.
//
// The userfaultfd comes from userfaultfd(2) or, where a seccomp profile refuses that system call
// (podman's and docker's default profiles do), from /dev/userfaultfd if the process may open it.
// Without either, or for a range of a kind it cannot protect, the hold is inactive and the move
// goes on unprotected. From the system call without CAP_SYS_PTRACE (and with
// vm.unprivileged_userfaultfd = 0, the default) the hold covers the threads' own writes only: a
// system call writing into the range in that instant (a read(2) into a buffer there) fails with
// EFAULT instead of waiting.
//
// Between hold() and release() the caller must not write to the range itself, allocate, or take
// a lock another thread may hold while writing there.
#pragma once

#include <cstdint>

#include "shm/layout.h"

namespace vrdma {

class WriteHold {
 public:
  WriteHold() = default;
  WriteHold(const WriteHold&) = delete;
  WriteHold& operator=(const WriteHold&) = delete;
  ~WriteHold() { release(); }

  // Write-protects [start, end) (page-aligned). Returns whether the hold is active.
  bool hold(uint64_t start, uint64_t end);
  // Ends the hold: every write waiting on it goes on, to whatever is mapped there now.
  void release();
  // Ends the hold of a range that was mapped anew since hold() (an mremap over it): the
  // protection went with the old pages, so only the descriptor goes; closing it wakes every
  // writer still waiting.
  void release_moved();
  bool active() const { return fd_ >= 0; }

  // How holds are taken in this process (the first call finds out).
  // (Valued as the shm::PageMoveGuard the library writes for vrdma status.)
  enum class Source : uint32_t {
    kNone = shm::kGuardNone,
    kSyscall = shm::kGuardSyscall,
    kSyscallUserOnly = shm::kGuardUserOnly,
    kDevice = shm::kGuardDevice,
  };
  static Source source();
  static bool available() { return source() != Source::kNone; }

 private:
  int fd_ = -1;
  uint64_t start_ = 0, end_ = 0;
};

}  // namespace vrdma
