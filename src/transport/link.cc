#include "transport/link.h"

#include <errno.h>
#include <linux/sockios.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <algorithm>
#include <climits>

namespace vrdma::transport {

namespace {
constexpr int kIovBatch = 1024;  // IOV_MAX: what one sendmsg takes
}  // namespace

Link::Link(uint32_t id, UniqueFd fd, bool outbound, const LinkSizes& sizes)
    : id_(id),
      fd_(std::move(fd)),
      outbound_(outbound),
      state_(outbound ? State::kConnecting : State::kOpen),
      sizes_(sizes),
      rbuf_(new uint8_t[sizes.recv_buffer]) {}

Link::~Link() {
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

void Link::connected() {
  if (state_ == State::kConnecting) state_ = State::kOpen;
}

int Link::handshake(std::string* /*why*/) {
  return state_ == State::kOpen ? 1 : 0;
}

bool Link::send(wire::Type type, const void* body, uint32_t body_len, const shm::Seg* payload,
                int nseg, uint64_t payload_len, bool copy) {
  if (!ring_) ring_.reset(new Out[sizes_.ring]);
  if (copy && !owned_) owned_.reset(new uint8_t[size_t(sizes_.ring) * sizes_.owned_bytes]);
  if (!has_room() || body_len > sizeof(Out::hdr) - sizeof(wire::Header) ||
      (copy && payload_len > sizes_.owned_bytes) || nseg > static_cast<int>(shm::kMaxSendSge))
    return false;
  uint32_t slot = static_cast<uint32_t>(head_ % sizes_.ring);
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
      uint8_t* buf = owned_.get() + size_t(slot) * sizes_.owned_bytes;
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
  bool ok = flush_out();
  if (bytes_out != before || !tx_pending()) tx_stalled_ns = 0;
  // Refused (part of) this write: the clock runs until the socket has room and takes more
  // (a peer that reads on frees room within moments; one that reads nothing never does).
  if (tx_pending() && (tx_blocked || bytes_out == before) && !tx_stalled_ns) tx_stalled_ns = now;
  return ok;
}

bool Link::flush_out() { return flush_plain(); }

bool Link::flush_plain() {
  while (tail_ != head_) {
    iovec iov[kIovBatch];
    int n = 0;
    uint64_t skip = tail_off_;
    for (uint64_t f = tail_; f != head_ && n < kIovBatch; ++f) {
      const Out& o = out_at(f);
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
      const Out& o = out_at(tail_);
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
    const Out& o = out_at(tail_);
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
  iovec v{buf, len};
  return socket_read(&v, 1);
}

ssize_t Link::read_vec(const iovec* iov, int n) { return socket_read(iov, n); }

bool Link::on_frame(wire::Type type, const uint8_t* body, uint32_t payload, PayloadDest& dest,
                    const char** why) {
  return handler_->on_frame(*this, type, body, payload, dest, why);
}

void Link::on_payload_data(const uint8_t* data, size_t len) {
  handler_->on_payload_data(*this, data, len);
}

void Link::on_payload() { handler_->on_payload(*this); }

bool Link::receive(LinkHandler& h, size_t budget, const char** why, size_t direct_budget) {
  if (state_ != State::kOpen) return true;
  handler_ = &h;
  // An end may be held to the first bytes of its stream until its owner decides who it is
  // (read_limit): what follows may be for another owner, which takes the link with those
  // bytes still unread.
  const uint64_t limit = read_limit();
  if (limit && bytes_in >= limit) return true;
  if (limit) budget = std::min<uint64_t>(budget, limit - bytes_in);
  size_t got = 0, total = 0;
  while (got < budget && total < direct_budget) {
    iovec iov[shm::kMaxRecvSge + 1];
    int k = parser_.direct_iov(iov, shm::kMaxRecvSge + 1, kDirectRead);
    ssize_t n;
    if (k) {
      // Large payload: straight from the socket (or the layer over it) into its destination.
      n = read_vec(iov, k);
      if (n > 0) parser_.direct_done(static_cast<uint64_t>(n), *this);
    } else {
      // At most what is left of the budget: the caller bounds how many frames one call
      // dispatches.
      n = read_some(rbuf_.get(), std::min<size_t>(sizes_.recv_buffer, budget - got));
      if (n > 0 && !parser_.feed(rbuf_.get(), static_cast<size_t>(n), *this, why)) return false;
      if (n > 0) got += static_cast<size_t>(n);
    }
    if (n > 0) {
      total += static_cast<size_t>(n);
      bytes_in += static_cast<uint64_t>(n);
      if (limit) return true;
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

bool Link::silent(int64_t now, int64_t bound) {
  if (now - last_rx_ns > 1'000'000) {
    // What the peer has not taken yet: the kernel's send queue, or a joined end's ring.
    int outq = 0;
    bool known = true;
    if (joined())
      outq = static_cast<int>(std::min<uint64_t>(unwritten_bytes(), INT_MAX));
    else
      known = ::ioctl(fd(), SIOCOUTQ, &outq) == 0;
    if (known) {
      if (outq < last_outq) last_outq_ns = now;
      last_outq = outq;
    }
  }
  return now - last_rx_ns > bound && now - last_outq_ns > bound;
}

}  // namespace vrdma::transport
