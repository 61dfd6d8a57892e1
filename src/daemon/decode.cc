#include "daemon/decode.h"

#include <errno.h>

#include <cstring>

#include "engine/shm_layout.h"

namespace vrdma::daemon {

namespace {

using proto::Op;

Decoded make(Verdict v, int error, const char* reason) {
  Decoded d;
  d.verdict = v;
  d.error = error;
  d.reason = reason;
  return d;
}

template <typename T>
bool copy_out(std::span<const uint8_t> payload, RequestBody* body) {
  if (payload.size() != sizeof(T)) return false;
  T value;
  std::memcpy(&value, payload.data(), sizeof(T));  // the packet buffer need not be aligned
  *body = value;
  return true;
}

bool valid_qp_type(uint32_t t) {
  return t == static_cast<uint32_t>(proto::QpType::kRc) ||
         t == static_cast<uint32_t>(proto::QpType::kUc) ||
         t == static_cast<uint32_t>(proto::QpType::kUd);
}

// Field checks that need no daemon state.
Decoded validate(Decoded d) {
  if (auto* h = std::get_if<proto::HelloReq>(&d.body)) {
    if (h->version != proto::kVersion) return make(Verdict::kInvalid, EPROTONOSUPPORT, "version");
    if (h->kind != static_cast<uint32_t>(proto::ClientKind::kVerbs) &&
        h->kind != static_cast<uint32_t>(proto::ClientKind::kCli))
      return make(Verdict::kInvalid, EINVAL, "client kind");
  } else if (auto* p = std::get_if<proto::PutFdReq>(&d.body)) {
    bool arena_kind = p->kind == static_cast<uint32_t>(proto::FdKind::kArena);
    if (p->kind != static_cast<uint32_t>(proto::FdKind::kArena) &&
        p->kind != static_cast<uint32_t>(proto::FdKind::kMemory) &&
        p->kind != static_cast<uint32_t>(proto::FdKind::kEvent))
      return make(Verdict::kInvalid, EINVAL, "fd kind");
    if ((p->fd_id == 0) != arena_kind)
      return make(Verdict::kInvalid, EINVAL, "fd_id 0 is the arena and only the arena");
    if (arena_kind && (p->size < sizeof(shm::ArenaHeader) || p->size > shm::kArenaSize))
      return make(Verdict::kInvalid, EINVAL, "arena size");
  } else if (auto* a = std::get_if<proto::AllocQpnReq>(&d.body)) {
    if (!valid_qp_type(a->qp_type)) return make(Verdict::kInvalid, EINVAL, "qp type");
    if (a->arena_offset % alignof(shm::QpShared) != 0)
      return make(Verdict::kInvalid, EINVAL, "qp offset alignment");
  } else if (auto* k = std::get_if<proto::AllocKeyReq>(&d.body)) {
    if (k->index >= shm::kMrSlots) return make(Verdict::kInvalid, EINVAL, "mr index");
  } else if (auto* c = std::get_if<proto::CmConnectReq>(&d.body)) {
    if (!valid_qp_type(c->qp_type)) return make(Verdict::kInvalid, EINVAL, "qp type");
    if (c->private_len > proto::kCmPrivateData)
      return make(Verdict::kInvalid, EINVAL, "private data length");
    if (c->dst_port == 0) return make(Verdict::kInvalid, EINVAL, "port 0");
  } else if (auto* a = std::get_if<proto::CmAcceptReq>(&d.body)) {
    if (a->private_len > proto::kCmPrivateData)
      return make(Verdict::kInvalid, EINVAL, "private data length");
  } else if (auto* r = std::get_if<proto::CmRejectReq>(&d.body)) {
    if (r->private_len > proto::kCmPrivateData)
      return make(Verdict::kInvalid, EINVAL, "private data length");
  } else if (auto* cr = std::get_if<proto::CmConnReq>(&d.body)) {
    if (cr->passive > 1) return make(Verdict::kInvalid, EINVAL, "side");
    if (d.op == Op::kCmRtu && cr->passive) return make(Verdict::kInvalid, EINVAL, "side");
  } else if (auto* l = std::get_if<proto::CmListenReq>(&d.body)) {
    if (l->port == 0) return make(Verdict::kInvalid, EINVAL, "port 0");
  }
  d.verdict = Verdict::kOk;
  return d;
}

}  // namespace

int expected_fds(proto::Op op) {
  return op == Op::kPutFd ? 1 : 0;
}

Decoded decode_request(const proto::Header& header, std::span<const uint8_t> received_payload,
                       int nfds, bool truncated) {
  if (truncated) return make(Verdict::kDrop, 0, "truncated packet");
  if (header.magic != proto::kMagic) return make(Verdict::kDrop, 0, "bad magic");
  if (header.len != received_payload.size()) return make(Verdict::kDrop, 0, "length mismatch");
  if (header.len > proto::kMaxMessage - sizeof(proto::Header))
    return make(Verdict::kDrop, 0, "oversized packet");
  if (nfds < 0 || nfds > proto::kMaxFdsPerMessage)
    return make(Verdict::kDrop, 0, "descriptor count");

  Op op = static_cast<Op>(header.op);
  RequestBody body;
  bool size_ok = false;
  switch (op) {
    case Op::kHello:
      size_ok = copy_out<proto::HelloReq>(received_payload, &body);
      break;
    case Op::kPutFd:
      size_ok = copy_out<proto::PutFdReq>(received_payload, &body);
      break;
    case Op::kGetFd:
      size_ok = copy_out<proto::GetFdReq>(received_payload, &body);
      break;
    case Op::kAllocQpn:
      size_ok = copy_out<proto::AllocQpnReq>(received_payload, &body);
      break;
    case Op::kFreeQpn:
      size_ok = copy_out<proto::FreeQpnReq>(received_payload, &body);
      break;
    case Op::kConnectQp:
      size_ok = copy_out<proto::ConnectQpReq>(received_payload, &body);
      break;
    case Op::kAllocKey:
      size_ok = copy_out<proto::AllocKeyReq>(received_payload, &body);
      break;
    case Op::kFreeKey:
      size_ok = copy_out<proto::FreeKeyReq>(received_payload, &body);
      break;
    case Op::kDropFd:
      size_ok = copy_out<proto::DropFdReq>(received_payload, &body);
      break;
    case Op::kCmListen:
      size_ok = copy_out<proto::CmListenReq>(received_payload, &body);
      break;
    case Op::kCmUnlisten:
      size_ok = copy_out<proto::CmUnlistenReq>(received_payload, &body);
      break;
    case Op::kCmResolve:
      size_ok = copy_out<proto::CmResolveReq>(received_payload, &body);
      break;
    case Op::kCmConnect:
      size_ok = copy_out<proto::CmConnectReq>(received_payload, &body);
      break;
    case Op::kCmAccept:
      size_ok = copy_out<proto::CmAcceptReq>(received_payload, &body);
      break;
    case Op::kCmReject:
      size_ok = copy_out<proto::CmRejectReq>(received_payload, &body);
      break;
    case Op::kCmRtu:
    case Op::kCmDisconnect:
      size_ok = copy_out<proto::CmConnReq>(received_payload, &body);
      break;
    case Op::kStatus:
      size_ok = received_payload.empty();
      body = StatusReq{};
      break;
    default: {
      Decoded d = make(Verdict::kMalformed, EINVAL, "unknown op");
      d.op = op;
      d.seq = header.seq;
      return d;
    }
  }
  Decoded d;
  d.op = op;
  d.seq = header.seq;
  if (!size_ok) {
    d.verdict = Verdict::kMalformed;
    d.error = EINVAL;
    d.reason = "payload size";
    return d;
  }
  if (nfds != expected_fds(op)) {
    d.verdict = Verdict::kMalformed;
    d.error = EINVAL;
    d.reason = nfds > expected_fds(op) ? "unexpected descriptors" : "missing descriptor";
    return d;
  }
  d.body = std::move(body);
  Decoded v = validate(std::move(d));
  v.op = op;
  v.seq = header.seq;
  return v;
}

Decoded decode_wire(std::span<const uint8_t> packet, int nfds, bool truncated) {
  if (packet.size() < sizeof(proto::Header)) return make(Verdict::kDrop, 0, "short packet");
  proto::Header h;
  std::memcpy(&h, packet.data(), sizeof(h));
  return decode_request(h, packet.subspan(sizeof(h)), nfds, truncated);
}

}  // namespace vrdma::daemon
