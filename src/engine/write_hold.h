// Holding the writes of the process's other threads to a range while its pages move.
//
// A registration (and a deregistration) moves whole pages to another file: a copy, then one
// mremap over them. The pages hold the application's other objects too, and a write another
// thread makes to them between the copy and the mremap would land in the old pages and be lost.
// A WriteHold write-protects the range through userfaultfd: such a write waits in the kernel
// until the hold ends, then goes to the new pages.
//
// The userfaultfd comes from userfaultfd(2) or, where a seccomp profile refuses that system call
// (podman's, docker's and Kubernetes' default profiles do), from /dev/userfaultfd if the process
// may open it. Without a userfaultfd that also holds the kernel's writes (a read(2) into the
// range), or for a range of a kind it cannot protect, the process's other threads are stopped
// instead (ThreadStop): each finishes a system call copying into the range before it stops, and
// waits in a signal handler until the hold ends. Where userfaultfd(2) is allowed for user-mode
// faults only, it is taken too, for the threads a stop does not hold.
//
// Between hold() and release() the caller must not write to the range itself, allocate, or take
// a lock another thread may hold.
#pragma once

#include <sys/types.h>

#include <cstdint>

#include "engine/thread_stop.h"
#include "shm/layout.h"

namespace vrdma {

class WriteHold {
 public:
  WriteHold() = default;
  WriteHold(const WriteHold&) = delete;
  WriteHold& operator=(const WriteHold&) = delete;
  ~WriteHold() { release(); }

  // Holds the writes to [start, end) (page-aligned) of every thread but the caller and `spared`
  // (0: none; a thread waiting on the caller). Returns whether the hold is active.
  bool hold(uint64_t start, uint64_t end, pid_t spared = 0);
  // Ends the hold: every write waiting on it goes on, to whatever is mapped there now.
  void release();
  // Ends the hold of a range that was mapped anew since hold() (an mremap over it): the
  // protection went with the old pages, so only the descriptor goes; closing it wakes every
  // writer still waiting.
  void release_moved();
  bool active() const { return fd_ >= 0 || stop_.active(); }

  // How holds are taken in this process (the first call finds out).
  // (Valued as the shm::PageMoveGuard the library writes for vrdma status.)
  enum class Source : uint32_t {
    kSyscall = shm::kGuardSyscall,
    kDevice = shm::kGuardDevice,
    kThreads = shm::kGuardThreads,
  };
  static Source source();

 private:
  bool protect(int flags, uint64_t start, uint64_t end);

  int fd_ = -1;
  uint64_t start_ = 0, end_ = 0;
  ThreadStop stop_;
};

}  // namespace vrdma
