// libFuzzer entry for vrdmad's request decoder. The first input byte chooses the number of
// descriptors that "came with" the packet and the truncation flag; the rest is the packet.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "daemon/decode.h"

using vrdma::daemon::Decoded;
using vrdma::daemon::Verdict;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  int nfds = data[0] % (vrdma::proto::kMaxFdsPerMessage + 1);
  bool truncated = (data[0] & 0x80) != 0;
  std::span<const uint8_t> packet(data + 1, size - 1);
  Decoded d = vrdma::daemon::decode_wire(packet, nfds, truncated);

  // Invariants of the decoder.
  if (truncated && d.verdict != Verdict::kDrop) __builtin_trap();
  if (d.verdict == Verdict::kOk) {
    if (std::holds_alternative<std::monostate>(d.body)) __builtin_trap();
    if (nfds != vrdma::daemon::expected_fds(d.op)) __builtin_trap();
    vrdma::proto::Header h;
    std::memcpy(&h, packet.data(), sizeof(h));
    if (h.len != packet.size() - sizeof(h) || h.magic != vrdma::proto::kMagic) __builtin_trap();
    // Connection manager requests: private data within bounds, a known side, a real port.
    namespace proto = vrdma::proto;
    if (auto* c = std::get_if<proto::CmConnectReq>(&d.body))
      if (c->private_len > proto::kCmPrivateData || c->dst_port == 0) __builtin_trap();
    if (auto* a = std::get_if<proto::CmAcceptReq>(&d.body))
      if (a->private_len > proto::kCmPrivateData) __builtin_trap();
    if (auto* r = std::get_if<proto::CmRejectReq>(&d.body))
      if (r->private_len > proto::kCmPrivateData) __builtin_trap();
    if (auto* r = std::get_if<proto::CmConnReq>(&d.body))
      if (r->passive > 1 || (d.op == proto::Op::kCmRtu && r->passive)) __builtin_trap();
    if (auto* l = std::get_if<proto::CmListenReq>(&d.body))
      if (l->port == 0) __builtin_trap();
  }
  if ((d.verdict == Verdict::kInvalid || d.verdict == Verdict::kMalformed) && d.error <= 0)
    __builtin_trap();
  // Deterministic.
  Decoded again = vrdma::daemon::decode_wire(packet, nfds, truncated);
  if (again.verdict != d.verdict || again.error != d.error) __builtin_trap();
  return 0;
}
