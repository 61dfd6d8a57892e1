#include "daemon/router/link.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>

#include <algorithm>

namespace vrdma::daemon {

namespace {
constexpr int kIovBatch = 64;
}  // namespace

Link::Link(uint32_t id, UniqueFd fd, bool outbound)
    : id_(id),
      fd_(std::move(fd)),
      outbound_(outbound),
      ring_(new Out[kRing]),
      owned_(new uint8_t[size_t(kRing) * kOwnedBytes]),
      rbuf_(new uint8_t[kRecvBuffer]) {}

Link::~Link() = default;

bool Link::send(wire::Type type, const void* body, uint32_t body_len, const shm::Seg* payload,
                int nseg, uint64_t payload_len, bool copy) {
  if (!has_room() || body_len > sizeof(Out::hdr) - sizeof(wire::Header)) return false;
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

bool Link::flush() {
  if (!connected_) return true;
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

void Link::consume_payload(LinkHandler& h) {
  while (payload_left_ && rpos_ < rlen_) {
    uint64_t n = std::min<uint64_t>(payload_left_, rlen_ - rpos_);
    if (!dest_.discard) {
      uint64_t done = 0;
      while (done < n && dest_seg_ < dest_.nsegs) {
        shm::Seg& s = dest_.segs[dest_seg_];
        uint64_t m = std::min(n - done, s.len - dest_off_);
        memcpy(s.p + dest_off_, rbuf_.get() + rpos_ + done, m);
        done += m;
        dest_off_ += m;
        if (dest_off_ == s.len) ++dest_seg_, dest_off_ = 0;
      }
    }
    rpos_ += n;
    payload_left_ -= n;
  }
  if (payload_left_ == 0) {
    rx_ = Rx::kHeader;
    h.on_payload(*this);
  }
}

bool Link::dispatch_buffered(LinkHandler& h, const char** why) {
  for (;;) {
    size_t avail = rlen_ - rpos_;
    switch (rx_) {
      case Rx::kHeader:
        if (avail < sizeof(wire::Header)) return true;
        memcpy(&rhdr_, rbuf_.get() + rpos_, sizeof(rhdr_));
        rpos_ += sizeof(rhdr_);
        body_len_ = wire::body_size(static_cast<wire::Type>(rhdr_.type));
        if (!body_len_) {
          *why = "unknown frame type";
          return false;
        }
        if (rhdr_.payload > wire::kMaxPayload) {
          *why = "oversized frame";
          return false;
        }
        rx_ = Rx::kBody;
        break;
      case Rx::kBody:
        if (avail < body_len_) return true;
        dest_ = PayloadDest{};
        h.on_frame(*this, static_cast<wire::Type>(rhdr_.type), rbuf_.get() + rpos_, rhdr_.payload,
                   dest_);
        rpos_ += body_len_;
        payload_left_ = rhdr_.payload;
        dest_seg_ = 0;
        dest_off_ = 0;
        rx_ = payload_left_ ? Rx::kPayload : Rx::kHeader;
        break;
      case Rx::kPayload:
        if (avail == 0) return true;
        consume_payload(h);
        break;
    }
  }
}

void Link::compact_buffer() {
  if (rpos_ == rlen_) {
    rpos_ = rlen_ = 0;
  } else if (rpos_ > kRecvBuffer / 2) {
    memmove(rbuf_.get(), rbuf_.get() + rpos_, rlen_ - rpos_);
    rlen_ -= rpos_;
    rpos_ = 0;
  }
}

bool Link::wants_direct_read() const {
  return rx_ == Rx::kPayload && rpos_ == rlen_ && payload_left_ >= kDirectRead && !dest_.discard &&
         dest_seg_ < dest_.nsegs;
}

ssize_t Link::read_direct(LinkHandler& h) {
  iovec iov[shm::kMaxRecvSge + 1];
  int k = 0;
  uint64_t want = payload_left_;
  for (int i = dest_seg_; i < dest_.nsegs && want; ++i) {
    uint64_t off = i == dest_seg_ ? dest_off_ : 0;
    uint64_t m = std::min(dest_.segs[i].len - off, want);
    iov[k++] = iovec{dest_.segs[i].p + off, m};
    want -= m;
  }
  msghdr mh{};
  mh.msg_iov = iov;
  mh.msg_iovlen = static_cast<size_t>(k);
  ssize_t n = ::recvmsg(fd_.get(), &mh, MSG_DONTWAIT);
  if (n <= 0) return n;
  uint64_t left = static_cast<uint64_t>(n);
  while (left) {
    uint64_t m = std::min(left, dest_.segs[dest_seg_].len - dest_off_);
    dest_off_ += m;
    left -= m;
    if (dest_off_ == dest_.segs[dest_seg_].len) ++dest_seg_, dest_off_ = 0;
  }
  payload_left_ -= static_cast<uint64_t>(n);
  if (payload_left_ == 0) {
    rx_ = Rx::kHeader;
    h.on_payload(*this);
  }
  return n;
}

bool Link::receive(LinkHandler& h, size_t budget, const char** why) {
  size_t got = 0;
  for (;;) {
    if (!dispatch_buffered(h, why)) return false;
    compact_buffer();
    if (got >= budget) return true;
    ssize_t n;
    if (wants_direct_read()) {
      // Large payload: straight from the socket into its destination.
      n = read_direct(h);
    } else {
      // At most what is left of the budget: the caller bounds how many frames one call
      // dispatches.
      size_t want = std::min(kRecvBuffer - rlen_, budget - got);
      n = ::recv(fd_.get(), rbuf_.get() + rlen_, want, MSG_DONTWAIT);
      if (n > 0) rlen_ += static_cast<size_t>(n);
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
}

}  // namespace vrdma::daemon
