#include "pki/pki.h"

#include <fcntl.h>
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

namespace vrdma::pki {

namespace {

template <class T, void (*Free)(T*)>
struct Deleter {
  void operator()(T* p) const { Free(p); }
};
using KeyPtr = std::unique_ptr<EVP_PKEY, Deleter<EVP_PKEY, EVP_PKEY_free>>;
using CertPtr = std::unique_ptr<X509, Deleter<X509, X509_free>>;
using BioPtr = std::unique_ptr<BIO, Deleter<BIO, BIO_free_all>>;
using ExtPtr = std::unique_ptr<X509_EXTENSION, Deleter<X509_EXTENSION, X509_EXTENSION_free>>;
using BnPtr = std::unique_ptr<BIGNUM, Deleter<BIGNUM, BN_free>>;

// What OpenSSL says went wrong (its error queue), prefixed by what was being done.
bool fail(std::string* error, const std::string& what) {
  unsigned long code = ERR_get_error();
  char buf[256] = "unknown error";
  if (code) ERR_error_string_n(code, buf, sizeof(buf));
  ERR_clear_error();
  *error = what + ": " + buf;
  return false;
}

KeyPtr new_key(std::string* error) {
  KeyPtr key(EVP_EC_gen("P-256"));
  if (!key) fail(error, "cannot generate an EC P-256 key");
  return key;
}

bool set_serial(X509* cert) {
  unsigned char bytes[16];
  if (RAND_bytes(bytes, sizeof(bytes)) != 1) return false;
  bytes[0] &= 0x7f;  // positive
  BnPtr bn(BN_bin2bn(bytes, sizeof(bytes), nullptr));
  return bn && BN_to_ASN1_INTEGER(bn.get(), X509_get_serialNumber(cert)) != nullptr;
}

bool add_ext(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  ExtPtr ext(X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str()));
  return ext && X509_add_ext(cert, ext.get(), -1) == 1;
}

// A certificate for `key` named `cn`, valid from an hour ago for `days`, not yet signed.
CertPtr new_cert(EVP_PKEY* key, const std::string& cn, int days) {
  CertPtr cert(X509_new());
  if (!cert || X509_set_version(cert.get(), 2) != 1 || !set_serial(cert.get()) ||
      !X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600) ||
      !X509_gmtime_adj(X509_getm_notAfter(cert.get()), static_cast<long>(days) * 86400) ||
      X509_set_pubkey(cert.get(), key) != 1)
    return nullptr;
  X509_NAME* name = X509_get_subject_name(cert.get());
  if (X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8,
                                 reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1,
                                 0) != 1)
    return nullptr;
  return cert;
}

std::optional<Issued> to_pem(X509* cert, EVP_PKEY* key, std::string* error) {
  BioPtr cbio(BIO_new(BIO_s_mem())), kbio(BIO_new(BIO_s_mem()));
  if (!cbio || !kbio || PEM_write_bio_X509(cbio.get(), cert) != 1 ||
      PEM_write_bio_PrivateKey(kbio.get(), key, nullptr, nullptr, 0, nullptr, nullptr) != 1) {
    fail(error, "cannot write PEM");
    return std::nullopt;
  }
  Issued out;
  char* data;
  long n = BIO_get_mem_data(cbio.get(), &data);
  out.cert_pem.assign(data, static_cast<size_t>(n));
  n = BIO_get_mem_data(kbio.get(), &data);
  out.key_pem.assign(data, static_cast<size_t>(n));
  return out;
}

CertPtr read_cert(const std::string& pem) {
  BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  return CertPtr(bio ? PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr) : nullptr);
}

KeyPtr read_key(const std::string& pem) {
  BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  return KeyPtr(bio ? PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr) : nullptr);
}

}  // namespace

std::optional<Issued> make_ca(const std::string& common_name, int days, std::string* error) {
  KeyPtr key = new_key(error);
  if (!key) return std::nullopt;
  CertPtr cert = new_cert(key.get(), common_name, days);
  if (!cert || X509_set_issuer_name(cert.get(), X509_get_subject_name(cert.get())) != 1 ||
      !add_ext(cert.get(), cert.get(), NID_basic_constraints, "critical,CA:TRUE") ||
      !add_ext(cert.get(), cert.get(), NID_key_usage, "critical,keyCertSign,cRLSign") ||
      !add_ext(cert.get(), cert.get(), NID_subject_key_identifier, "hash") ||
      X509_sign(cert.get(), key.get(), EVP_sha256()) == 0) {
    fail(error, "cannot make the CA certificate");
    return std::nullopt;
  }
  return to_pem(cert.get(), key.get(), error);
}

std::optional<Issued> issue(const Issued& ca, const CertRequest& req, std::string* error) {
  CertPtr ca_cert = read_cert(ca.cert_pem);
  KeyPtr ca_key = read_key(ca.key_pem);
  if (!ca_cert || !ca_key) {
    fail(error, "cannot read the CA certificate or key");
    return std::nullopt;
  }
  KeyPtr key = new_key(error);
  if (!key) return std::nullopt;
  CertPtr cert = new_cert(key.get(), req.common_name, req.days);
  std::string eku;
  if (req.server) eku = "serverAuth";
  if (req.client) eku += std::string(eku.empty() ? "" : ",") + "clientAuth";
  std::string san;
  for (const auto& ip : req.ip_sans) san += (san.empty() ? "IP:" : ",IP:") + ip;
  bool ok = cert && X509_set_issuer_name(cert.get(), X509_get_subject_name(ca_cert.get())) == 1 &&
            add_ext(cert.get(), ca_cert.get(), NID_basic_constraints, "critical,CA:FALSE") &&
            add_ext(cert.get(), ca_cert.get(), NID_key_usage,
                    "critical,digitalSignature,keyEncipherment") &&
            add_ext(cert.get(), ca_cert.get(), NID_subject_key_identifier, "hash") &&
            add_ext(cert.get(), ca_cert.get(), NID_authority_key_identifier, "keyid:always") &&
            (eku.empty() || add_ext(cert.get(), ca_cert.get(), NID_ext_key_usage, eku)) &&
            (san.empty() || add_ext(cert.get(), ca_cert.get(), NID_subject_alt_name, san)) &&
            X509_sign(cert.get(), ca_key.get(), EVP_sha256()) != 0;
  if (!ok) {
    fail(error, "cannot issue a certificate for " + req.common_name);
    return std::nullopt;
  }
  return to_pem(cert.get(), key.get(), error);
}

std::optional<std::string> common_name(const std::string& cert_pem, std::string* error) {
  CertPtr cert = read_cert(cert_pem);
  if (!cert) {
    fail(error, "not a PEM certificate");
    return std::nullopt;
  }
  X509_NAME* name = X509_get_subject_name(cert.get());
  int i = X509_NAME_get_index_by_NID(name, NID_commonName, -1);
  if (i < 0) {
    *error = "the certificate has no Common Name";
    return std::nullopt;
  }
  ASN1_STRING* data = X509_NAME_ENTRY_get_data(X509_NAME_get_entry(name, i));
  return std::string(reinterpret_cast<const char*>(ASN1_STRING_get0_data(data)),
                     static_cast<size_t>(ASN1_STRING_length(data)));
}

std::string host_common_name(unsigned id) {
  return "vrdma-host-" + std::to_string(id);
}

bool write_pem(const std::string& path, const std::string& pem, bool secret, std::string* error) {
  std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, secret ? 0600 : 0644);
  if (fd < 0) {
    *error = "cannot create " + tmp + ": " + std::strerror(errno);
    return false;
  }
  (void)::fchmod(fd, secret ? 0600 : 0644);  // whatever the umask said
  size_t done = 0;
  while (done < pem.size()) {
    ssize_t n = ::write(fd, pem.data() + done, pem.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      *error = "cannot write " + tmp + ": " + std::strerror(errno);
      ::close(fd);
      ::unlink(tmp.c_str());
      return false;
    }
    done += static_cast<size_t>(n);
  }
  if (::close(fd) != 0 || ::rename(tmp.c_str(), path.c_str()) != 0) {
    *error = "cannot write " + path + ": " + std::strerror(errno);
    ::unlink(tmp.c_str());
    return false;
  }
  return true;
}

}  // namespace vrdma::pki
