// Named network namespaces (the /run/netns convention of iproute2).
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace vrdma::ctl {

inline constexpr const char* kNetnsDir = "/run/netns";
inline constexpr const char* kNetnsPrefixEnv = "VRDMA_NETNS_PREFIX";
inline constexpr const char* kDefaultNetnsPrefix = "vrdma-";

// The prefix of every sandbox namespace: $VRDMA_NETNS_PREFIX (letters, digits, '-' and '_',
// at most 16 characters), else "vrdma-". Two sandboxes with different prefixes and run
// directories can be up side by side. Throws Error on a malformed value.
std::string netns_prefix();

std::string netns_path(const std::string& netns);

// True for the names a sandbox gives its namespaces: <prefix>h<i>, <prefix>h<i>c<j>
// and <prefix>net. Other namespaces with the prefix (unit tests make some) are not ours.
bool is_sandbox_netns(const std::string& netns);

// The sandbox namespaces in /run/netns, sorted.
std::vector<std::string> list_sandbox_netns();

// True if /run/netns/NAME is a mounted network namespace.
bool netns_alive(const std::string& netns);

// Moves the calling thread into the named namespace. Throws Error.
void enter_netns(const std::string& netns);

// Moves the calling thread into a named namespace for its lifetime and back
// when destroyed. Throws Error if it cannot enter.
class ScopedNetns {
 public:
  explicit ScopedNetns(const std::string& netns);
  ~ScopedNetns();
  ScopedNetns(const ScopedNetns&) = delete;
  ScopedNetns& operator=(const ScopedNetns&) = delete;

 private:
  int home_fd_ = -1;
};

// Writes a /proc/sys value as seen inside the named namespace, then returns to
// the caller's namespace. Throws Error.
void write_sysctl_in(const std::string& netns, const std::string& proc_path,
                     const std::string& value);

// Gives the calling process its own mount namespace with a /sys that shows the
// current network namespace (what `ip netns exec` does), so tools reading
// /sys/class/net see the namespace's devices. Best effort: returns false if
// any step failed.
bool remount_sys_for_current_netns();

// Starts argv (argv[0] a path) inside the named namespace, detached: its own session, default
// signal handling, stdin from /dev/null, stdout and stderr appended to `log`. Returns its pid;
// the caller reaps it or leaves it to init when exiting. Throws Error.
pid_t spawn_in_netns(const std::string& netns, const std::vector<std::string>& argv,
                     const std::string& log);

// Processes whose network namespace is one of the named ones (what `ip netns
// pids` reports), excluding the caller.
std::vector<pid_t> pids_in_netns(const std::vector<std::string>& netns_names);

// Unmounts and removes /run/netns/NAME (what `ip netns delete` does); the
// namespace itself goes when its last process and reference are gone.
// Throws Error.
void delete_netns(const std::string& netns);

}  // namespace vrdma::ctl
