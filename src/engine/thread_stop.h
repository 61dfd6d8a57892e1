// Holding the process's other threads still while registered pages move, where userfaultfd is
// not allowed (the default seccomp profiles of podman, docker and Kubernetes refuse it).
//
// stop() sends each other thread of the process a real-time signal and returns once every one
// of them waits in its handler: a thread running user code is stopped between two instructions;
// a thread in a system call that copies into user memory (read(2), recv) finishes that copy
// first, since a signal is taken only on the way back to user mode; one blocked in such a call
// is interrupted and, the handler being SA_RESTART, calls it again after release() (calls that
// are never restarted, such as poll(2), epoll_wait(2) and nanosleep(2), end with EINTR, as for
// any signal). release() lets them all go on.
//
// Not held: io_uring's kernel workers, a thread that blocks the signal for longer than a few
// milliseconds (one that blocks it for good, waiting in sigwait(2), say, is not waited for
// again), a thread stopped by a debugger, and one that does not answer within a second (stuck
// in an uninterruptible wait); `held()` says whether every thread was. vrdma's own threads
// (which block every signal) say so with an Exempt and are left alone. The handler is installed
// on the first stop(), on a real-time signal the program has not taken (looked at again before
// each stop).
//
// Between stop() and release() the caller must not allocate or take a lock another thread may
// hold: every other thread is frozen wherever it was.
#pragma once

#include <sys/types.h>

namespace vrdma {

class ThreadStop {
 public:
  ThreadStop() = default;
  ThreadStop(const ThreadStop&) = delete;
  ThreadStop& operator=(const ThreadStop&) = delete;
  ~ThreadStop() { release(); }

  // Stops every other thread of the process but `spared` (0: none; a thread known to be waiting
  // on the caller, not running user code). Returns whether every thread is held. Stops of one
  // process are taken one at a time (a second waits for the first to be released).
  bool stop(pid_t spared = 0);
  void release();
  bool active() const { return active_; }
  bool held() const { return held_; }

  // The signal the handler is installed on (0 before the first stop).
  static int signal_number();

  // Marks the calling thread, for its lifetime, as one of vrdma's own that no stop holds (it
  // blocks every signal and never writes into memory being registered).
  class Exempt {
   public:
    Exempt();
    ~Exempt();
    Exempt(const Exempt&) = delete;
    Exempt& operator=(const Exempt&) = delete;

   private:
    void* slot_ = nullptr;
  };

 private:
  bool active_ = false;
  bool held_ = false;
};

}  // namespace vrdma
