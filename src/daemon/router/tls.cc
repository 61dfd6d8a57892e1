#include "daemon/router/tls.h"

#include <arpa/inet.h>
#include <openssl/err.h>
#include <openssl/x509v3.h>

#include <charconv>
#include <cstring>

namespace vrdma::daemon {

namespace {

constexpr const char* kCnPrefix = "vrdma-host-";

std::string subject_cn(X509* cert) {
  X509_NAME* name = X509_get_subject_name(cert);
  int idx = name ? X509_NAME_get_index_by_NID(name, NID_commonName, -1) : -1;
  if (idx < 0) return {};
  // One CN only: a second one could disagree with the first.
  if (X509_NAME_get_index_by_NID(name, NID_commonName, idx) >= 0) return {};
  ASN1_STRING* data = X509_NAME_ENTRY_get_data(X509_NAME_get_entry(name, idx));
  const unsigned char* p = ASN1_STRING_get0_data(data);
  int len = ASN1_STRING_length(data);
  if (!p || len <= 0 || std::memchr(p, 0, static_cast<size_t>(len))) return {};
  return std::string(reinterpret_cast<const char*>(p), static_cast<size_t>(len));
}

}  // namespace

std::string tls_error_text() {
  unsigned long e = ERR_get_error();
  std::string text;
  while (e) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof(buf));
    if (!text.empty()) text += "; ";
    text += buf;
    e = ERR_get_error();
  }
  return text.empty() ? "unknown TLS error" : text;
}

bool parse_host_cn(const std::string& cn, uint32_t* id) {
  size_t n = std::strlen(kCnPrefix);
  if (cn.size() <= n || cn.compare(0, n, kCnPrefix) != 0) return false;
  const char* b = cn.data() + n;
  const char* e = cn.data() + cn.size();
  if (*b == '+' || (*b == '0' && e - b > 1)) return false;  // one spelling per id
  auto [p, ec] = std::from_chars(b, e, *id);
  return ec == std::errc() && p == e;
}

std::unique_ptr<TlsContext> TlsContext::load(const TlsFiles& files, std::string* error) {
  ERR_clear_error();
  SSL_CTX* ctx = SSL_CTX_new(TLS_method());
  if (!ctx) {
    *error = tls_error_text();
    return nullptr;
  }
  std::unique_ptr<TlsContext> out(new TlsContext(ctx));
  auto fail = [&](const std::string& what) {
    *error = what + ": " + tls_error_text();
    return nullptr;
  };
  SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
  SSL_CTX_set_max_proto_version(ctx, TLS1_3_VERSION);
  // AES-GCM first: the fastest with AES instructions, and what kernel TLS offloads.
  if (SSL_CTX_set_ciphersuites(
          ctx, "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256") != 1)
    return fail("TLS cipher suites");
  if (SSL_CTX_load_verify_locations(ctx, files.ca.c_str(), nullptr) != 1)
    return fail("CA " + files.ca);
  if (SSL_CTX_use_certificate_chain_file(ctx, files.cert.c_str()) != 1)
    return fail("certificate " + files.cert);
  if (SSL_CTX_use_PrivateKey_file(ctx, files.key.c_str(), SSL_FILETYPE_PEM) != 1)
    return fail("key " + files.key);
  if (SSL_CTX_check_private_key(ctx) != 1)
    return fail("key " + files.key + " does not match " + files.cert);
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  SSL_CTX_set_verify_depth(ctx, 4);
  // No session tickets: nothing but application data follows the handshake (kernel TLS
  // receive takes records of application data only), and links are long-lived anyway.
  SSL_CTX_set_num_tickets(ctx, 0);
  SSL_CTX_set_options(ctx, SSL_OP_NO_TICKET | SSL_OP_ENABLE_KTLS);
  SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  // Read a record with one call rather than its header and body with one each (the buffer
  // stays one record long: OpenSSL moves what is left of a larger one to its front at every
  // record).
  SSL_CTX_set_read_ahead(ctx, 1);
  // Our own certificate must be one the peers accept: signed by the CA, named for a host.
  uint32_t id;
  if (!out->own_host_id(&id)) {
    *error = "certificate " + files.cert + ": subject CN is not vrdma-host-<host id>";
    return nullptr;
  }
  X509_STORE_CTX* check = X509_STORE_CTX_new();
  bool chains = check && X509_STORE_CTX_init(check, SSL_CTX_get_cert_store(ctx),
                                             SSL_CTX_get0_certificate(ctx), nullptr) == 1 &&
                X509_verify_cert(check) == 1;
  int verr = check ? X509_STORE_CTX_get_error(check) : 0;
  X509_STORE_CTX_free(check);
  if (!chains) {
    *error = "certificate " + files.cert + " is not signed by the CA " + files.ca + " (" +
             X509_verify_cert_error_string(verr) + ")";
    return nullptr;
  }
  return out;
}

TlsContext::~TlsContext() {
  SSL_CTX_free(ctx_);
}

bool TlsContext::own_host_id(uint32_t* id) const {
  X509* cert = SSL_CTX_get0_certificate(ctx_);
  return cert && parse_host_cn(subject_cn(cert), id);
}

SSL* TlsContext::new_session(int fd, bool client, uint32_t expect_ipv4, std::string* error) const {
  ERR_clear_error();
  SSL* ssl = SSL_new(ctx_);
  if (!ssl) {
    *error = tls_error_text();
    return nullptr;
  }
  if (SSL_set_fd(ssl, fd) != 1) {
    *error = tls_error_text();
    SSL_free(ssl);
    return nullptr;
  }
  if (client) {
    SSL_set_connect_state(ssl);
    // The server's certificate must name the address we connected to.
    char text[INET_ADDRSTRLEN];
    in_addr a{expect_ipv4};
    if (!inet_ntop(AF_INET, &a, text, sizeof(text)) ||
        X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), text) != 1) {
      *error = "cannot set the expected address";
      SSL_free(ssl);
      return nullptr;
    }
  } else {
    SSL_set_accept_state(ssl);
  }
  return ssl;
}

// (These leave OpenSSL's error queue empty: the link's reads and writes rely on it.)
bool tls_peer_host_id(SSL* ssl, uint32_t* id) {
  X509* cert = SSL_get0_peer_certificate(ssl);
  bool ok = cert && SSL_get_verify_result(ssl) == X509_V_OK && parse_host_cn(subject_cn(cert), id);
  ERR_clear_error();
  return ok;
}

bool tls_peer_has_ip(SSL* ssl, uint32_t ipv4) {
  X509* cert = SSL_get0_peer_certificate(ssl);
  if (!cert) return false;
  unsigned char raw[4];
  std::memcpy(raw, &ipv4, 4);
  bool ok = X509_check_ip(cert, raw, sizeof(raw), 0) == 1;
  ERR_clear_error();
  return ok;
}

}  // namespace vrdma::daemon
