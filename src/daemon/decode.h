// Decoding and stateless validation of one request packet. Pure: no I/O, no state, so it can
// be fuzzed (tests/fuzz/fuzz_decode.cc) and unit tested on its own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <variant>

#include "common/protocol.h"

namespace vrdma::daemon {

struct StatusReq {};

using RequestBody =
    std::variant<std::monostate, proto::HelloReq, proto::PutFdReq, proto::GetFdReq,
                 proto::AllocQpnReq, proto::FreeQpnReq, proto::ConnectQpReq, proto::AllocKeyReq,
                 proto::FreeKeyReq, StatusReq, proto::DropFdReq, proto::CmListenReq,
                 proto::CmUnlistenReq, proto::CmResolveReq, proto::CmConnectReq, proto::CmAcceptReq,
                 proto::CmRejectReq,
                 proto::CmConnReq>;  // CmConnReq: kCmRtu and kCmDisconnect (see Decoded::op)

enum class Verdict : uint8_t {
  kOk,         // body holds the request, copied out of the packet
  kInvalid,    // well-framed, a field is out of range: reply `error`, keep the client
  kMalformed,  // unknown op, wrong payload size, stray descriptors: reply `error` (EINVAL) and
               // count a protocol error against the client
  kDrop,       // framing is broken (bad magic, length mismatch, truncation): drop the client
};

struct Decoded {
  Verdict verdict = Verdict::kDrop;
  int error = 0;  // positive errno to reply with (kInvalid, kMalformed)
  proto::Op op{};
  uint32_t seq = 0;
  RequestBody body;
  const char* reason = "";  // static text for the log
};

// Number of descriptors a request of this op must carry.
int expected_fds(proto::Op op);

// `header` and `payload` as recv_packet() produced them; `truncated` is Packet::truncated.
// `received_payload` is the number of payload bytes actually received.
Decoded decode_request(const proto::Header& header, std::span<const uint8_t> received_payload,
                       int nfds, bool truncated);

// The same starting from the raw bytes of one packet (header followed by payload).
Decoded decode_wire(std::span<const uint8_t> packet, int nfds, bool truncated);

}  // namespace vrdma::daemon
