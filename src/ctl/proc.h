// Processes: running external commands (fork/exec, no shell) and finding,
// checking and stopping processes.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

namespace vrdma::ctl {

struct CommandResult {
  int wait_status = 0;  // as waitpid returns it
  bool timed_out = false;
  std::string out;
  std::string err;
  bool ok() const;
};

// The command as a user would type it, for error messages.
std::string command_line(const std::vector<std::string>& argv);

// "exit status 2", "killed by signal 9 (Killed)".
std::string describe_wait_status(int wait_status);

// Runs argv[0] (looked up with find_tool) with stdin from /dev/null, capturing
// stdout and stderr; kills it after timeout_ms. Never throws for the command's
// own failure; throws Error if it cannot be started.
CommandResult run_command(const std::vector<std::string>& argv, int timeout_ms = 10000);

// Like run_command, but a failure throws Error naming the command line, how it
// failed and its stderr. Returns stdout.
std::string check_command(const std::vector<std::string>& argv, int timeout_ms = 10000);

// A regular file we may execute.
bool is_executable_file(const std::string& path);

// An executable on $PATH, then in /usr/sbin, /sbin, /usr/bin, /bin (root tools
// such as ip are often missing from a user's PATH). Names with '/' are returned
// as they are if executable.
std::optional<std::string> find_tool(const std::string& name);

// The directory of the running executable (from /proc/self/exe).
std::string self_exe_dir();

// True if pid exists and is not a zombie.
bool pid_alive(pid_t pid);

// /proc/PID/cmdline with NULs turned into spaces; empty if unreadable.
std::string read_cmdline(pid_t pid);

// Sends SIGTERM to every pid, waits up to grace_ms for all to go, then SIGKILLs
// (the pid and, if kill_groups, its process group) the rest and waits up to
// 2 s more. Returns the pids that had to be killed with SIGKILL.
std::vector<pid_t> terminate_processes(const std::vector<pid_t>& pids, int grace_ms,
                                       bool kill_groups);

void sleep_ms(int ms);

}  // namespace vrdma::ctl
