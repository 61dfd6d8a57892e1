#include "daemon/core/decode.h"

#include <errno.h>
#include <fcntl.h>

#include <cstring>

#include "shm/layout.h"

namespace vrdma::daemon {

namespace {

using proto::Op;

Decoded make(DecodeVerdict v, int error, const char* reason) {
  Decoded d;
  d.verdict = v;
  d.error = error;
  d.reason = reason;
  return d;
}

bool valid_qp_type(uint32_t t) {
  return t == static_cast<uint32_t>(proto::QpType::kRc) ||
         t == static_cast<uint32_t>(proto::QpType::kUc) ||
         t == static_cast<uint32_t>(proto::QpType::kUd);
}

// What AllocQpn takes: the connection manager's types and XRC's.
bool valid_alloc_qp_type(uint32_t t) {
  return valid_qp_type(t) || t == static_cast<uint32_t>(proto::QpType::kXrcSend) ||
         t == static_cast<uint32_t>(proto::QpType::kXrcRecv) ||
         t == static_cast<uint32_t>(proto::QpType::kXrcSrq);
}

bool valid_fd_kind(uint32_t k) {
  return k >= static_cast<uint32_t>(proto::FdKind::kArena) &&
         k <= static_cast<uint32_t>(proto::FdKind::kKeyTable);
}

// Field checks that need no daemon state: the reason a request is invalid, or nullptr. One
// overload per request that has fields to check; the rest have none.
struct FieldCheck {
  Op op;
  int error = EINVAL;

  const char* operator()(const proto::HelloReq& h) {
    if (h.version != proto::kVersion) {
      error = EPROTONOSUPPORT;
      return "version";
    }
    if (h.kind != static_cast<uint32_t>(proto::ClientKind::kVerbs) &&
        h.kind != static_cast<uint32_t>(proto::ClientKind::kCli))
      return "client kind";
    return nullptr;
  }
  const char* operator()(const proto::PutFdReq& p) {
    bool arena = p.kind == static_cast<uint32_t>(proto::FdKind::kArena);
    bool keys = p.kind == static_cast<uint32_t>(proto::FdKind::kKeyTable);
    if (!valid_fd_kind(p.kind)) return "fd kind";
    if ((p.fd_id == shm::kArenaFdId) != arena) return "fd_id 0 is the arena and only the arena";
    if ((p.fd_id == shm::kKeyTableFdId) != keys)
      return "fd_id 1 is the key table and only the key table";
    if (arena && (p.size < sizeof(shm::ArenaHeader) || p.size > shm::kMaxArenaSize))
      return "arena size";
    if (p.flags & ~proto::kSealWrites) return "flags";
    if (p.flags && p.kind != static_cast<uint32_t>(proto::FdKind::kMemory))
      return "only memory is sealed against writes";
    return nullptr;
  }
  const char* operator()(const proto::AllocQpnReq& a) {
    if (!valid_alloc_qp_type(a.qp_type)) return "qp type";
    if (a.arena_offset % alignof(shm::QpShared) != 0) return "qp offset alignment";
    if (a.object_fd_id <= shm::kKeyTableFdId) return "qp object fd id";
    if (a.srq_fd_id == shm::kKeyTableFdId || a.notify_fd_id == shm::kKeyTableFdId)
      return "fd id";
    return nullptr;
  }
  const char* operator()(const proto::SetQpObjectReq& s) {
    if (s.object_fd_id <= shm::kKeyTableFdId) return "qp object fd id";
    return s.notify_fd_id == shm::kKeyTableFdId ? "fd id" : nullptr;
  }
  const char* operator()(const proto::OpenXrcdReq& x) {
    return x.oflags & ~uint32_t(O_CREAT | O_EXCL) ? "oflags" : nullptr;
  }
  const char* operator()(const proto::CloseXrcdReq& x) { return x.xrcd == 0 ? "xrcd 0" : nullptr; }
  const char* operator()(const proto::SetQpXrcdReq& x) { return x.xrcd == 0 ? "xrcd 0" : nullptr; }
  const char* operator()(const proto::OpenXrcQpReq& x) { return x.xrcd == 0 ? "xrcd 0" : nullptr; }
  const char* operator()(const proto::CloseXrcQpReq& x) {
    return x.reserved ? "reserved" : nullptr;
  }
  const char* operator()(const proto::AllocKeyReq& k) {
    return k.index == 0 || k.index >= shm::kMrSlots ? "mr index" : nullptr;
  }
  const char* operator()(const proto::GetMrReq& g) {
    constexpr uint32_t kKnown = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ |
                                IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC;
    if (g.access == 0 || (g.access & ~kKnown)) return "access";
    if ((g.access & IBV_ACCESS_LOCAL_WRITE) && g.access != IBV_ACCESS_LOCAL_WRITE)
      return "access: a receive buffer or remote rights, not both";
    return g.key == 0 ? "key 0" : nullptr;
  }
  const char* operator()(const proto::CmConnectReq& c) {
    if (!valid_qp_type(c.qp_type)) return "qp type";
    if (c.private_len > proto::kCmPrivateData) return "private data length";
    return c.dst_port == 0 ? "port 0" : nullptr;
  }
  const char* operator()(const proto::CmAcceptReq& a) {
    return a.private_len > proto::kCmPrivateData ? "private data length" : nullptr;
  }
  const char* operator()(const proto::CmRejectReq& r) {
    return r.private_len > proto::kCmPrivateData ? "private data length" : nullptr;
  }
  const char* operator()(const proto::CmRtuReq& r) {
    return r.passive != 0 ? "side" : nullptr;  // only the connector sends the RTU
  }
  const char* operator()(const proto::CmDisconnectReq& r) {
    return r.passive > 1 ? "side" : nullptr;
  }
  const char* operator()(const proto::CmListenReq& l) { return l.port == 0 ? "port 0" : nullptr; }
  template <typename Other>
  const char* operator()(const Other&) {
    return nullptr;
  }
};

}  // namespace

Decoded decode_request(const proto::Header& header, std::span<const uint8_t> received_payload,
                       int nfds, bool truncated) {
  if (truncated) return make(DecodeVerdict::kDrop, 0, "truncated packet");
  if (header.magic != proto::kMagic) return make(DecodeVerdict::kDrop, 0, "bad magic");
  if (header.len != received_payload.size())
    return make(DecodeVerdict::kDrop, 0, "length mismatch");
  if (header.len > proto::kMaxMessage - sizeof(proto::Header))
    return make(DecodeVerdict::kDrop, 0, "oversized packet");
  if (nfds < 0 || nfds > proto::kMaxFdsPerMessage)
    return make(DecodeVerdict::kDrop, 0, "descriptor count");

  const Op op = static_cast<Op>(header.op);
  auto malformed = [&](const char* why) {
    Decoded d = make(DecodeVerdict::kMalformed, EINVAL, why);
    d.op = op;
    d.seq = header.seq;
    return d;
  };
  if (!proto::is_request(op)) return malformed("unknown op");
  Decoded d;
  d.op = op;
  d.seq = header.seq;
  FieldCheck check{op};
  const char* invalid = nullptr;
  bool size_ok = proto::visit_request(op, received_payload.data(), received_payload.size(),
                                      [&](const auto& req) { invalid = check(req); });
  if (!size_ok) return malformed("payload size");
  if (nfds != proto::request_fds(op))
    return malformed(nfds > proto::request_fds(op) ? "unexpected descriptors"
                                                   : "missing descriptor");
  if (invalid) {
    d.verdict = DecodeVerdict::kInvalid;
    d.error = check.error;
    d.reason = invalid;
    return d;
  }
  std::memcpy(d.body, received_payload.data(), received_payload.size());
  d.body_len = received_payload.size();
  d.verdict = DecodeVerdict::kOk;
  return d;
}

Decoded decode_wire(std::span<const uint8_t> packet, int nfds, bool truncated) {
  if (packet.size() < sizeof(proto::Header)) return make(DecodeVerdict::kDrop, 0, "short packet");
  proto::Header h;
  std::memcpy(&h, packet.data(), sizeof(h));
  return decode_request(h, packet.subspan(sizeof(h)), nfds, truncated);
}

}  // namespace vrdma::daemon
