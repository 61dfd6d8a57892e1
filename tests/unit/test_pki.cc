#include "test_pki.h"

#include <stdlib.h>

#include <filesystem>

#include "pki/pki.h"

namespace vrdma::testing {

TestPki::TestPki(unsigned hosts) {
  char tmpl[] = "/tmp/vrdma-pki-test-XXXXXX";
  if (!::mkdtemp(tmpl)) {
    error_ = "mkdtemp failed";
    return;
  }
  dir_ = tmpl;
  std::string err;
  auto ca = pki::make_ca("vrdma test CA", 2, &err);
  auto rogue_ca = pki::make_ca("vrdma test CA", 2, &err);  // same name, other key
  if (!ca || !rogue_ca || !write("ca", ca->cert_pem, ca->key_pem)) {
    if (error_.empty()) error_ = err;
    return;
  }
  auto issue = [&](const std::string& name, const pki::Issued& by, pki::CertRequest req) {
    auto c = pki::issue(by, req, &err);
    if (!c) {
      error_ = err;
      return false;
    }
    return write(name, c->cert_pem, c->key_pem);
  };
  if (!issue("etcd", *ca, {"vrdma-etcd", {"127.0.0.1"}, true, true, 2}) ||
      !issue("root", *ca, {"root", {}, false, true, 2}) ||
      !issue("rogue", *rogue_ca, {pki::host_common_name(0), {"127.0.0.1"}, true, true, 2}))
    return;
  for (unsigned id = 0; id < hosts; ++id)
    if (!issue("host-" + std::to_string(id), *ca,
               {pki::host_common_name(id), {"127.0.0.1"}, true, true, 2}))
      return;
}

TestPki::~TestPki() {
  if (!dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
}

bool TestPki::write(const std::string& name, const std::string& cert_pem,
                    const std::string& key_pem) {
  std::string err;
  if (pki::write_pem(cert(name), cert_pem, false, &err) &&
      pki::write_pem(key(name), key_pem, true, &err))
    return true;
  error_ = err;
  return false;
}

}  // namespace vrdma::testing
