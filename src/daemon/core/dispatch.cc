// One request: decoded and checked without state (decode.h), then handed to its handler, found
// through the one table of control operations (common/control_ops.h). rdma_cm requests go to
// the rdma_cm service, every other request to its overload of Daemon::handle.
#include <errno.h>

#include <algorithm>

#include "common/control_ops.h"
#include "common/log.h"
#include "daemon/core/daemon.h"

namespace vrdma::daemon {

namespace {

template <typename Req>
concept CmRequest = requires(CmService& s, const CmCaller& c, const Req& r) { s.on_request(c, r); };

}  // namespace

CmCaller Daemon::cm_caller(const Client& c, const Decoded& d) const {
  return CmCaller{c.id, c.ident.ipv4, c.tenant, d.op, d.seq};
}

void Daemon::handle_packet(Client& c, Packet& p, int payload_len) {
  // Every descriptor that came with the packet is closed unless a handler takes it.
  struct CloseUntaken {
    UniqueFd* fds;
    ~CloseUntaken() {
      for (int i = 0; i < proto::kMaxFdsPerMessage; ++i) fds[i].reset();
    }
  } close_untaken{received_fds_};
  const int nfds = p.nfds;
  for (int i = 0; i < proto::kMaxFdsPerMessage; ++i) received_fds_[i].reset(i < nfds ? p.fds[i] : -1);
  p.nfds = 0;

  size_t received =
      std::min<size_t>(static_cast<size_t>(std::max(payload_len, 0)), sizeof(p.payload));
  Decoded d =
      decode_request(p.header, std::span<const uint8_t>(p.payload, received), nfds, p.truncated);
  const char* name = proto::op_name(d.op);
  switch (d.verdict) {
    case DecodeVerdict::kDrop:
      LOG_WARN("client %u: malformed packet (%s)", c.id, d.reason);
      return schedule_drop(c, std::string("dropped: malformed packet (") + d.reason + ")");
    case DecodeVerdict::kMalformed:
    case DecodeVerdict::kInvalid:
    case DecodeVerdict::kOk:
      break;
  }
  if (!c.hello && d.op != proto::Op::kHello) {
    LOG_WARN("client %u: %s before Hello", c.id, name);
    reply_error(c, d, EPROTO);
    return schedule_drop(c, "dropped: request before Hello");
  }
  if (d.verdict == DecodeVerdict::kMalformed) {
    ++c.protocol_errors;
    LOG_WARN("client %u: protocol error %d/%d: op %u: %s", c.id, c.protocol_errors,
             cfg_.max_protocol_errors, static_cast<unsigned>(p.header.op), d.reason);
    reply_error(c, d, d.error);
    if (c.protocol_errors >= cfg_.max_protocol_errors)
      schedule_drop(c, "dropped: too many protocol errors");
    return;
  }
  if (d.verdict == DecodeVerdict::kInvalid) {
    LOG_DEBUG("client %u: %s rejected: %s", c.id, name, d.reason);
    reply_error(c, d, d.error);
    return;
  }
  // A status-only client has no device: it may ask for status (and, the host's administrator
  // only, for a reload or QoS rules), nothing else.
  if (c.kind == static_cast<uint32_t>(proto::ClientKind::kCli) && d.op != proto::Op::kStatus &&
      d.op != proto::Op::kHello && d.op != proto::Op::kReload && d.op != proto::Op::kQos) {
    LOG_DEBUG("client %u: %s refused: a status-only client has no device", c.id, name);
    reply_error(c, d, EPERM);
    return;
  }
  d.visit([&](const auto& req) {
    using Req = std::decay_t<decltype(req)>;
    if constexpr (std::is_same_v<Req, proto::CmConnectReq>)
      connect_cm(c, d, req);  // over the pod network first (direct.cc)
    else if constexpr (CmRequest<Req>)
      cm_->on_request(cm_caller(c, d), req);
    else
      handle(c, d, req);
  });
}

}  // namespace vrdma::daemon
