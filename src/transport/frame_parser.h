// The receiving half of a link's byte stream, apart from any socket: bytes go in (feed), frames
// come out to a FrameSink. A frame's header is checked before its body is read, and its body
// (wire::check_frame) before the sink sees it; the sink then says where the frame's payload
// goes (a client's memory, a sink that stores it as it arrives, or nowhere), so nothing is
// allocated for a payload that has not arrived. Partial headers and bodies are kept in the
// parser's own fixed buffer: every byte fed is consumed.
//
// A payload whose destination is memory can also be read straight from the socket
// (direct_iov, then direct_done), skipping the link's receive buffer.
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>

#include "transport/wire.h"
#include "shm/respond.h"

namespace vrdma::transport {

// Where an incoming frame's payload goes.
struct PayloadDest {
  enum class Kind : uint8_t {
    kDiscard,  // nowhere: read and dropped
    kPlace,    // into segs[0..nsegs), in order; bytes beyond them are dropped
    kSink,     // handed to FrameSink::on_payload_data as it arrives
  };
  Kind kind = Kind::kDiscard;
  shm::Seg segs[shm::kMaxRecvSge + 1];
  int nsegs = 0;
};

class FrameSink {
 public:
  virtual ~FrameSink() = default;
  // A frame's header and body arrived and passed wire::check_frame. Fill `dest` for its payload
  // (if any). False refuses the stream (the link is closed); *why says why.
  virtual bool on_frame(wire::Type type, const uint8_t* body, uint32_t payload,
                        PayloadDest& dest, const char** why) = 0;
  // kSink: the next `len` bytes of the payload.
  virtual void on_payload_data(const uint8_t* data, size_t len) = 0;
  // The payload of the last frame is complete (frames with a payload only).
  virtual void on_payload() = 0;
};

class FrameParser {
 public:
  // Consumes [data, data+len): dispatches every frame it completes. False when the stream is
  // broken (*why says how); the parser must not be fed again then.
  bool feed(const uint8_t* data, size_t len, FrameSink& sink, const char** why);

  // While a payload bound for memory (kPlace) has at least `min` bytes left to come: fills
  // `iov` (at most `max` entries) with where they go and returns the count, else 0.
  int direct_iov(iovec* iov, int max, uint64_t min) const;
  // `n` bytes were read into what direct_iov() gave.
  void direct_done(uint64_t n, FrameSink& sink);

  // Whether the parser is between frames (nothing of a frame received yet).
  bool idle() const { return state_ == State::kHeader && have_ == 0; }
  uint64_t frames() const { return frames_; }

 private:
  enum class State : uint8_t { kHeader, kBody, kPayload };
  void take_payload(const uint8_t* data, uint64_t n, FrameSink& sink);
  void end_payload(FrameSink& sink);

  State state_ = State::kHeader;
  uint8_t buf_[sizeof(wire::Header) + wire::kMaxBody];  // a header, then its body
  uint32_t have_ = 0;                                   // bytes of buf_ filled
  uint32_t body_len_ = 0;
  wire::Header hdr_{};
  uint64_t payload_left_ = 0;
  PayloadDest dest_;
  int seg_ = 0;
  uint64_t seg_off_ = 0;
  uint64_t frames_ = 0;
};

}  // namespace vrdma::transport
