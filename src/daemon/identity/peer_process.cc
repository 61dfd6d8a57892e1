#include "daemon/identity/peer_process.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/sock_diag.h>
#include <linux/unix_diag.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "common/log.h"

#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77  // Linux 6.5
#endif

namespace vrdma::daemon {

namespace {

int pidfd_open_compat(pid_t pid) {
#ifdef SYS_pidfd_open
  return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
#else
  errno = ENOSYS;
  return -1;
#endif
}

// 0 when the process behind the pidfd is alive, ESRCH when it has exited, ENOSYS when the
// kernel cannot tell.
int pidfd_alive(int pidfd) {
#ifdef SYS_pidfd_send_signal
  if (::syscall(SYS_pidfd_send_signal, pidfd, 0, nullptr, 0) == 0) return 0;
  return errno == ESRCH ? ESRCH : (errno == EPERM ? 0 : errno);
#else
  (void)pidfd;
  return ENOSYS;
#endif
}

std::string pid_text(pid_t pid) {
  return "pid " + std::to_string(pid);
}

}  // namespace

int unix_peer_inode(int sock, uint64_t* peer_ino) {
  struct stat st {};
  if (::fstat(sock, &st) < 0) return errno;
  UniqueFd nl(::socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG));
  if (!nl) return errno;
  timeval tv{1, 0};  // the kernel answers at once; never wait long
  ::setsockopt(nl.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  struct {
    nlmsghdr nlh;
    unix_diag_req req;
  } msg{};
  msg.nlh.nlmsg_len = sizeof(msg);
  msg.nlh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
  msg.nlh.nlmsg_flags = NLM_F_REQUEST;
  msg.nlh.nlmsg_seq = 1;
  msg.req.sdiag_family = AF_UNIX;
  msg.req.udiag_states = ~0u;
  msg.req.udiag_ino = static_cast<uint32_t>(st.st_ino);
  msg.req.udiag_show = UDIAG_SHOW_PEER;
  msg.req.udiag_cookie[0] = msg.req.udiag_cookie[1] = ~0u;  // INET_DIAG_NOCOOKIE
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  if (::sendto(nl.get(), &msg, sizeof(msg), 0, reinterpret_cast<sockaddr*>(&kernel),
               sizeof(kernel)) < 0)
    return errno;
  alignas(nlmsghdr) char buf[8192];
  ssize_t n = ::recv(nl.get(), buf, sizeof(buf), 0);
  if (n < 0) return errno;
  auto* h = reinterpret_cast<nlmsghdr*>(buf);
  if (!NLMSG_OK(h, static_cast<unsigned>(n))) return EPROTO;
  if (h->nlmsg_type == NLMSG_ERROR) {
    const auto* e = static_cast<const nlmsgerr*>(NLMSG_DATA(h));
    return e->error < 0 ? -e->error : ENOENT;
  }
  if (h->nlmsg_type != SOCK_DIAG_BY_FAMILY || h->nlmsg_len < NLMSG_LENGTH(sizeof(unix_diag_msg)))
    return EPROTO;
  const auto* m = static_cast<const unix_diag_msg*>(NLMSG_DATA(h));
  if (m->udiag_ino != msg.req.udiag_ino) return EPROTO;
  int len = static_cast<int>(h->nlmsg_len - NLMSG_LENGTH(sizeof(*m)));
  for (auto* a = reinterpret_cast<rtattr*>(const_cast<unix_diag_msg*>(m) + 1); RTA_OK(a, len);
       a = RTA_NEXT(a, len)) {
    if (a->rta_type == UNIX_DIAG_PEER && RTA_PAYLOAD(a) >= sizeof(uint32_t)) {
      uint32_t peer;
      memcpy(&peer, RTA_DATA(a), sizeof(peer));
      *peer_ino = peer;
      return 0;
    }
  }
  return ENOTCONN;
}

int process_holds_socket(pid_t pid, uint64_t ino, int max_fds) {
  std::string dir_path = "/proc/" + std::to_string(pid) + "/fd";
  DIR* dir = ::opendir(dir_path.c_str());
  if (!dir) return errno;
  char want[48];
  int want_len =
      std::snprintf(want, sizeof(want), "socket:[%llu]", static_cast<unsigned long long>(ino));
  int seen = 0, found = ENOENT;
  while (dirent* e = ::readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    if (++seen > max_fds) break;
    char target[64];
    ssize_t n = ::readlinkat(::dirfd(dir), e->d_name, target, sizeof(target) - 1);
    if (n == want_len && memcmp(target, want, static_cast<size_t>(n)) == 0) {
      found = 0;
      break;
    }
  }
  ::closedir(dir);
  return found;
}

int process_start_time(pid_t pid, uint64_t* ticks) {
  std::string path = "/proc/" + std::to_string(pid) + "/stat";
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return errno;
  char buf[1024];
  ssize_t n = ::read(fd.get(), buf, sizeof(buf) - 1);
  if (n <= 0) return n < 0 ? errno : EIO;
  buf[n] = '\0';
  // "pid (comm) state ppid ...": comm may hold spaces and parentheses; fields restart after
  // the last ')'. The start time is field 22, the 20th after comm.
  char* p = strrchr(buf, ')');
  if (!p) return EPROTO;
  ++p;
  for (int field = 3; field < 22; ++field) {
    p = strchr(p + 1, ' ');
    if (!p) return EPROTO;
  }
  char* end = nullptr;
  unsigned long long v = strtoull(p + 1, &end, 10);
  if (end == p + 1) return EPROTO;
  *ticks = v;
  return 0;
}

int PeerProcess::open(int sock, bool use_peer_pidfd, std::string* why) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (::getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0) {
    int err = errno;
    *why = "SO_PEERCRED: " + std::string(strerror(err));
    return err;
  }
  if (cred.pid <= 0) {
    *why = "peer pid is not visible from the daemon's pid namespace";
    return ESRCH;
  }
  pid_ = cred.pid;
  uid_ = cred.uid;
  gid_ = cred.gid;
  if (use_peer_pidfd) {
    int pidfd = -1;
    len = sizeof(pidfd);
    if (::getsockopt(sock, SOL_SOCKET, SO_PEERPIDFD, &pidfd, &len) == 0 && pidfd >= 0) {
      pidfd_.reset(pidfd);
      via_peer_pidfd_ = true;
      return 0;
    }
    // A kernel that knows the option answers ENOPROTOOPT only if it does not; anything else
    // (EINVAL, ESRCH) means the process that connected has exited.
    if (errno != ENOPROTOOPT) {
      int err = errno;
      *why = pid_text(pid_) +
             " exited before it could be identified (SO_PEERPIDFD: " + strerror(err) + ")";
      return ESRCH;
    }
  }
  // Older kernel (or told to act as one): pin whatever process has the pid now; verify_holds()
  // then checks that it is the peer.
  int pidfd = pidfd_open_compat(pid_);
  if (pidfd >= 0) {
    pidfd_.reset(pidfd);
  } else if (errno == ESRCH) {
    *why = pid_text(pid_) + " exited before it could be identified";
    return ESRCH;
  }
  if (int err = process_start_time(pid_, &start_time_)) {
    *why = "cannot read the start time of " + pid_text(pid_) + ": " + strerror(err);
    return err == ENOENT ? ESRCH : err;
  }
  return 0;
}

int PeerProcess::verify_holds(int sock, int netns_fd, int own_netns_fd, std::string* why) const {
  if (via_peer_pidfd_) return 0;
  // The socket the client connected with lives in the client's network namespace: look it up
  // there. (A process that got a dead client's pid may be in another namespace: then the
  // lookup fails, which is a refusal too.)
  if (::setns(netns_fd, CLONE_NEWNET) < 0) {
    int err = errno;
    *why = "setns into the client's network namespace: " + std::string(strerror(err));
    return err;
  }
  uint64_t peer = 0;
  int err = unix_peer_inode(sock, &peer);
  if (::setns(own_netns_fd, CLONE_NEWNET) < 0) {
    LOG_ERROR("cannot return to the daemon's own network namespace: %s; aborting", strerror(errno));
    std::abort();
  }
  if (err) {
    *why = pid_text(pid_) + ": the connection's peer is not in its network namespace (" +
           strerror(err) + "): its pid was reused?";
    return ESRCH;
  }
  err = process_holds_socket(pid_, peer, kMaxFdsScanned);
  if (err == ENOENT) {
    *why = pid_text(pid_) +
           " does not hold the other end of this connection: its pid was "
           "reused after the client exited?";
    return ESRCH;
  }
  if (err) {
    *why = "cannot list the descriptors of " + pid_text(pid_) + ": " + strerror(err);
    return err;
  }
  return 0;
}

int PeerProcess::confirm(std::string* why) const {
  if (pidfd_) {
    int err = pidfd_alive(pidfd_.get());
    if (err == 0) {
      if (via_peer_pidfd_) return 0;
    } else if (err == ESRCH) {
      *why = pid_text(pid_) + " exited while it was being identified";
      return ESRCH;
    }
  } else if (via_peer_pidfd_) {
    return 0;
  }
  uint64_t now = 0;
  if (process_start_time(pid_, &now) != 0 || now != start_time_) {
    *why = pid_text(pid_) + " changed while it was being identified";
    return ESRCH;
  }
  return 0;
}

}  // namespace vrdma::daemon
