#include "ctl/sandbox_pki.h"

#include <sys/stat.h>

#include <filesystem>

#include "ctl/error.h"
#include "ctl/files.h"
#include "ctl/proc.h"

namespace vrdma::ctl {

namespace {

constexpr int kOpensslTimeoutMs = 30000;

// A new P-256 key and a certificate for it: self-signed (the CA) or signed by the CA.
void make_cert(const std::string& dir, const std::string& stem, const std::string& cn,
               const std::vector<std::string>& extensions, bool ca) {
  std::vector<std::string> argv = {"openssl", "req", "-x509", "-new", "-newkey", "ec",
                                   "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                                   "-keyout", dir + "/" + stem + ".key",
                                   "-out", dir + "/" + stem + ".pem",
                                   "-subj", "/CN=" + cn, "-days", ca ? "3650" : "825"};
  if (!ca) argv.insert(argv.end(), {"-CA", dir + "/ca.pem", "-CAkey", dir + "/ca.key"});
  for (const auto& e : extensions) argv.insert(argv.end(), {"-addext", e});
  check_command(argv, kOpensslTimeoutMs);
  if (::chmod((dir + "/" + stem + ".key").c_str(), 0600) < 0)
    throw Error(errno_text("cannot chmod " + dir + "/" + stem + ".key", errno));
}

}  // namespace

std::string pki_dir(const std::string& run_dir) {
  return run_dir + "/pki";
}

void make_sandbox_pki(const Sandbox& sandbox) {
  if (!find_tool("openssl"))
    throw Error("cannot find the openssl command (Debian package openssl), which makes the "
                "sandbox's certificates");
  const std::string dir = pki_dir(sandbox.run_dir);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  make_dirs(dir);
  ::chmod(dir.c_str(), 0700);
  make_cert(dir, "ca", "vrdma-sandbox-ca",
            {"basicConstraints=critical,CA:TRUE", "keyUsage=critical,keyCertSign,cRLSign"}, true);
  for (const auto& h : sandbox.hosts) {
    make_cert(dir, "host-" + std::to_string(h.id), "vrdma-host-" + std::to_string(h.id),
              {"subjectAltName=IP:" + h.underlay_ip, "basicConstraints=critical,CA:FALSE",
               "keyUsage=critical,digitalSignature",
               "extendedKeyUsage=serverAuth,clientAuth"},
              false);
  }
}

std::vector<std::string> tls_args(const std::string& run_dir, const SandboxHost& host) {
  const std::string dir = pki_dir(run_dir);
  const std::string stem = dir + "/host-" + std::to_string(host.id);
  return {"--tls-ca", dir + "/ca.pem", "--tls-cert", stem + ".pem", "--tls-key", stem + ".key"};
}

}  // namespace vrdma::ctl
