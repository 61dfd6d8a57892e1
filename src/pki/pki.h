// A small certificate authority (OpenSSL): the cluster CA and the certificates it issues to
// hosts (vrdmad: etcd client and router), to etcd (server) and to etcd's root user. Keys are
// ECDSA P-256, certificates X.509 v3 signed with SHA-256. Used by `vrdma sandbox up` for the
// sandbox's PKI and by tests; a real cluster brings its own.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace vrdma::pki {

// A certificate and its private key, PEM.
struct Issued {
  std::string cert_pem;
  std::string key_pem;
};

struct CertRequest {
  std::string common_name;           // etcd takes it as the user name
  std::vector<std::string> ip_sans;  // subjectAltName IP entries (dotted IPv4)
  bool server = false;               // extendedKeyUsage serverAuth
  bool client = false;               // extendedKeyUsage clientAuth
  int days = 365;
};

// A self-signed CA certificate and key. nullopt and *error on failure.
std::optional<Issued> make_ca(const std::string& common_name, int days, std::string* error);
// A certificate for `req`, signed by `ca`.
std::optional<Issued> issue(const Issued& ca, const CertRequest& req, std::string* error);

// The subject Common Name of the (first) certificate in `cert_pem`.
std::optional<std::string> common_name(const std::string& cert_pem, std::string* error);

// The certificate name of host `id` ("vrdma-host-<id>"): its etcd user and role.
std::string host_common_name(unsigned id);

// Writes `pem` to `path` through a temporary file and rename; mode 0600 when `secret` (a
// private key), else 0644. false and *error on failure.
bool write_pem(const std::string& path, const std::string& pem, bool secret, std::string* error);

}  // namespace vrdma::pki
