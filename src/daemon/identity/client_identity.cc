#include "daemon/identity/client_identity.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <linux/nsfs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <vector>

#include "common/log.h"
#include "daemon/identity/peer_process.h"

namespace vrdma::daemon {

namespace {

int stat_netns(const char* path, NetnsId* out) {
  struct stat st {};
  if (::stat(path, &st) < 0) return errno;
  *out = NetnsId{static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)};
  return 0;
}

int fstat_netns(int fd, NetnsId* out) {
  struct stat st {};
  if (::fstat(fd, &st) < 0) return errno;
  *out = NetnsId{static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)};
  return 0;
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

IdentityResolver::IdentityResolver(IdentityOptions options) : opt_(std::move(options)) {}

int IdentityResolver::init() {
  int fd = ::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  own_fd_.reset(fd);
  if (int err = fstat_netns(fd, &own_)) return err;
  if (int err = stat_netns("/proc/self/ns/user", &own_userns_)) return err;
  return 0;
}

bool IdentityResolver::owned_by_our_userns(int ns_fd) const {
  // EPERM: the owner is outside the daemon's user namespace, certainly not its own.
  UniqueFd owner(::ioctl(ns_fd, NS_GET_USERNS));
  NetnsId id;
  return owner && fstat_netns(owner.get(), &id) == 0 && id == own_userns_;
}

std::string IdentityResolver::lookup_name(const NetnsId& ns, bool strip_prefix) const {
  DIR* dir = ::opendir(opt_.netns_dir.c_str());
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
  const std::string& prefix = opt_.name_prefix;
  if (strip_prefix && name.size() > prefix.size() && name.compare(0, prefix.size(), prefix) == 0)
    name.erase(0, prefix.size());
  return name;
}

int IdentityResolver::resolve_foreign(pid_t pid, int ns_fd, const NetnsId& ns, Entry* out,
                                      std::string* why) {
  if (::setns(ns_fd, CLONE_NEWNET) < 0) {
    int err = errno;
    *why = "setns into the client's network namespace: " + std::string(strerror(err));
    return err;
  }
  out->ipv4 = first_ipv4_of_current_netns();
  if (::setns(own_fd_.get(), CLONE_NEWNET) < 0) {
    LOG_ERROR("cannot return to the daemon's own network namespace: %s; aborting", strerror(errno));
    std::abort();
  }
  out->foreign_userns = !owned_by_our_userns(ns_fd);
  out->container = out->foreign_userns ? std::string() : lookup_name(ns);
  out->named = !out->container.empty();
  out->anonymous = out->foreign_userns || (!out->named && !opt_.trust_unnamed);
  if (!out->named) out->container = "pid:" + std::to_string(pid);
  out->host = false;
  return 0;
}

UniqueFd IdentityResolver::socket_in(const NetnsId& ns, int domain, int type, int* err,
                                     int protocol) {
  *err = 0;
  if (ns == own_) {
    UniqueFd s(::socket(domain, type, protocol));
    if (!s) *err = errno;
    return s;
  }
  auto it = cache_.find(ns);
  if (it == cache_.end()) {
    *err = ENOENT;
    return UniqueFd();
  }
  if (::setns(it->second.fd.get(), CLONE_NEWNET) < 0) {
    *err = errno;
    return UniqueFd();
  }
  UniqueFd s(::socket(domain, type, protocol));
  if (!s) *err = errno;
  if (::setns(own_fd_.get(), CLONE_NEWNET) < 0) {
    LOG_ERROR("cannot return to the daemon's own network namespace: %s; aborting", strerror(errno));
    std::abort();
  }
  return s;
}

int IdentityResolver::identify(int sock, Identity* out, std::string* why) {
  PeerProcess peer;
  if (int err = peer.open(sock, opt_.peer_pidfd, why)) return err;
  const pid_t pid = peer.pid();
  std::string path = "/proc/" + std::to_string(pid) + "/ns/net";
  UniqueFd ns_fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!ns_fd) {
    int err = errno;
    *why = "open " + path + ": " + strerror(err);
    return err == ENOENT ? ESRCH : err;
  }
  NetnsId ns;
  if (int err = fstat_netns(ns_fd.get(), &ns)) {
    *why = "fstat " + path + ": " + strerror(err);
    return err;
  }
  if (int err = peer.verify_holds(sock, ns_fd.get(), own_fd_.get(), why)) return err;

  auto it = cache_.find(ns);
  Entry fresh;
  if (it == cache_.end()) {
    if (ns == own_) {
      fresh.host = true;
      fresh.named = true;
      fresh.container = "host";
      fresh.ipv4 = first_ipv4_of_current_netns();
    } else if (int err = resolve_foreign(pid, ns_fd.get(), ns, &fresh, why)) {
      return err;
    }
    fresh.fd = std::move(ns_fd);
  }
  // Everything above was read from /proc/PID: it is the client's only if the client is still
  // the process there.
  if (int err = peer.confirm(why)) return err;
  if (it == cache_.end()) it = cache_.emplace(ns, std::move(fresh)).first;
  Entry& e = it->second;
  ++e.refs;

  bool duplicate = false;
  if (!e.anonymous) {
    auto [claim, inserted] = claims_.try_emplace(e.ipv4, ns);
    duplicate = !inserted && claim->second != ns;
  }
  out->pid = pid;
  out->uid = peer.uid();
  out->gid = peer.gid();
  out->netns = ns;
  out->host = e.host;
  out->named = e.named;
  out->anonymous = e.anonymous;
  out->foreign_userns = e.foreign_userns;
  out->duplicate = duplicate;
  out->container = e.container;
  out->ipv4 = e.ipv4;
  return 0;
}

void IdentityResolver::release(const NetnsId& ns) {
  auto it = cache_.find(ns);
  if (it == cache_.end()) return;
  if (--it->second.refs != 0) return;
  auto claim = claims_.find(it->second.ipv4);
  if (claim != claims_.end() && claim->second == ns) claims_.erase(claim);
  cache_.erase(it);
}

}  // namespace vrdma::daemon
