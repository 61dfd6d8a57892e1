#include "daemon/router/link.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>

#include <algorithm>

namespace vrdma::daemon {

namespace {
constexpr size_t kRecvBuffer = 256 * 1024;
constexpr uint64_t kDirectRead = 16 * 1024;  // payloads this large skip the receive buffer
constexpr int kIovBatch = 64;
}  // namespace

uint32_t body_size(wire::Type t) {
  switch (t) {
    case wire::Type::kHello:
      return sizeof(wire::Hello);
    case wire::Type::kPing:
    case wire::Type::kPong:
      return sizeof(wire::Ping);
    case wire::Type::kConnect:
      return sizeof(wire::Connect);
    case wire::Type::kConnectRep:
      return sizeof(wire::ConnectRep);
    case wire::Type::kRequest:
      return sizeof(wire::Request);
    case wire::Type::kResponse:
      return sizeof(wire::Response);
    case wire::Type::kCm:
      return sizeof(wire::Cm);
    case wire::Type::kPeerGone:
      return sizeof(wire::PeerGone);
  }
  return 0;
}

Link::Link(uint32_t id, UniqueFd fd, bool outbound)
    : id_(id),
      fd_(std::move(fd)),
      outbound_(outbound),
      ring_(new Out[kRing]),
      owned_(new uint8_t[size_t(kRing) * kOwnedBytes]),
      rbuf_(new uint8_t[kRecvBuffer]) {}

Link::~Link() = default;

bool Link::send(wire::Type type, const void* body, uint32_t body_len, const shm::Seg* payload, int nseg,
                uint64_t payload_len, bool copy) {
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

bool Link::consume_payload(LinkHandler& h, const char** why) {
  (void)why;
  while (payload_left_ && rpos_ < rlen_) {
    uint64_t n = std::min<uint64_t>(payload_left_, rlen_ - rpos_);
    if (!sink_.discard) {
      uint64_t done = 0;
      while (done < n && sink_i_ < sink_.nsegs) {
        shm::Seg& s = sink_.segs[sink_i_];
        uint64_t m = std::min(n - done, s.len - sink_off_);
        memcpy(s.p + sink_off_, rbuf_.get() + rpos_ + done, m);
        done += m;
        sink_off_ += m;
        if (sink_off_ == s.len) ++sink_i_, sink_off_ = 0;
      }
    }
    rpos_ += n;
    payload_left_ -= n;
  }
  if (payload_left_ == 0) {
    rx_ = Rx::kHeader;
    h.on_payload(*this);
  }
  return true;
}

bool Link::receive(LinkHandler& h, size_t budget, const char** why) {
  size_t got = 0;
  for (;;) {
    // Dispatch what is buffered.
    for (bool more = true; more;) {
      more = false;
      size_t avail = rlen_ - rpos_;
      switch (rx_) {
        case Rx::kHeader:
          if (avail < sizeof(wire::Header)) break;
          memcpy(&rhdr_, rbuf_.get() + rpos_, sizeof(rhdr_));
          rpos_ += sizeof(rhdr_);
          body_len_ = body_size(static_cast<wire::Type>(rhdr_.type));
          if (!body_len_) {
            *why = "unknown frame type";
            return false;
          }
          if (rhdr_.payload > wire::kMaxPayload) {
            *why = "oversized frame";
            return false;
          }
          rx_ = Rx::kBody;
          more = true;
          break;
        case Rx::kBody:
          if (avail < body_len_) break;
          sink_ = Sink{};
          h.on_frame(*this, static_cast<wire::Type>(rhdr_.type), rbuf_.get() + rpos_, rhdr_.payload,
                     sink_);
          rpos_ += body_len_;
          payload_left_ = rhdr_.payload;
          sink_i_ = 0;
          sink_off_ = 0;
          rx_ = payload_left_ ? Rx::kPayload : Rx::kHeader;
          more = true;
          break;
        case Rx::kPayload:
          if (avail == 0) break;
          consume_payload(h, why);
          more = true;
          break;
      }
    }
    if (rpos_ == rlen_) {
      rpos_ = rlen_ = 0;
    } else if (rpos_ > kRecvBuffer / 2) {
      memmove(rbuf_.get(), rbuf_.get() + rpos_, rlen_ - rpos_);
      rlen_ -= rpos_;
      rpos_ = 0;
    }
    if (got >= budget) return true;
    ssize_t n;
    if (rx_ == Rx::kPayload && rpos_ == rlen_ && payload_left_ >= kDirectRead && !sink_.discard &&
        sink_i_ < sink_.nsegs) {
      // Large payload: straight from the socket into its destination.
      iovec iov[shm::kMaxRecvSge + 1];
      int k = 0;
      uint64_t want = payload_left_;
      for (int i = sink_i_; i < sink_.nsegs && want; ++i) {
        uint64_t off = i == sink_i_ ? sink_off_ : 0;
        uint64_t m = std::min(sink_.segs[i].len - off, want);
        iov[k++] = iovec{sink_.segs[i].p + off, m};
        want -= m;
      }
      msghdr mh{};
      mh.msg_iov = iov;
      mh.msg_iovlen = static_cast<size_t>(k);
      n = ::recvmsg(fd_.get(), &mh, MSG_DONTWAIT);
      if (n > 0) {
        uint64_t left = static_cast<uint64_t>(n);
        while (left) {
          uint64_t m = std::min(left, sink_.segs[sink_i_].len - sink_off_);
          sink_off_ += m;
          left -= m;
          if (sink_off_ == sink_.segs[sink_i_].len) ++sink_i_, sink_off_ = 0;
        }
        payload_left_ -= static_cast<uint64_t>(n);
        got += static_cast<size_t>(n);
        bytes_in += static_cast<uint64_t>(n);
        if (payload_left_ == 0) {
          rx_ = Rx::kHeader;
          h.on_payload(*this);
        }
        continue;
      }
    } else {
      // At most what is left of the budget: the caller bounds how many frames one call
      // dispatches.
      size_t want = std::min(kRecvBuffer - rlen_, budget - got);
      n = ::recv(fd_.get(), rbuf_.get() + rlen_, want, MSG_DONTWAIT);
      if (n > 0) {
        rlen_ += static_cast<size_t>(n);
        got += static_cast<size_t>(n);
        bytes_in += static_cast<uint64_t>(n);
        continue;
      }
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
