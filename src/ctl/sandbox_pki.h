// The PKI of a multi-host sandbox, in <run dir>/pki/ (one CA for etcd and the routers):
//   ca.pem, ca.key              the sandbox's cluster CA
//   host-<id>.pem, .key         each host's vrdmad: CN vrdma-host-<id>, SAN IP its router address
//                               (client and server use: etcd client, router both ways)
//   etcd.pem, etcd.key          etcd's server certificate: SAN IP 10.76.0.254 and 127.0.0.1
//   root.pem, root.key          etcd's root user (CN root): sets up auth, reads for the tests
// Keys are mode 0600. Made fresh by every `vrdma sandbox up`; removed by `down`.
#pragma once

#include <string>

#include "ctl/sandbox_state.h"

namespace vrdma::ctl {

inline constexpr int kSandboxCertDays = 30;

std::string pki_dir(const std::string& run_dir);  // <run dir>/pki
// <pki dir>/<name>.pem and .key ("ca", "etcd", "root", "host-<id>").
std::string pki_cert(const std::string& run_dir, const std::string& name);
std::string pki_key(const std::string& run_dir, const std::string& name);

// Writes the PKI for `sandbox`'s hosts (replacing any earlier one). Throws Error.
void write_sandbox_pki(const Sandbox& sandbox);

}  // namespace vrdma::ctl
