#include "daemon/identity/client_identity.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <vector>

#include "common/log.h"

#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77  // Linux 6.5
#endif

namespace vrdma::daemon {

namespace {


int stat_netns(const char* path, NetnsId* out) {
  struct stat st {};
  if (::stat(path, &st) < 0) return errno;
  *out = NetnsId{static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)};
  return 0;
}

// With a pidfd for the peer (SO_PEERPIDFD), a process that is still alive after we looked at
// /proc/PID cannot have had its pid reused in between. Without one (older kernels) there is a
// small window in which a client that exits right after connecting could have its pid reused.
bool peer_still_alive(int pidfd) {
  if (pidfd < 0) return true;
#ifdef SYS_pidfd_send_signal
  if (::syscall(SYS_pidfd_send_signal, pidfd, 0, nullptr, 0) == 0) return true;
  return errno != ESRCH;
#else
  return true;
#endif
}

}  // namespace

uint32_t first_ipv4_of_current_netns() {
  ifaddrs* list = nullptr;
  uint32_t found = htonl(INADDR_LOOPBACK);
  if (::getifaddrs(&list) < 0) return found;
  for (ifaddrs* ifa = list; ifa; ifa = ifa->ifa_next) {
    if (!ifa->ifa_addr || ifa->ifa_addr->sa_family != AF_INET) continue;
    if ((ifa->ifa_flags & IFF_LOOPBACK) || !(ifa->ifa_flags & IFF_UP)) continue;
    uint32_t a = reinterpret_cast<const sockaddr_in*>(ifa->ifa_addr)->sin_addr.s_addr;
    if ((ntohl(a) >> 24) == 127) continue;
    found = a;
    break;
  }
  ::freeifaddrs(list);
  return found;
}

uint64_t node_guid_for(uint32_t ipv4_net_order) {
  uint8_t b[8] = {0x02, 0x76, 0x72, 0x64};
  memcpy(b + 4, &ipv4_net_order, 4);
  uint64_t guid;
  memcpy(&guid, b, 8);
  return guid;
}

IdentityResolver::IdentityResolver(std::string netns_dir, std::string name_prefix)
    : netns_dir_(std::move(netns_dir)), name_prefix_(std::move(name_prefix)) {}

int IdentityResolver::init() {
  int fd = ::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  own_fd_.reset(fd);
  struct stat st {};
  if (::fstat(fd, &st) < 0) return errno;
  own_ = NetnsId{static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)};
  return 0;
}

std::string IdentityResolver::lookup_name(const NetnsId& ns) const {
  DIR* dir = ::opendir(netns_dir_.c_str());
  if (!dir) return {};
  std::vector<std::string> matches;
  while (dirent* e = ::readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    struct stat st {};
    if (::fstatat(::dirfd(dir), e->d_name, &st, 0) < 0) continue;
    if (static_cast<uint64_t>(st.st_dev) == ns.dev && static_cast<uint64_t>(st.st_ino) == ns.ino)
      matches.emplace_back(e->d_name);
  }
  ::closedir(dir);
  if (matches.empty()) return {};
  std::string name = matches.front();
  for (const auto& m : matches)
    if (m < name) name = m;  // deterministic when a namespace is pinned twice
  if (name.size() > name_prefix_.size() && name.compare(0, name_prefix_.size(), name_prefix_) == 0)
    name.erase(0, name_prefix_.size());
  return name;
}

int IdentityResolver::resolve_foreign(pid_t pid, const NetnsId& ns, Entry* out, std::string* why) {
  std::string path = "/proc/" + std::to_string(pid) + "/ns/net";
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) {
    int err = errno;
    *why = "open " + path + ": " + strerror(err);
    return err;
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) < 0 || static_cast<uint64_t>(st.st_dev) != ns.dev ||
      static_cast<uint64_t>(st.st_ino) != ns.ino) {
    *why = "network namespace of pid " + std::to_string(pid) + " changed while identifying it";
    return ESRCH;
  }
  if (::setns(fd.get(), CLONE_NEWNET) < 0) {
    int err = errno;
    *why = "setns into the client's network namespace: " + std::string(strerror(err));
    return err;
  }
  out->ipv4 = first_ipv4_of_current_netns();
  if (::setns(own_fd_.get(), CLONE_NEWNET) < 0) {
    LOG_ERROR("cannot return to the daemon's own network namespace: %s; aborting", strerror(errno));
    std::abort();
  }
  out->container = lookup_name(ns);
  out->named = !out->container.empty();
  if (!out->named) out->container = "pid:" + std::to_string(pid);
  out->host = false;
  return 0;
}

int IdentityResolver::identify(int sock, Identity* out, std::string* why) {
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
  int pidfd = -1;
  len = sizeof(pidfd);
  if (::getsockopt(sock, SOL_SOCKET, SO_PEERPIDFD, &pidfd, &len) < 0) pidfd = -1;
  UniqueFd pidfd_owner(pidfd);

  NetnsId ns;
  std::string path = "/proc/" + std::to_string(cred.pid) + "/ns/net";
  if (int rc = stat_netns(path.c_str(), &ns); rc < 0) {
    *why = "stat " + path + ": " + strerror(-rc);
    return rc;
  }

  auto it = cache_.find(ns);
  if (it == cache_.end()) {
    Entry e;
    if (ns == own_) {
      e.host = true;
      e.named = true;
      e.container = "host";
      e.ipv4 = first_ipv4_of_current_netns();
    } else if (int rc = resolve_foreign(cred.pid, ns, &e, why); rc < 0) {
      return rc;
    }
    if (!peer_still_alive(pidfd)) {
      *why = "client exited while it was being identified";
      return ESRCH;
    }
    it = cache_.emplace(ns, std::move(e)).first;
  } else if (!peer_still_alive(pidfd)) {
    *why = "client exited while it was being identified";
    return ESRCH;
  }
  ++it->second.refs;

  out->pid = cred.pid;
  out->uid = cred.uid;
  out->gid = cred.gid;
  out->netns = ns;
  out->host = it->second.host;
  out->named = it->second.named;
  out->container = it->second.container;
  out->ipv4 = it->second.ipv4;
  return 0;
}

void IdentityResolver::release(const NetnsId& ns) {
  auto it = cache_.find(ns);
  if (it == cache_.end()) return;
  if (--it->second.refs == 0) cache_.erase(it);
}

}  // namespace vrdma::daemon
