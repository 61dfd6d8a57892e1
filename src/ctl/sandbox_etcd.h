// The etcd of a multi-host sandbox (the cluster directory of its vrdmad processes): started
// detached inside the underlay namespace, found again through its pidfile, stopped.
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>

#include "ctl/sandbox_state.h"

namespace vrdma::ctl {

inline constexpr const char* kEtcdEnv = "VRDMA_ETCD";
inline constexpr int kEtcdStartTimeoutMs = 15000;
inline constexpr int kEtcdStopGraceMs = 5000;

// The etcd binary: $VRDMA_ETCD, else etcd on PATH or in the system directories. Throws Error.
std::string find_etcd();

// Starts the etcd `sandbox.etcd` describes (appending to its log, writing its pidfile): clients
// on TLS with certificates of the sandbox's CA required, health on a plain-HTTP metrics URL
// inside the underlay namespace. Waits until it is healthy, calling `step` between polls.
// Returns its pid.
// Throws Error with the tail of its log if it ends or does not answer in time.
pid_t start_etcd(const Sandbox& sandbox, const std::function<void()>& step);

// The pid of the sandbox etcd whose files are under run_dir (<run dir>/etcd/etcd.pid), or 0 if
// none runs (no pidfile, process gone, or a different process under that pid).
pid_t running_etcd(const std::string& run_dir);

// Gives etcd (fresh, auth still off) the root user and each host's user and role, then turns
// auth on (etcd_auth.h), as root with the sandbox's PKI. Throws Error.
void setup_etcd_auth(const Sandbox& sandbox);

// SIGTERM, then waits up to kEtcdStopGraceMs for it to exit before SIGKILL. False if it had to
// be killed.
bool stop_etcd(pid_t pid);

}  // namespace vrdma::ctl
