#include "ctl/sandbox_pki.h"

#include <filesystem>

#include "ctl/error.h"
#include "ctl/files.h"
#include "pki/pki.h"

namespace vrdma::ctl {

std::string pki_dir(const std::string& run_dir) {
  return run_dir + "/pki";
}

std::string pki_cert(const std::string& run_dir, const std::string& name) {
  return pki_dir(run_dir) + "/" + name + ".pem";
}

std::string pki_key(const std::string& run_dir, const std::string& name) {
  return pki_dir(run_dir) + "/" + name + ".key";
}

void write_sandbox_pki(const Sandbox& sandbox) {
  const std::string& dir = sandbox.run_dir;
  std::error_code ec;
  std::filesystem::remove_all(pki_dir(dir), ec);  // a crashed sandbox's
  if (ec) throw Error("cannot remove " + pki_dir(dir) + ": " + ec.message());
  make_dirs(pki_dir(dir));
  std::string error;
  auto save = [&](const std::string& name, const pki::Issued& it) {
    if (!pki::write_pem(pki_cert(dir, name), it.cert_pem, false, &error) ||
        !pki::write_pem(pki_key(dir, name), it.key_pem, true, &error))
      throw Error(error);
  };
  auto ca = pki::make_ca("vrdma sandbox CA", kSandboxCertDays, &error);
  if (!ca) throw Error(error);
  save("ca", *ca);
  auto issue = [&](const std::string& name, const pki::CertRequest& req) {
    auto it = pki::issue(*ca, req, &error);
    if (!it) throw Error(error);
    save(name, *it);
  };
  issue("etcd", {"vrdma-etcd", {kUnderlayEtcdIp, "127.0.0.1"}, true, true, kSandboxCertDays});
  issue("root", {"root", {}, false, true, kSandboxCertDays});
  for (const auto& h : sandbox.hosts) {
    pki::CertRequest req{
        pki::host_common_name(static_cast<unsigned>(h.id)), {}, true, true, kSandboxCertDays};
    if (!h.underlay_ip.empty()) req.ip_sans.push_back(h.underlay_ip);
    issue("host-" + std::to_string(h.id), req);
  }
}

}  // namespace vrdma::ctl
