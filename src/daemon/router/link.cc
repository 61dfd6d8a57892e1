#include "daemon/router/link.h"

#include <errno.h>
#include <openssl/err.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <algorithm>

#include "daemon/router/tls.h"

namespace vrdma::daemon {

namespace {
constexpr int kTlsWritesPerFlush = 64;  // SSL_write calls per flush(): bounded work per pass
// A BIO of the link's own buffers (one direction each): flushing is a no-op, there is nothing
// to set up.
BIO_METHOD* sink_method(const char* name, int (*write)(BIO*, const char*, int),
                        int (*read)(BIO*, char*, int)) {
  BIO_METHOD* meth = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, name);
  if (write) BIO_meth_set_write(meth, write);
  if (read) BIO_meth_set_read(meth, read);
  BIO_meth_set_ctrl(meth, [](BIO*, int cmd, long, void*) -> long {
    return cmd == BIO_CTRL_FLUSH ? 1 : 0;
  });
  BIO_meth_set_create(meth, [](BIO* b) {
    BIO_set_init(b, 1);
    return 1;
  });
  return meth;
}

}  // namespace

Link::Link(uint32_t id, UniqueFd fd, bool outbound)
    : transport::Link(id, std::move(fd), outbound, transport::LinkSizes{kRing, kOwnedBytes}) {}

Link::~Link() {
  if (ssl_) SSL_free(ssl_);
}

void Link::use_tls(SSL* ssl) {
  ssl_ = ssl;
  if (!outbound()) set_state(State::kHandshake);
}

void Link::tcp_connected() {
  set_state(ssl_ ? State::kHandshake : State::kOpen);
}

bool Link::heard_from() const {
  if (bytes_in || (ssl_ && !SSL_in_before(ssl_))) return true;
  int waiting = 0;
  return ::ioctl(fd(), FIONREAD, &waiting) == 0 && waiting > 0;
}

int Link::handshake(std::string* why) {
  if (state() != State::kHandshake) return state() == State::kOpen ? 1 : 0;
  ERR_clear_error();
  int rc = SSL_do_handshake(ssl_);
  if (rc == 1) {
    ERR_clear_error();  // reads and writes from now on expect an empty error queue
    set_state(State::kOpen);
    ktls_send_ = BIO_get_ktls_send(SSL_get_wbio(ssl_)) > 0;
    ktls_recv_ = BIO_get_ktls_recv(SSL_get_rbio(ssl_)) > 0;
    if (!ktls_send_) {
      // Records collect in tls_out_ from now on (nothing of the handshake is left to write).
      BIO* out = BIO_new(out_method());
      if (!out) {
        *why = "TLS: " + tls_error_text();
        return -1;
      }
      BIO_set_data(out, this);
      tls_out_.reset(new uint8_t[kTlsOut]);
      SSL_set0_wbio(ssl_, out);
    }
    if (!ktls_recv_) {
      // Records are read from tls_in_ from now on (OpenSSL keeps what it read ahead).
      BIO* in = BIO_new(in_method());
      if (!in) {
        *why = "TLS: " + tls_error_text();
        return -1;
      }
      BIO_set_data(in, this);
      tls_in_.reset(new uint8_t[kTlsIn]);
      SSL_set0_rbio(ssl_, in);
    }
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
  return ssl_ && open() && (SSL_has_pending(ssl_) || tls_in_pos_ < tls_in_len_);
}

bool Link::flush_out() { return ssl_ && !ktls_send_ ? flush_tls() : transport::Link::flush_out(); }

BIO_METHOD* Link::out_method() {
  static BIO_METHOD* m = sink_method("vrdma link", &Link::out_write, nullptr);
  return m;
}

int Link::out_write(BIO* b, const char* data, int len) {
  auto* l = static_cast<Link*>(BIO_get_data(b));
  BIO_clear_retry_flags(b);
  // Written-out space at the front is reused once it is half the buffer: at most one byte
  // moved per byte sent.
  if (l->tls_out_pos_ >= kTlsOut / 2) {
    memmove(l->tls_out_.get(), l->tls_out_.get() + l->tls_out_pos_,
            l->tls_out_len_ - l->tls_out_pos_);
    l->tls_out_len_ -= l->tls_out_pos_;
    l->tls_out_pos_ = 0;
  }
  size_t n = std::min(kTlsOut - l->tls_out_len_, static_cast<size_t>(len));
  if (!n) {
    BIO_set_retry_write(b);
    return -1;
  }
  memcpy(l->tls_out_.get() + l->tls_out_len_, data, n);
  l->tls_out_len_ += n;
  return static_cast<int>(n);
}

BIO_METHOD* Link::in_method() {
  static BIO_METHOD* m = sink_method("vrdma link in", nullptr, &Link::in_read);
  return m;
}

int Link::in_read(BIO* b, char* data, int len) {
  auto* l = static_cast<Link*>(BIO_get_data(b));
  BIO_clear_retry_flags(b);
  if (len <= 0) return 0;
  if (l->tls_in_pos_ == l->tls_in_len_) {
    l->tls_in_pos_ = l->tls_in_len_ = 0;
    iovec v{l->tls_in_.get(), kTlsIn};
    ssize_t n = l->socket_read(&v, 1);  // keeps rx_ready (kFlowing < kTlsIn)
    if (n == 0) return 0;               // the end of the stream
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) BIO_set_retry_read(b);
      return -1;
    }
    l->tls_in_len_ = static_cast<size_t>(n);
  }
  size_t n = std::min(l->tls_in_len_ - l->tls_in_pos_, static_cast<size_t>(len));
  memcpy(data, l->tls_in_.get() + l->tls_in_pos_, n);
  l->tls_in_pos_ += n;
  return static_cast<int>(n);
}

bool Link::next_plain() {
  if (plain_len_) return true;
  if (!stage_) stage_.reset(new uint8_t[kStage]);
  size_t staged = 0;
  while (tail_ != head_) {
    const Out& o = out_at(tail_);
    uint64_t skip = tail_off_;
    int i = 0;
    while (i < o.niov && skip >= o.iov[i].iov_len) skip -= o.iov[i++].iov_len;
    if (i == o.niov) {
      // The frame is encrypted or staged: its slot (and the memory its payload came from)
      // is free.
      tail_off_ = 0;
      ++tail_;
      continue;
    }
    const uint64_t left = o.iov[i].iov_len - skip;
    const uint8_t* p = static_cast<const uint8_t*>(o.iov[i].iov_base) + skip;
    if (left >= kDirectWrite) {
      if (staged) break;  // what is staged goes first
      plain_ = p;
      plain_len_ = left;
      plain_direct_ = true;
      return true;
    }
    size_t n = std::min<size_t>(left, kStage - staged);
    if (!n) break;
    memcpy(stage_.get() + staged, p, n);
    staged += n;
    tail_off_ += n;
  }
  if (!staged) return false;
  plain_ = stage_.get();
  plain_len_ = staged;
  plain_direct_ = false;
  return true;
}

bool Link::drain_tls_out() {
  while (tls_out_pos_ < tls_out_len_) {
    ssize_t w = ::send(fd(), tls_out_.get() + tls_out_pos_, tls_out_len_ - tls_out_pos_,
                       MSG_DONTWAIT | MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        tx_blocked = true;
        return true;
      }
      if (errno == EINTR) continue;
      return false;
    }
    tls_out_pos_ += static_cast<size_t>(w);
    ++socket_writes;
  }
  tls_out_pos_ = tls_out_len_ = 0;
  return true;
}

bool Link::flush_tls() {
  // SSL_write makes one record per call (partial writes); the records collect in tls_out_ and
  // go to the socket together, in one send per kTlsOutHigh bytes of them, not one per record.
  for (int i = 0; i < kTlsWritesPerFlush; ++i) {
    if (tls_out_len_ - tls_out_pos_ >= kTlsOutHigh) {
      if (!drain_tls_out()) return false;
      if (tls_out_len_ - tls_out_pos_ >= kTlsOutHigh) return true;  // the socket is full
    }
    if (!next_plain()) break;
    // (The error queue is empty: a failure clears it.)
    int n = SSL_write(ssl_, plain_, static_cast<int>(std::min<size_t>(plain_len_, 1 << 30)));
    if (n > 0) {
      plain_ += n;
      plain_len_ -= static_cast<size_t>(n);
      if (plain_direct_) tail_off_ += static_cast<uint64_t>(n);
      bytes_out += static_cast<uint64_t>(n);
      continue;
    }
    int e = SSL_get_error(ssl_, n);
    if (e == SSL_ERROR_WANT_WRITE || e == SSL_ERROR_WANT_READ) {
      // tls_out_ is full: to the socket, then on if it took some.
      const size_t before = tls_out_len_ - tls_out_pos_;
      if (!drain_tls_out()) return false;
      if (tls_out_len_ - tls_out_pos_ == before) return true;
      continue;
    }
    ERR_clear_error();
    return false;
  }
  return drain_tls_out();
}

ssize_t Link::read_some(uint8_t* buf, size_t len) {
  if (!ssl_ || (ktls_recv_ && !SSL_has_pending(ssl_))) return transport::Link::read_some(buf, len);
  // (The error queue is empty: every failure below clears it, so no call per read does.)
  errno = 0;
  int n = SSL_read(ssl_, buf, static_cast<int>(std::min<size_t>(len, INT32_MAX)));
  if (n > 0) return n;
  int e = SSL_get_error(ssl_, n);
  if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
    errno = EAGAIN;
    return -1;
  }
  // The peer's close_notify, or its end of the stream without one (a router just closes).
  if (e == SSL_ERROR_ZERO_RETURN || (e == SSL_ERROR_SYSCALL && ERR_peek_error() == 0 && !errno) ||
      (e == SSL_ERROR_SSL && ERR_GET_REASON(ERR_peek_error()) == SSL_R_UNEXPECTED_EOF_WHILE_READING)) {
    ERR_clear_error();
    return 0;
  }
  ERR_clear_error();
  if (!errno || errno == EAGAIN) errno = EPROTO;
  return -1;
}

ssize_t Link::read_vec(const iovec* iov, int n) {
  if (!ssl_ || (ktls_recv_ && !SSL_has_pending(ssl_))) return socket_read(iov, n);
  // SSL_read fills one buffer at a time.
  return read_some(static_cast<uint8_t*>(iov[0].iov_base), iov[0].iov_len);
}

}  // namespace vrdma::daemon
