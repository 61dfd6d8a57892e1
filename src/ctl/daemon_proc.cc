#include "ctl/daemon_proc.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <regex>

#include <nlohmann/json.hpp>

#include "common/unix_socket.h"
#include "ctl/daemon_client.h"
#include "ctl/error.h"
#include "ctl/files.h"
#include "ctl/netns.h"
#include "ctl/proc.h"

namespace vrdma::ctl {

namespace {

std::string real_path(const std::string& path) {
  char buf[PATH_MAX];
  return ::realpath(path.c_str(), buf) ? std::string(buf) : path;
}

std::string log_excerpt(const SandboxHost& h) {
  std::string tail = tail_lines(h.log, 20);
  if (tail.empty()) return "\n(" + h.log + " is empty)";
  return "\n--- last lines of " + h.log + " ---\n" + tail + "---";
}

}  // namespace

std::string find_daemon() {
  if (const char* env = ::getenv(kDaemonEnv); env && *env) {
    if (!is_executable_file(env))
      throw Error(std::string(kDaemonEnv) + "=" + env + " is not an executable file");
    return real_path(env);
  }
  std::string dir = self_exe_dir();
  // Next to vrdma, then the install layout (bin/ and sbin/), then the build tree.
  for (const std::string& candidate :
       {dir + "/vrdmad", dir + "/../sbin/vrdmad", dir + "/../daemon/vrdmad"})
    if (is_executable_file(candidate)) return real_path(candidate);
  if (auto path = find_tool("vrdmad")) return real_path(*path);
  throw Error("cannot find vrdmad (looked in " + dir + ", " + dir + "/../sbin, " + dir +
              "/../daemon and on PATH); set " + kDaemonEnv + "=/path/to/vrdmad");
}

pid_t start_daemon(const SandboxHost& host, const std::string& binary,
                   const std::vector<std::string>& extra_args) {
  ::unlink(host.socket.c_str());  // so that only the new daemon's socket counts
  // A new log for each start (spawn_in_netns appends).
  if (::truncate(host.log.c_str(), 0) < 0 && errno != ENOENT)
    throw Error(errno_text("cannot truncate " + host.log, errno));
  // The sandbox's daemons take their settings from the sandbox alone, never from the host's
  // configuration file (--config '').
  std::vector<std::string> args = {
      binary, "--config", "", "--socket", host.socket, "--host-id", std::to_string(host.id)};
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  pid_t pid = spawn_in_netns(host.netns, args, host.log);
  write_file_atomic(host.pidfile, std::to_string(pid) + "\n");
  return pid;
}

void wait_for_daemons(const Sandbox& sandbox, const std::function<void()>& step) {
  using Clock = std::chrono::steady_clock;
  auto deadline = Clock::now() + std::chrono::milliseconds(kDaemonStartTimeoutMs);
  std::vector<const SandboxHost*> pending;
  for (const auto& h : sandbox.hosts) pending.push_back(&h);
  while (!pending.empty()) {
    step();
    std::erase_if(pending, [](const SandboxHost* h) {
      int status;
      if (::waitpid(h->pid, &status, WNOHANG) == h->pid)
        throw Error("vrdmad for " + h->name + " ended (" + describe_wait_status(status) +
                    ") before accepting connections on " + h->socket + log_excerpt(*h));
      ScopedNetns in(h->netns);  // so that the daemon logs the probe as the host's
      int fd = unix_connect(h->socket);
      if (fd < 0) return false;
      ::close(fd);
      return true;
    });
    if (pending.empty()) break;
    if (Clock::now() >= deadline) {
      const SandboxHost* h = pending.front();
      throw Error("vrdmad for " + h->name + " did not accept connections on " + h->socket +
                  " within " + std::to_string(kDaemonStartTimeoutMs / 1000) + " s" +
                  log_excerpt(*h));
    }
    sleep_ms(20);
  }
}

void wait_for_directory(const Sandbox& sandbox, const std::function<void()>& step) {
  if (sandbox.hosts.size() < 2) return;
  using Clock = std::chrono::steady_clock;
  constexpr int kTimeoutMs = 20000;
  auto deadline = Clock::now() + std::chrono::milliseconds(kTimeoutMs);
  std::string last;
  for (const auto& h : sandbox.hosts) {
    for (;;) {
      step();
      try {
        ScopedNetns in(h.netns);
        DaemonClient client(h.socket);
        auto j = nlohmann::json::parse(client.status());
        const auto& d = j.at("daemon").at("directory");
        last = d.value("backend", std::string());
        if (d.value("available", false) &&
            d.value("hosts", size_t(0)) >= sandbox.hosts.size())
          break;
      } catch (const std::exception& e) {
        last = e.what();
      }
      if (Clock::now() >= deadline)
        throw Error("vrdmad for " + h.name + " does not see every host in its directory within " +
                    std::to_string(kTimeoutMs / 1000) + " s (" + last + ")");
      sleep_ms(50);
    }
  }
}

pid_t running_daemon(const std::string& pidfile, const std::string& socket) {
  auto text = read_file(pidfile);
  if (!text) return 0;
  pid_t pid = static_cast<pid_t>(std::atoi(text->c_str()));
  if (!pid_alive(pid)) return 0;
  std::string cmdline = read_cmdline(pid);
  return cmdline.find(" " + socket) != std::string::npos ? pid : 0;
}

std::vector<pid_t> sandbox_daemons(const std::string& run_dir) {
  std::vector<pid_t> pids;
  DIR* dir = ::opendir(run_dir.c_str());
  if (!dir) return pids;
  static const std::regex host_dir_name("h[0-9]+");
  while (dirent* e = ::readdir(dir)) {
    if (!std::regex_match(e->d_name, host_dir_name)) continue;
    std::string d = run_dir + "/" + e->d_name;
    if (pid_t pid = running_daemon(d + "/vrdmad.pid", d + "/vrdmad.sock")) pids.push_back(pid);
  }
  ::closedir(dir);
  return pids;
}

}  // namespace vrdma::ctl
