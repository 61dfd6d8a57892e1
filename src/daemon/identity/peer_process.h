// Which process is at the other end of a connected AF_UNIX socket, checked so that a pid that
// was reused between the client's connect() and the daemon's accept() is never taken for the
// client.
//
// SO_PEERCRED gives the pid the client had when it connected. That number only names the client
// while the client lives: if it exited before the daemon looked, another process may have the
// number by now, in another network namespace. Two ways to be sure:
//   - SO_PEERPIDFD (Linux 6.5): the kernel hands over a pidfd of the process that connected.
//     Everything read from /proc/PID belongs to it if it is still alive afterwards.
//   - Without it (Debian 12's 6.1): the process now at PID is pinned (pidfd_open, and its start
//     time read before and after), and it must hold the peer end of this very connection
//     (sock_diag names the peer's inode; /proc/PID/fd lists the sockets the process holds).
//     A process that got the pid of a client that exited holds no such socket.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "common/unique_fd.h"

namespace vrdma::daemon {

class PeerProcess {
 public:
  // How many descriptors of a process are looked at for the connection's peer (without
  // SO_PEERPIDFD). A client whose control connection is not among them is refused.
  static constexpr int kMaxFdsScanned = 65536;

  // Finds the peer of `sock` and pins it. With `use_peer_pidfd` false the kernel's
  // SO_PEERPIDFD is not asked for, as on kernels before 6.5. Returns 0, or a positive errno
  // with *why set (ESRCH: the process at the peer's pid is not the peer).
  int open(int sock, bool use_peer_pidfd, std::string* why);

  // Without SO_PEERPIDFD: checks that the pinned process holds the peer end of `sock`.
  // `netns_fd` is the network namespace to look the connection up in (sockets made by
  // connect() live in the connecting process's namespace). Switches the calling thread into
  // it for a moment and back (aborting the process if it cannot come back). Nothing to check
  // (0) with SO_PEERPIDFD. 0 or a positive errno with *why set.
  int verify_holds(int sock, int netns_fd, int own_netns_fd, std::string* why) const;

  // After everything was read from /proc/PID: 0 when the pinned process is still alive (so
  // PID named it all along), else ESRCH with *why set.
  int confirm(std::string* why) const;

  pid_t pid() const { return pid_; }
  uid_t uid() const { return uid_; }
  gid_t gid() const { return gid_; }
  bool via_peer_pidfd() const { return via_peer_pidfd_; }

 private:
  pid_t pid_ = 0;
  uid_t uid_ = 0;
  gid_t gid_ = 0;
  UniqueFd pidfd_;
  bool via_peer_pidfd_ = false;
  uint64_t start_time_ = 0;  // without SO_PEERPIDFD
};

// The inode of the socket at the other end of a connected AF_UNIX socket, asked of the kernel
// through sock_diag in the calling thread's network namespace. 0 or a positive errno.
int unix_peer_inode(int sock, uint64_t* peer_ino);

// Whether process `pid` holds a descriptor for socket inode `ino` (among its first
// `max_fds` descriptors). 0 (it does), ENOENT (it does not), or another errno.
int process_holds_socket(pid_t pid, uint64_t ino, int max_fds);

// The start time of process `pid` (field 22 of /proc/PID/stat, clock ticks since boot).
// 0 or a positive errno.
int process_start_time(pid_t pid, uint64_t* ticks);

}  // namespace vrdma::daemon
