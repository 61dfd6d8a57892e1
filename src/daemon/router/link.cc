#include "daemon/router/link.h"

#include <errno.h>
#include <openssl/err.h>
#include <string.h>
#include <sys/socket.h>

#include <algorithm>

#include "daemon/router/tls.h"

namespace vrdma::daemon {

namespace {
constexpr int kIovBatch = 1024;  // IOV_MAX: what one sendmsg takes
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
    : id_(id),
      fd_(std::move(fd)),
      outbound_(outbound),
      state_(outbound ? State::kConnecting : State::kOpen),
      rbuf_(new uint8_t[kRecvBuffer]) {}

Link::~Link() {
  if (ssl_) SSL_free(ssl_);
  if (joined_) {
    // The other end reads its socket from now on: the end of the stream is there.
    joined_->joined_ = nullptr;
    joined_->rx_ready = true;
  }
}

void Link::join(Link& a, Link& b) {
  a.joined_ = &b;
  b.joined_ = &a;
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
    ERR_clear_error();  // reads and writes from now on expect an empty error queue
    state_ = State::kOpen;
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
  return ssl_ && state_ == State::kOpen && (SSL_has_pending(ssl_) || tls_in_pos_ < tls_in_len_);
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
  bytes_queued += o.hdr_len + payload_len;
  ++head_;
  return true;
}

bool Link::flush(int64_t now) {
  if (state_ != State::kOpen || !tx_pending()) return true;
  if (joined_) {
    // Nothing to write: the other end takes the frames from the ring when it reads.
    joined_->rx_ready = true;
    tx_stalled_ns = 0;
    return true;
  }
  uint64_t before = bytes_out;
  bool ok = ssl_ && !ktls_send_ ? flush_tls() : flush_plain();
  if (bytes_out != before || !tx_pending()) tx_stalled_ns = 0;
  // Refused (part of) this write: the clock runs until the socket has room and takes more
  // (a peer that reads on frees room within moments; one that reads nothing never does).
  if (tx_pending() && (tx_blocked || bytes_out == before) && !tx_stalled_ns) tx_stalled_ns = now;
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
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        tx_blocked = true;
        return true;
      }
      if (errno == EINTR) continue;
      return false;
    }
    bytes_out += static_cast<uint64_t>(w);
    ++socket_writes;
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
    if (tail_off_) {  // the socket is full
      tx_blocked = true;
      return true;
    }
  }
  return true;
}

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
    const Out& o = ring_[tail_ % kRing];
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
    ssize_t w = ::send(fd_.get(), tls_out_.get() + tls_out_pos_, tls_out_len_ - tls_out_pos_,
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

ssize_t Link::socket_read(const iovec* iov, int n) {
  if (!rx_ready) {  // nothing since the socket was last found empty
    errno = EAGAIN;
    return -1;
  }
  if (joined_) {
    const size_t got = joined_->take(iov, n);
    rx_ready = joined_->tx_pending();  // its next flush says when more comes
    if (!got) {
      errno = EAGAIN;
      return -1;
    }
    return static_cast<ssize_t>(got);
  }
  msghdr mh{};
  mh.msg_iov = const_cast<iovec*>(iov);
  mh.msg_iovlen = static_cast<size_t>(n);
  ssize_t got = ::recvmsg(fd_.get(), &mh, MSG_DONTWAIT);
  if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) rx_ready = false;
  if (got > 0) {
    ++socket_reads;
    size_t asked = 0;
    for (int i = 0; i < n; ++i) asked += iov[i].iov_len;
    // It had no more, and little: more is not on its way.
    if (static_cast<size_t>(got) < asked && static_cast<size_t>(got) < kFlowing) rx_ready = false;
  }
  return got;
}

size_t Link::take(const iovec* iov, int n) {
  size_t got = 0;
  int i = 0;
  size_t at = 0;  // into iov[i]
  while (tail_ != head_) {
    const Out& o = ring_[tail_ % kRing];
    uint64_t skip = tail_off_;
    int k = 0;
    while (k < o.niov && skip >= o.iov[k].iov_len) skip -= o.iov[k++].iov_len;
    if (k == o.niov) {  // taken whole
      tail_off_ = 0;
      ++tail_;
      continue;
    }
    if (i == n) break;
    const size_t m = std::min<size_t>(o.iov[k].iov_len - skip, iov[i].iov_len - at);
    // (memmove: the two ends' memory could be one client's mapped twice.)
    memmove(static_cast<uint8_t*>(iov[i].iov_base) + at,
            static_cast<const uint8_t*>(o.iov[k].iov_base) + skip, m);
    got += m;
    tail_off_ += m;
    at += m;
    if (at == iov[i].iov_len) {
      ++i;
      at = 0;
    }
  }
  bytes_out += got;
  return got;
}

ssize_t Link::read_some(uint8_t* buf, size_t len) {
  if (!ssl_ || (ktls_recv_ && !SSL_has_pending(ssl_))) {
    iovec v{buf, len};
    return socket_read(&v, 1);
  }
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

bool Link::receive(LinkHandler& h, size_t budget, const char** why, size_t direct_budget) {
  if (state_ != State::kOpen) return true;
  handler_ = &h;
  // An inbound link yields nothing but its Hello until the Hello authenticated it: what
  // follows may be for another router thread, the one its lane belongs to (router_pool.h),
  // which takes the link with those bytes still unread.
  constexpr size_t kHelloFrame = sizeof(wire::Header) + sizeof(wire::Hello);
  const bool hello_only = !outbound_ && !authenticated;
  if (hello_only && bytes_in >= kHelloFrame) return true;
  if (hello_only) budget = std::min<size_t>(budget, kHelloFrame - bytes_in);
  size_t got = 0, total = 0;
  while (got < budget && total < direct_budget) {
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
      if (n > 0) got += static_cast<size_t>(n);
    }
    if (n > 0) {
      total += static_cast<size_t>(n);
      bytes_in += static_cast<uint64_t>(n);
      if (hello_only) return true;
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
