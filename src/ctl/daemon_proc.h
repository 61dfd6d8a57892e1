// Starting, finding and stopping the sandbox's vrdmad processes.
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

#include "ctl/sandbox_state.h"

namespace vrdma::ctl {

inline constexpr const char* kDaemonEnv = "VRDMA_DAEMON";
inline constexpr int kDaemonStartTimeoutMs = 5000;
inline constexpr int kDaemonStopGraceMs = 3000;

// The vrdmad binary: $VRDMA_DAEMON, else next to this executable, else in
// ../sbin/ (installed) or ../daemon/ (build tree) from it, else on PATH.
// Throws Error.
std::string find_daemon();

// Starts vrdmad for `host` inside the host's network namespace, detached (own
// session), output to host.log, and writes host.pidfile. Returns its pid.
// `extra_args` are appended to vrdmad's command line.
pid_t start_daemon(const SandboxHost& host, const std::string& binary,
                   const std::vector<std::string>& extra_args);

// Waits until every host's socket accepts a connection (at most
// kDaemonStartTimeoutMs in all), calling `step` between polls. Throws Error
// with the log tail of the first daemon that died or did not come up.
void wait_for_daemons(const Sandbox& sandbox, const std::function<void()>& step);
// With several hosts: waits (bounded) until every vrdmad's directory knows every host, so that
// a program started right after `sandbox up` finds the other hosts.
void wait_for_directory(const Sandbox& sandbox, const std::function<void()>& step);

// The pid of the vrdmad serving `socket`, read from `pidfile`, or 0 if the file
// is missing or that process is gone or is not that vrdmad (pid reuse).
pid_t running_daemon(const std::string& pidfile, const std::string& socket);

// Running vrdmad processes named by the pidfiles under run_dir (h*/vrdmad.pid),
// whether or not a state file exists.
std::vector<pid_t> sandbox_daemons(const std::string& run_dir);

}  // namespace vrdma::ctl
