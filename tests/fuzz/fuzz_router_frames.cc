// libFuzzer entry for the router's frame decoder (FrameParser and the frame checks): the input
// is a link's byte stream, cut into reads of sizes taken from the input itself, some of them
// "read from the socket" straight into a payload's destination (direct_iov). A fake sink puts
// payloads into exact-size buffers (AddressSanitizer catches a byte past them), into a sink, or
// nowhere, and checks what the decoder promises:
//   - a frame reaches the sink only after its header and body passed the checks: a payload
//     only on requests and responses, a request's payload equal to its length, ...;
//   - a payload is delivered whole, once: as many bytes as the header said, then on_payload;
//   - the same stream gives the same frames however it is cut.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "transport/frame_check.h"
#include "transport/frame_parser.h"
#include "shm/work_request.h"

namespace {

using vrdma::transport::FrameParser;
using vrdma::transport::FrameSink;
using vrdma::transport::PayloadDest;
namespace wire = vrdma::wire;

void check(bool ok) {
  if (!ok) __builtin_trap();
}

class Sink : public FrameSink {
 public:
  explicit Sink(uint8_t mode) : mode_(mode) {}

  bool on_frame(wire::Type type, const uint8_t* body, uint32_t payload, PayloadDest& dest,
                const char** why) override {
    check(!in_payload_);
    check(wire::body_size(type) != 0);
    const char* again = nullptr;
    check(wire::check_frame(type, body, payload, &again));
    if (payload) check(type == wire::Type::kRequest || type == wire::Type::kResponse);
    if (type == wire::Type::kRequest) {
      auto r = wire::read<wire::Request>(body);
      check(vrdma::shm::carries_data(r.opcode) ? payload == r.length : payload == 0);
    }
    trace_ = trace_ * 131 + static_cast<uint8_t>(type) * 7 + payload;
    ++frames_;
    // Refuse now and then, as the router does with a frame it does not take.
    if ((mode_ & 0x40) && frames_ % 5 == 4) {
      *why = "refused";
      refused_ = true;
      return false;
    }
    expect_ = payload;
    got_ = 0;
    if (!payload) return true;
    in_payload_ = true;
    switch ((frames_ + mode_) % 3) {
      case 0:
        dest.kind = PayloadDest::Kind::kDiscard;
        break;
      case 1: {
        dest.kind = PayloadDest::Kind::kSink;
        break;
      }
      default: {
        // Up to three exact-size pieces, together at most the payload (a short destination
        // drops the rest), never more than 64 KiB of memory.
        dest.kind = PayloadDest::Kind::kPlace;
        bufs_.clear();
        uint64_t left = payload < 65536 ? payload : 65536;
        int n = 1 + (frames_ % 3);
        for (int i = 0; i < n && left; ++i) {
          uint64_t len = i == n - 1 ? left : left / 2 + 1;
          if (len > left) len = left;
          bufs_.emplace_back(len);
          dest.segs[dest.nsegs++] = vrdma::shm::Seg{bufs_.back().data(), len};
          left -= len;
        }
        break;
      }
    }
    return true;
  }
  void on_payload_data(const uint8_t*, size_t len) override {
    check(in_payload_);
    got_ += len;
    check(got_ <= expect_);
  }
  void on_payload() override {
    check(in_payload_);
    in_payload_ = false;
    trace_ = trace_ * 31 + 1;
  }

  uint64_t trace() const { return trace_; }
  uint64_t frames() const { return frames_; }
  bool refused() const { return refused_; }

 private:
  uint8_t mode_;
  bool in_payload_ = false;
  bool refused_ = false;
  uint64_t expect_ = 0, got_ = 0;
  uint64_t trace_ = 0, frames_ = 0;
  std::vector<std::vector<uint8_t>> bufs_;
};

// Feeds `data` cut by `cuts` (sizes 1..256 taken from the cut bytes); with `direct`, payloads
// bound for memory are read "from the socket" straight into their destination.
struct Run {
  uint64_t trace;
  uint64_t frames;
  bool broken;
};

Run run(const uint8_t* data, size_t size, const uint8_t* cuts, size_t ncuts, uint8_t mode,
        bool direct) {
  FrameParser p;
  Sink sink(mode);
  size_t pos = 0, c = 0;
  bool broken = false;
  while (pos < size && !broken) {
    size_t step = ncuts ? 1 + cuts[c++ % ncuts] : size;
    if (step > size - pos) step = size - pos;
    iovec iov[vrdma::shm::kMaxRecvSge + 1];
    int k = direct ? p.direct_iov(iov, vrdma::shm::kMaxRecvSge + 1, 1) : 0;
    if (k) {
      size_t n = 0;
      for (int i = 0; i < k && n < step; ++i) {
        size_t m = iov[i].iov_len < step - n ? iov[i].iov_len : step - n;
        std::memcpy(iov[i].iov_base, data + pos + n, m);
        n += m;
      }
      p.direct_done(n, sink);
      pos += n;
      continue;
    }
    const char* why = nullptr;
    if (!p.feed(data + pos, step, sink, &why)) {
      check(why != nullptr);
      broken = true;
    }
    pos += step;
  }
  return {sink.trace(), sink.frames(), broken};
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const uint8_t mode = data[0];
  const size_t ncuts = data[1] % 16;
  if (size < 2 + ncuts) return 0;
  const uint8_t* cuts = data + 2;
  const uint8_t* stream = data + 2 + ncuts;
  const size_t len = size - 2 - ncuts;
  Run whole = run(stream, len, nullptr, 0, mode, false);
  Run cut = run(stream, len, cuts, ncuts, mode, (mode & 1) != 0);
  // However the stream is cut, the same frames, and the same verdict.
  check(whole.trace == cut.trace && whole.frames == cut.frames && whole.broken == cut.broken);
  return 0;
}
