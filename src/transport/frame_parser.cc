#include "transport/frame_parser.h"

#include <infiniband/verbs.h>
#include <string.h>

#include <algorithm>

#include "transport/frame_check.h"

namespace vrdma::transport {

bool FrameParser::feed(const uint8_t* data, size_t len, FrameSink& sink, const char** why) {
  size_t pos = 0;
  while (pos < len) {
    switch (state_) {
      case State::kHeader: {
        size_t n = std::min(len - pos, sizeof(wire::Header) - have_);
        memcpy(buf_ + have_, data + pos, n);
        have_ += static_cast<uint32_t>(n);
        pos += n;
        if (have_ < sizeof(wire::Header)) return true;
        memcpy(&hdr_, buf_, sizeof(hdr_));
        if (!wire::check_header(hdr_, why)) return false;
        body_len_ = wire::body_size(static_cast<wire::Type>(hdr_.type));
        state_ = State::kBody;
        break;
      }
      case State::kBody: {
        size_t n = std::min<size_t>(len - pos, sizeof(wire::Header) + body_len_ - have_);
        memcpy(buf_ + have_, data + pos, n);
        have_ += static_cast<uint32_t>(n);
        pos += n;
        if (have_ < sizeof(wire::Header) + body_len_) return true;
        const auto type = static_cast<wire::Type>(hdr_.type);
        const uint8_t* body = buf_ + sizeof(wire::Header);
        if (!wire::check_frame(type, body, hdr_.payload, why)) return false;
        dest_ = PayloadDest{};
        ++frames_;
        if (!sink.on_frame(type, body, hdr_.payload, dest_, why)) return false;
        have_ = 0;
        payload_left_ = hdr_.payload;
        seg_ = 0;
        seg_off_ = 0;
        if (dest_.kind == PayloadDest::Kind::kPlace) {
          // Never past what the sink gave, whatever it gave.
          dest_.nsegs = std::clamp(dest_.nsegs, 0, static_cast<int>(shm::kMaxRecvSge + 1));
        }
        if (payload_left_) {
          state_ = State::kPayload;
        } else {
          state_ = State::kHeader;
        }
        break;
      }
      case State::kPayload: {
        uint64_t n = std::min<uint64_t>(len - pos, payload_left_);
        take_payload(data + pos, n, sink);
        pos += n;
        break;
      }
    }
  }
  return true;
}

void FrameParser::take_payload(const uint8_t* data, uint64_t n, FrameSink& sink) {
  switch (dest_.kind) {
    case PayloadDest::Kind::kDiscard:
      break;
    case PayloadDest::Kind::kSink:
      sink.on_payload_data(data, n);
      break;
    case PayloadDest::Kind::kPlace: {
      uint64_t done = 0;
      while (done < n && seg_ < dest_.nsegs) {
        shm::Seg& s = dest_.segs[seg_];
        uint64_t m = std::min(n - done, s.len - seg_off_);
        memcpy(s.p + seg_off_, data + done, m);
        done += m;
        seg_off_ += m;
        if (seg_off_ == s.len) ++seg_, seg_off_ = 0;
      }
      break;
    }
  }
  payload_left_ -= n;
  if (payload_left_ == 0) end_payload(sink);
}

void FrameParser::end_payload(FrameSink& sink) {
  state_ = State::kHeader;
  sink.on_payload();
}

int FrameParser::direct_iov(iovec* iov, int max, uint64_t min) const {
  if (state_ != State::kPayload || dest_.kind != PayloadDest::Kind::kPlace ||
      payload_left_ < min || seg_ >= dest_.nsegs)
    return 0;
  int k = 0;
  uint64_t want = payload_left_;
  for (int i = seg_; i < dest_.nsegs && want && k < max; ++i) {
    uint64_t off = i == seg_ ? seg_off_ : 0;
    uint64_t m = std::min(dest_.segs[i].len - off, want);
    if (m) iov[k++] = iovec{dest_.segs[i].p + off, m};
    want -= m;
  }
  return k;
}

void FrameParser::direct_done(uint64_t n, FrameSink& sink) {
  n = std::min(n, payload_left_);
  uint64_t left = n;
  while (left && seg_ < dest_.nsegs) {
    uint64_t m = std::min(left, dest_.segs[seg_].len - seg_off_);
    seg_off_ += m;
    left -= m;
    if (seg_off_ == dest_.segs[seg_].len) ++seg_, seg_off_ = 0;
  }
  payload_left_ -= n;
  if (payload_left_ == 0) end_payload(sink);
}

}  // namespace vrdma::transport
