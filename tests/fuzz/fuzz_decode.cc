// libFuzzer entry for vrdmad's request decoder. The first input byte chooses the number of
// descriptors that "came with" the packet and the truncation flag; the rest is the packet.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "daemon/core/decode.h"

using vrdma::daemon::Decoded;
using vrdma::daemon::DecodeVerdict;

namespace {
// Connection manager requests: private data within bounds, a known side, a real port.
namespace proto = vrdma::proto;
struct Check {
  void operator()(const proto::CmConnectReq& c) {
    if (c.private_len > proto::kCmPrivateData || c.dst_port == 0) __builtin_trap();
  }
  void operator()(const proto::CmAcceptReq& a) {
    if (a.private_len > proto::kCmPrivateData) __builtin_trap();
  }
  void operator()(const proto::CmRejectReq& r) {
    if (r.private_len > proto::kCmPrivateData) __builtin_trap();
  }
  void operator()(const proto::CmRtuReq& r) {
    if (r.passive) __builtin_trap();
  }
  void operator()(const proto::CmDisconnectReq& r) {
    if (r.passive > 1) __builtin_trap();
  }
  void operator()(const proto::CmListenReq& l) {
    if (l.port == 0) __builtin_trap();
  }
  void operator()(const auto&) {}
};
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  int nfds = data[0] % (vrdma::proto::kMaxFdsPerMessage + 1);
  bool truncated = (data[0] & 0x80) != 0;
  std::span<const uint8_t> packet(data + 1, size - 1);
  Decoded d = vrdma::daemon::decode_wire(packet, nfds, truncated);

  // Invariants of the decoder.
  if (truncated && d.verdict != DecodeVerdict::kDrop) __builtin_trap();
  if (d.verdict == DecodeVerdict::kOk) {
    namespace proto = vrdma::proto;
    if (!proto::is_request(d.op) || nfds != proto::request_fds(d.op)) __builtin_trap();
    vrdma::proto::Header h;
    std::memcpy(&h, packet.data(), sizeof(h));
    if (h.len != packet.size() - sizeof(h) || h.magic != vrdma::proto::kMagic) __builtin_trap();
    bool visited = false;
    d.visit([&](const auto& req) {
      visited = true;
      Check{}(req);
    });
    if (!visited) __builtin_trap();
  }
  if ((d.verdict == DecodeVerdict::kInvalid || d.verdict == DecodeVerdict::kMalformed) &&
      d.error <= 0)
    __builtin_trap();
  // Deterministic.
  Decoded again = vrdma::daemon::decode_wire(packet, nfds, truncated);
  if (again.verdict != d.verdict || again.error != d.error) __builtin_trap();
  return 0;
}
