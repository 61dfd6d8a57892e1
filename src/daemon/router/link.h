// A link between the routers of two hosts: a transport::Link (frames both ways over TCP) inside
// TLS 1.3 (tls.h) unless the cluster runs in plaintext, and what the router knows of the host on
// the other side.
//
// With TLS in user space, small pieces of frames are copied into a staging buffer that
// SSL_write encrypts and large payloads are encrypted where they are; with kernel TLS, and in
// plaintext, sendmsg gathers the frames from the memory they point at. Large incoming payloads
// are read from the socket, or from SSL_read, straight into their destination.
#pragma once

#include <openssl/ssl.h>
#include <sys/uio.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/address.h"
#include "common/unique_fd.h"
#include "transport/link.h"
#include "transport/wire.h"

namespace vrdma::daemon {

using transport::FrameParser;
using transport::FrameSink;
using transport::LinkHandler;
using transport::PayloadDest;

class Link : public transport::Link {
 public:
  static constexpr uint32_t kRing = 4096;        // outgoing frames in flight
  static constexpr uint32_t kOwnedBytes = 4096;  // per frame, for data that must be copied

  // An outbound link starts kConnecting; an inbound one is connected (kOpen, or kHandshake
  // once use_tls() gave it a session).
  Link(uint32_t id, UniqueFd fd, bool outbound);
  ~Link() override;

  // Encrypts the link with this session (the link owns it). Before connected() for outbound
  // links, right after accept for inbound ones.
  void use_tls(SSL* ssl);
  SSL* ssl() const { return ssl_; }
  // Whether the other end has sent anything yet (its TLS hello, or a frame; read or waiting).
  bool heard_from() const;
  // Outbound: the TCP connection is up (then the handshake, or frames at once in plaintext).
  void tcp_connected();
  // Advances the TLS handshake: 1 done (the link is open), 0 not yet, -1 failed (*why).
  int handshake(std::string* why) override;
  // Which direction the kernel encrypts (kernel TLS); false in plaintext or user-space TLS.
  bool ktls_send() const { return ktls_send_; }
  bool ktls_recv() const { return ktls_recv_; }

  // What the router knows of the other side.
  uint32_t host_id = 0;        // the peer host (outbound: from the directory; inbound: once
                               // authenticated)
  bool authenticated = false;  // inbound: its Hello (and certificate) passed
  bool self = false;           // an end of the router's link to itself (router_self.cc)
  uint32_t lane = wire::kMainLane;  // which of the two hosts' links this is (wire.h: lanes)
  uint32_t peer_ipv4 = 0;      // the TCP peer's address (network order)
  std::vector<Ipv4Cidr> peer_cidrs;  // the container networks its host owns (directory)
  uint64_t peer_boot = 0;
  std::string peer_addr;
  int64_t opened_ns = 0;  // accepted or connect started
  int64_t connect_deadline_ns = 0;
  int64_t last_used_ns = 0;     // the last time a frame other than a ping passed
  bool rx_paused = false;       // not read while its responses have no room
  uint32_t routed_qps = 0;      // local RC/UC QPs whose requests go out on this link

  bool tx_pending() const override {
    return transport::Link::tx_pending() || plain_len_ || tls_out_pos_ < tls_out_len_;
  }
  // Decrypted bytes the TLS layer holds that the socket no longer signals.
  bool rx_pending() const override;
  // An inbound link yields nothing but its Hello until the Hello authenticated it: what
  // follows may be for another router thread, the one its lane belongs to (router_pool.h),
  // which takes the link with those bytes still unread.
  uint64_t read_limit() const override {
    return !outbound() && !authenticated ? sizeof(wire::Header) + sizeof(wire::Hello) : 0;
  }

 protected:
  bool flush_out() override;
  ssize_t read_some(uint8_t* buf, size_t len) override;
  ssize_t read_vec(const iovec* iov, int n) override;

 private:
  // User-space TLS: small pieces of frames are gathered into a staging buffer for SSL_write;
  // pieces this large are encrypted from where they are. The records OpenSSL makes collect in
  // tls_out_, which goes to the socket in large writes.
  static constexpr size_t kStage = 64 * 1024;
  static constexpr uint64_t kDirectWrite = 16 * 1024;
  static constexpr size_t kTlsOut = 256 * 1024;
  static constexpr size_t kTlsOutHigh = kTlsOut / 2;  // stop encrypting while this much waits
  // User-space TLS: what the socket holds is read into tls_in_ in large reads, from which
  // OpenSSL takes its records (one recv per up to kTlsIn bytes, not one per record).
  static constexpr size_t kTlsIn = 256 * 1024;
  static_assert(kFlowing < kTlsIn);

  bool flush_tls();
  // The plaintext SSL_write takes next (plain_, plain_len_): staged pieces of frames, or one
  // large piece in place. Retires the frames it is done with. False when nothing is queued.
  bool next_plain();
  bool drain_tls_out();  // writes the collected records to the socket
  static BIO_METHOD* out_method();
  static int out_write(BIO* b, const char* data, int len);
  static BIO_METHOD* in_method();
  static int in_read(BIO* b, char* data, int len);

  SSL* ssl_ = nullptr;
  bool ktls_send_ = false, ktls_recv_ = false;
  std::unique_ptr<uint8_t[]> stage_;
  const uint8_t* plain_ = nullptr;
  size_t plain_len_ = 0;
  bool plain_direct_ = false;  // plain_ points into a frame (its bytes count in tail_off_)
  std::unique_ptr<uint8_t[]> tls_out_;
  size_t tls_out_pos_ = 0, tls_out_len_ = 0;
  std::unique_ptr<uint8_t[]> tls_in_;
  size_t tls_in_pos_ = 0, tls_in_len_ = 0;
};

}  // namespace vrdma::daemon
