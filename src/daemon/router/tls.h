// TLS 1.3 between routers, with OpenSSL: one context per daemon (the cluster CA, this host's
// certificate and key), both sides present a certificate and verify the other's against the
// CA. A host's certificate names it: subject CN "vrdma-host-<id>" and a subjectAltName IP of
// its router address.
//
// Where the kernel and OpenSSL offer it (the kernel's "tls" ULP, OpenSSL built with kTLS), the
// context asks for kernel TLS: after the handshake the kernel encrypts what the link's
// sendmsg writes (and decrypts what recvmsg reads), so payloads still go from and to the
// clients' memory without a copy in vrdmad. Elsewhere the link encrypts in user space through
// SSL_write / SSL_read.
#pragma once

#include <openssl/ssl.h>

#include <cstdint>
#include <memory>
#include <string>

namespace vrdma::daemon {

struct TlsFiles {
  std::string ca;    // PEM: the cluster CA that signs every host's certificate
  std::string cert;  // PEM: this host's certificate (chain)
  std::string key;   // PEM: its private key
};

class TlsContext {
 public:
  // nullptr and *error set when a file cannot be read or the key does not match.
  static std::unique_ptr<TlsContext> load(const TlsFiles& files, std::string* error);
  ~TlsContext();
  TlsContext(const TlsContext&) = delete;
  TlsContext& operator=(const TlsContext&) = delete;

  // A new session on a connected socket, as the connecting side (`expect_ipv4`: the address
  // the peer's certificate must name, network order) or the accepting side (0).
  SSL* new_session(int fd, bool client, uint32_t expect_ipv4, std::string* error) const;
  // This host's id, from its own certificate's CN ("vrdma-host-<id>"); false if it has none.
  bool own_host_id(uint32_t* id) const;

 private:
  explicit TlsContext(SSL_CTX* ctx) : ctx_(ctx) {}
  SSL_CTX* ctx_;
};

// The host id a verified peer certificate names (its CN "vrdma-host-<id>"). False when there
// is no certificate or the CN has another form.
bool tls_peer_host_id(SSL* ssl, uint32_t* id);
// Whether the peer's certificate holds subjectAltName IP `ipv4` (network order).
bool tls_peer_has_ip(SSL* ssl, uint32_t ipv4);
// The CN of a certificate subject, parsed: "vrdma-host-<id>".
bool parse_host_cn(const std::string& cn, uint32_t* id);
// The last OpenSSL error of this thread as text (and clears the queue).
std::string tls_error_text();

}  // namespace vrdma::daemon
