#include "daemon/router/link.h"

#include <errno.h>
#include <openssl/err.h>
#include <string.h>
#include <sys/socket.h>

#include <algorithm>

#include "daemon/router/tls.h"

namespace vrdma::daemon {

namespace {
constexpr int kIovBatch = 64;
constexpr int kTlsWritesPerFlush = 64;  // SSL_write calls per flush(): bounded work per pass
}  // namespace

Link::Link(uint32_t id, UniqueFd fd, bool outbound)
    : id_(id),
      fd_(std::move(fd)),
      outbound_(outbound),
      state_(outbound ? State::kConnecting : State::kOpen),
      rbuf_(new uint8_t[kRecvBuffer]) {}

Link::~Link() {
  if (ssl_) SSL_free(ssl_);
}

void Link::use_tls(SSL* ssl) {
  ssl_ = ssl;
  if (!outbound_) state_ = State::kHandshake;
}

void Link::tcp_connected() {
  state_ = ssl_ ? State::kHandshake : State::kOpen;
}

int Link::handshake(std::string* why) {
  if (state_ != State::kHandshake) return state_ == State::kOpen ? 1 : 0;
  ERR_clear_error();
  int rc = SSL_do_handshake(ssl_);
  if (rc == 1) {
    state_ = State::kOpen;
    ktls_send_ = BIO_get_ktls_send(SSL_get_wbio(ssl_)) > 0;
    ktls_recv_ = BIO_get_ktls_recv(SSL_get_rbio(ssl_)) > 0;
    return 1;
  }
  int e = SSL_get_error(ssl_, rc);
  if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) return 0;
  long verify = SSL_get_verify_result(ssl_);
  if (verify != X509_V_OK) {
    *why = std::string("peer certificate refused: ") + X509_verify_cert_error_string(verify);
    ERR_clear_error();
  } else if (e == SSL_ERROR_SYSCALL && ERR_peek_error() == 0) {
    *why = errno ? std::string("TLS handshake: ") + strerror(errno)
                 : std::string("TLS handshake: connection closed by the peer");
  } else {
    *why = "TLS handshake: " + tls_error_text();
  }
  return -1;
}

bool Link::rx_pending() const {
  return ssl_ && state_ == State::kOpen && SSL_has_pending(ssl_);
}

bool Link::send(wire::Type type, const void* body, uint32_t body_len, const shm::Seg* payload,
                int nseg, uint64_t payload_len, bool copy) {
  if (!ring_) {
    ring_.reset(new Out[kRing]);
    owned_.reset(new uint8_t[size_t(kRing) * kOwnedBytes]);
  }
  if (!has_room() || body_len > sizeof(Out::hdr) - sizeof(wire::Header) ||
      (copy && payload_len > kOwnedBytes) || nseg > static_cast<int>(shm::kMaxSendSge))
    return false;
  uint32_t slot = static_cast<uint32_t>(head_ % kRing);
  Out& o = ring_[slot];
  wire::Header h{};
  h.type = static_cast<uint8_t>(type);
  h.payload = static_cast<uint32_t>(payload_len);
  memcpy(o.hdr, &h, sizeof(h));
  memcpy(o.hdr + sizeof(h), body, body_len);
  o.hdr_len = sizeof(h) + body_len;
  o.iov[0] = iovec{o.hdr, o.hdr_len};
  o.niov = 1;
  if (payload_len) {
    if (copy) {
      uint8_t* buf = owned_.get() + size_t(slot) * kOwnedBytes;
      uint64_t off = 0;
      for (int i = 0; i < nseg && off < payload_len; ++i) {
        uint64_t n = std::min(payload[i].len, payload_len - off);
        memcpy(buf + off, payload[i].p, n);
        off += n;
      }
      o.iov[o.niov++] = iovec{buf, payload_len};
    } else {
      uint64_t left = payload_len;
      for (int i = 0; i < nseg && left; ++i) {
        uint64_t n = std::min(payload[i].len, left);
        if (n) o.iov[o.niov++] = iovec{payload[i].p, n};
        left -= n;
      }
    }
  }
  ++head_;
  return true;
}

bool Link::flush(int64_t now) {
  if (state_ != State::kOpen || !tx_pending()) return true;
  uint64_t before = bytes_out;
  bool ok = ssl_ && !ktls_send_ ? flush_tls() : flush_plain();
  if (bytes_out != before || !tx_pending()) {
    tx_stalled_ns = 0;
  } else if (!tx_stalled_ns) {
    tx_stalled_ns = now;
  }
  return ok;
}

bool Link::flush_plain() {
  while (tail_ != head_) {
    iovec iov[kIovBatch];
    int n = 0;
    uint64_t skip = tail_off_;
    for (uint64_t f = tail_; f != head_ && n < kIovBatch; ++f) {
      const Out& o = ring_[f % kRing];
      if (n + o.niov > kIovBatch) break;
      for (int i = 0; i < o.niov; ++i) {
        iovec v = o.iov[i];
        if (skip) {
          if (skip >= v.iov_len) {
            skip -= v.iov_len;
            continue;
          }
          v.iov_base = static_cast<uint8_t*>(v.iov_base) + skip;
          v.iov_len -= skip;
          skip = 0;
        }
        iov[n++] = v;
      }
    }
    msghdr mh{};
    mh.msg_iov = iov;
    mh.msg_iovlen = static_cast<size_t>(n);
    ssize_t w = ::sendmsg(fd_.get(), &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return true;
      if (errno == EINTR) continue;
      return false;
    }
    bytes_out += static_cast<uint64_t>(w);
    // Retire whole frames.
    uint64_t left = static_cast<uint64_t>(w) + tail_off_;
    tail_off_ = 0;
    while (tail_ != head_) {
      const Out& o = ring_[tail_ % kRing];
      uint64_t size = 0;
      for (int i = 0; i < o.niov; ++i) size += o.iov[i].iov_len;
      if (left < size) {
        tail_off_ = left;
        break;
      }
      left -= size;
      ++tail_;
    }
    if (tail_off_) return true;  // the socket is full
  }
  return true;
}

void Link::stage_frames() {
  if (!stage_) stage_.reset(new uint8_t[kStage]);
  while (tail_ != head_ && stage_len_ < kStage) {
    const Out& o = ring_[tail_ % kRing];
    uint64_t size = 0;
    for (int i = 0; i < o.niov; ++i) size += o.iov[i].iov_len;
    uint64_t skip = tail_off_;
    for (int i = 0; i < o.niov && stage_len_ < kStage; ++i) {
      uint64_t len = o.iov[i].iov_len;
      if (skip >= len) {
        skip -= len;
        continue;
      }
      uint64_t n = std::min<uint64_t>(len - skip, kStage - stage_len_);
      memcpy(stage_.get() + stage_len_, static_cast<uint8_t*>(o.iov[i].iov_base) + skip, n);
      stage_len_ += n;
      tail_off_ += n;
      skip = 0;
    }
    if (tail_off_ < size) return;  // the rest of it next time
    // The frame is copied: its slot (and the memory its payload came from) is free.
    tail_off_ = 0;
    ++tail_;
  }
}

bool Link::flush_tls() {
  for (int i = 0; i < kTlsWritesPerFlush; ++i) {
    if (stage_pos_ == stage_len_) {
      stage_pos_ = stage_len_ = 0;
      stage_frames();
      if (!stage_len_) return true;
    }
    ERR_clear_error();
    int n = SSL_write(ssl_, stage_.get() + stage_pos_, static_cast<int>(stage_len_ - stage_pos_));
    if (n > 0) {
      stage_pos_ += static_cast<size_t>(n);
      bytes_out += static_cast<uint64_t>(n);
      continue;
    }
    int e = SSL_get_error(ssl_, n);
    if (e == SSL_ERROR_WANT_WRITE || e == SSL_ERROR_WANT_READ) return true;
    ERR_clear_error();
    return false;
  }
  return true;
}

ssize_t Link::read_some(uint8_t* buf, size_t len) {
  if (!ssl_ || (ktls_recv_ && !SSL_has_pending(ssl_))) {
    ssize_t n = ::recv(fd_.get(), buf, len, MSG_DONTWAIT);
    return n;
  }
  ERR_clear_error();
  errno = 0;
  int n = SSL_read(ssl_, buf, static_cast<int>(std::min<size_t>(len, INT32_MAX)));
  if (n > 0) return n;
  int e = SSL_get_error(ssl_, n);
  if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
    errno = EAGAIN;
    return -1;
  }
  if (e == SSL_ERROR_ZERO_RETURN || (e == SSL_ERROR_SYSCALL && ERR_peek_error() == 0 && !errno))
    return 0;
  ERR_clear_error();
  if (!errno || errno == EAGAIN) errno = EPROTO;
  return -1;
}

ssize_t Link::read_vec(const iovec* iov, int n) {
  if (!ssl_ || (ktls_recv_ && !SSL_has_pending(ssl_))) {
    msghdr mh{};
    mh.msg_iov = const_cast<iovec*>(iov);
    mh.msg_iovlen = static_cast<size_t>(n);
    return ::recvmsg(fd_.get(), &mh, MSG_DONTWAIT);
  }
  // SSL_read fills one buffer at a time.
  return read_some(static_cast<uint8_t*>(iov[0].iov_base), iov[0].iov_len);
}

bool Link::on_frame(wire::Type type, const uint8_t* body, uint32_t payload, PayloadDest& dest,
                    const char** why) {
  return handler_->on_frame(*this, type, body, payload, dest, why);
}

void Link::on_payload_data(const uint8_t* data, size_t len) {
  handler_->on_payload_data(*this, data, len);
}

void Link::on_payload() {
  handler_->on_payload(*this);
}

bool Link::receive(LinkHandler& h, size_t budget, const char** why) {
  if (state_ != State::kOpen) return true;
  handler_ = &h;
  size_t got = 0;
  while (got < budget) {
    iovec iov[shm::kMaxRecvSge + 1];
    int k = parser_.direct_iov(iov, shm::kMaxRecvSge + 1, kDirectRead);
    ssize_t n;
    if (k) {
      // Large payload: straight from the socket (or the TLS layer) into its destination.
      n = read_vec(iov, k);
      if (n > 0) parser_.direct_done(static_cast<uint64_t>(n), *this);
    } else {
      // At most what is left of the budget: the caller bounds how many frames one call
      // dispatches.
      n = read_some(rbuf_.get(), std::min(kRecvBuffer, budget - got));
      if (n > 0 && !parser_.feed(rbuf_.get(), static_cast<size_t>(n), *this, why)) return false;
    }
    if (n > 0) {
      got += static_cast<size_t>(n);
      bytes_in += static_cast<uint64_t>(n);
      continue;
    }
    if (n == 0) {
      *why = "closed by the peer";
      return false;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK) return true;
    if (errno == EINTR) continue;
    *why = strerror(errno);
    return false;
  }
  return true;
}

}  // namespace vrdma::daemon
