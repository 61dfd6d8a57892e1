// A throwaway PKI for tests: the cluster CA, certificates for hosts 0..N-1 (CN vrdma-host-<id>),
// etcd's (SAN 127.0.0.1), root's, and one "rogue" certificate for host 0 signed by another CA.
// Files in a temporary directory, removed on destruction.
#pragma once

#include <string>

namespace vrdma::testing {

class TestPki {
 public:
  explicit TestPki(unsigned hosts = 3);
  ~TestPki();
  TestPki(const TestPki&) = delete;
  TestPki& operator=(const TestPki&) = delete;

  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }
  const std::string& dir() const { return dir_; }

  // <dir>/<name>.pem and <dir>/<name>.key; names: "ca", "etcd", "root", "host-<id>", "rogue".
  std::string cert(const std::string& name) const { return dir_ + "/" + name + ".pem"; }
  std::string key(const std::string& name) const { return dir_ + "/" + name + ".key"; }
  std::string ca() const { return cert("ca"); }

 private:
  bool write(const std::string& name, const std::string& cert_pem, const std::string& key_pem);
  std::string dir_;
  std::string error_;
};

}  // namespace vrdma::testing
