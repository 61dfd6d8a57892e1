// Decoding and stateless validation of one request packet. Pure: no I/O, no state, so it can
// be fuzzed (tests/fuzz/fuzz_decode.cc) and unit tested on its own. Which ops exist and what
// they carry comes from the one table of control operations (common/control_ops.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "common/control_ops.h"
#include "common/protocol.h"

namespace vrdma::daemon {

enum class DecodeVerdict : uint8_t {
  kOk,         // body holds the request, copied out of the packet
  kInvalid,    // well-framed, a field is out of range: reply `error`, keep the client
  kMalformed,  // unknown op, wrong payload size, stray descriptors: reply `error` (EINVAL) and
               // count a protocol error against the client
  kDrop,       // framing is broken (bad magic, length mismatch, truncation): drop the client
};

struct Decoded {
  DecodeVerdict verdict = DecodeVerdict::kDrop;
  int error = 0;  // positive errno to reply with (kInvalid, kMalformed)
  proto::Op op{};
  uint32_t seq = 0;
  const char* reason = "";  // static text for the log
  // The request's payload (kOk only): OpSpec<op>::Payload, kPayloadSize bytes.
  alignas(8) unsigned char body[proto::kLargestRequest] = {};
  size_t body_len = 0;

  // Calls f(payload) with the request's struct (kOk only).
  template <typename F>
  void visit(F&& f) const {
    proto::visit_request(op, body, body_len, std::forward<F>(f));
  }
};

// `header` and `payload` as recv_packet() produced them; `truncated` is Packet::truncated.
// `received_payload` is the number of payload bytes actually received.
Decoded decode_request(const proto::Header& header, std::span<const uint8_t> received_payload,
                       int nfds, bool truncated);

// The same starting from the raw bytes of one packet (header followed by payload).
Decoded decode_wire(std::span<const uint8_t> packet, int nfds, bool truncated);

}  // namespace vrdma::daemon
