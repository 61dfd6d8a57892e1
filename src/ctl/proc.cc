#include "ctl/proc.h"

#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "ctl/error.h"

namespace vrdma::ctl {

namespace {

using Clock = std::chrono::steady_clock;

int ms_left(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return static_cast<int>(std::max<int64_t>(0, left.count()));
}

// Child side of run_command: never returns.
[[noreturn]] void exec_child(const std::string& path, const std::vector<std::string>& argv,
                             int out_fd, int err_fd) {
  int null_fd = ::open("/dev/null", O_RDONLY);
  if (null_fd >= 0) ::dup2(null_fd, STDIN_FILENO);
  ::dup2(out_fd, STDOUT_FILENO);
  ::dup2(err_fd, STDERR_FILENO);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  ::execv(path.c_str(), args.data());
  dprintf(STDERR_FILENO, "cannot execute %s: %s\n", path.c_str(), strerror(errno));
  _exit(127);
}

}  // namespace

bool CommandResult::ok() const {
  return !timed_out && WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0;
}

std::string command_line(const std::vector<std::string>& argv) {
  std::string line;
  for (const auto& arg : argv) {
    if (!line.empty()) line += ' ';
    bool plain = !arg.empty() && arg.find_first_of(" \t\n'\"\\$`*?;&|<>()") == std::string::npos;
    if (plain) {
      line += arg;
    } else {
      line += '\'';
      for (char c : arg) line += c == '\'' ? std::string("'\\''") : std::string(1, c);
      line += '\'';
    }
  }
  return line;
}

std::string describe_wait_status(int wait_status) {
  if (WIFEXITED(wait_status)) return "exit status " + std::to_string(WEXITSTATUS(wait_status));
  if (WIFSIGNALED(wait_status)) {
    int sig = WTERMSIG(wait_status);
    return "killed by signal " + std::to_string(sig) + " (" + strsignal(sig) + ")";
  }
  return "wait status " + std::to_string(wait_status);
}

bool is_executable_file(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

std::optional<std::string> find_tool(const std::string& name) {
  if (name.find('/') != std::string::npos) {
    if (is_executable_file(name)) return name;
    return std::nullopt;
  }
  std::string dirs = ::getenv("PATH") ? ::getenv("PATH") : "";
  dirs += ":/usr/sbin:/sbin:/usr/bin:/bin";
  std::stringstream ss(dirs);
  std::string dir;
  while (std::getline(ss, dir, ':')) {
    if (dir.empty()) continue;
    std::string path = dir + "/" + name;
    if (is_executable_file(path)) return path;
  }
  return std::nullopt;
}

CommandResult run_command(const std::vector<std::string>& argv, int timeout_ms) {
  if (argv.empty()) throw Error("internal error: empty command");
  auto path = find_tool(argv[0]);
  if (!path) throw Error("cannot run " + command_line(argv) + ": " + argv[0] + " not found");

  int out_pipe[2], err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) < 0) throw Error(errno_text("pipe", errno));
  if (::pipe2(err_pipe, O_CLOEXEC) < 0) {
    int err = errno;
    ::close(out_pipe[0]);
    ::close(out_pipe[1]);
    throw Error(errno_text("pipe", err));
  }
  pid_t pid = ::fork();
  if (pid < 0) {
    int err = errno;
    for (int fd : {out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1]}) ::close(fd);
    throw Error(errno_text("fork", err));
  }
  if (pid == 0) exec_child(*path, argv, out_pipe[1], err_pipe[1]);
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);

  CommandResult result;
  auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  std::string* sinks[2] = {&result.out, &result.err};
  int open_fds = 2;
  while (open_fds > 0) {
    int n = ::poll(fds, 2, ms_left(deadline));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {  // timeout (or a poll error we cannot recover from)
      result.timed_out = true;
      ::kill(pid, SIGKILL);
      break;
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !fds[i].revents) continue;
      char buf[4096];
      ssize_t got = ::read(fds[i].fd, buf, sizeof(buf));
      if (got > 0) {
        sinks[i]->append(buf, static_cast<size_t>(got));
      } else if (got == 0 || errno != EINTR) {
        ::close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  for (auto& p : fds)
    if (p.fd >= 0) ::close(p.fd);
  while (::waitpid(pid, &result.wait_status, 0) < 0 && errno == EINTR) {
  }
  return result;
}

std::string check_command(const std::vector<std::string>& argv, int timeout_ms) {
  CommandResult r = run_command(argv, timeout_ms);
  if (r.ok()) return r.out;
  std::string msg = "command failed: " + command_line(argv) + " (";
  msg += r.timed_out ? "timed out after " + std::to_string(timeout_ms) + " ms"
                     : describe_wait_status(r.wait_status);
  msg += ")";
  std::string err = r.err;
  while (!err.empty() && (err.back() == '\n' || err.back() == ' ')) err.pop_back();
  if (!err.empty()) msg += ": " + err;
  throw Error(msg);
}

std::string self_exe_dir() {
  char buf[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return {};
  std::string path(buf, static_cast<size_t>(n));
  auto slash = path.rfind('/');
  return slash == std::string::npos ? std::string() : path.substr(0, slash);
}

bool pid_alive(pid_t pid) {
  if (pid <= 0) return false;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  // "pid (comm) S ...": comm may contain anything, so look after the last ')'.
  auto paren = line.rfind(')');
  if (paren == std::string::npos || paren + 2 >= line.size()) return false;
  char state = line[paren + 2];
  return state != 'Z' && state != 'X' && state != 'x';
}

std::string read_cmdline(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/cmdline", std::ios::binary);
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  while (!s.empty() && s.back() == '\0') s.pop_back();
  std::replace(s.begin(), s.end(), '\0', ' ');
  return s;
}

void sleep_ms(int ms) {
  timespec ts{ms / 1000, (ms % 1000) * 1000000L};
  while (::nanosleep(&ts, &ts) < 0 && errno == EINTR) {
  }
}

std::vector<pid_t> terminate_processes(const std::vector<pid_t>& pids, int grace_ms,
                                       bool kill_groups) {
  auto reap = [](pid_t pid) { ::waitpid(pid, nullptr, WNOHANG); };  // if it is our child
  auto wait_gone = [&](std::vector<pid_t> left, int ms) {
    auto deadline = Clock::now() + std::chrono::milliseconds(ms);
    for (;;) {
      std::erase_if(left, [&](pid_t p) {
        reap(p);
        return !pid_alive(p);
      });
      if (left.empty() || Clock::now() >= deadline) return left;
      sleep_ms(20);
    }
  };
  for (pid_t p : pids) ::kill(p, SIGTERM);
  std::vector<pid_t> stubborn = wait_gone(pids, grace_ms);
  for (pid_t p : stubborn) {
    ::kill(p, SIGKILL);
    if (kill_groups && ::getpgid(p) == p) ::kill(-p, SIGKILL);
  }
  wait_gone(stubborn, 2000);
  return stubborn;
}

}  // namespace vrdma::ctl
