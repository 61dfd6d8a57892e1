// The sandbox's PKI, in <run dir>/pki/: a cluster CA (ca.pem, ca.key) and, per host, a
// certificate with subject CN vrdma-host-<id> and subjectAltName IP of its router address
// (host-<id>.pem, host-<id>.key), made with the openssl command. Each vrdmad's router presents
// its host's certificate and accepts only certificates the CA signed.
#pragma once

#include <string>

#include "ctl/sandbox_state.h"

namespace vrdma::ctl {

std::string pki_dir(const std::string& run_dir);
// Creates the CA and every host's certificate and key (keys mode 0600). Throws Error.
void make_sandbox_pki(const Sandbox& sandbox);
// What a host's vrdmad gets: --tls-ca, --tls-cert, --tls-key.
std::vector<std::string> tls_args(const std::string& run_dir, const SandboxHost& host);

}  // namespace vrdma::ctl
