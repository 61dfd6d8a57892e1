#include "transport/frame_check.h"

#include <infiniband/verbs.h>

#include "shm/work_request.h"

namespace vrdma::wire {

namespace {

bool qp_type_ok(uint32_t t) {
  return t == IBV_QPT_RC || t == IBV_QPT_UC || t == IBV_QPT_UD;
}

// A Connect comes from a requester: an XRC_SEND QP too. A ConnectRep and a request name the
// destination's type: an XRC_RECV QP too.
bool src_type_ok(uint32_t t) { return qp_type_ok(t) || t == IBV_QPT_XRC_SEND; }
bool dst_type_ok(uint32_t t) { return qp_type_ok(t) || t == IBV_QPT_XRC_RECV; }

bool fail(const char** why, const char* text) {
  *why = text;
  return false;
}

bool check_request(const Request& r, uint32_t payload, const char** why) {
  if (!dst_type_ok(r.qp_type)) return fail(why, "request: unknown QP type");
  // An XRC request names the SRQ it is for; no other request names one.
  if ((r.qp_type == IBV_QPT_XRC_RECV) != (r.xrc_srqn != 0))
    return fail(why, "request: an SRQ number where none belongs, or none where one must");
  if (r.flags & ~uint32_t(kMoreQueued)) return fail(why, "request: unknown flags");
  if (!shm::opcode_allowed(requester_type(r.qp_type), r.opcode))
    return fail(why, "request: opcode unknown or not allowed for its QP type");
  if (r.length > kMaxPayload) return fail(why, "request: longer than any RDMA message");
  if (shm::carries_data(r.opcode) ? payload != r.length : payload != 0)
    return fail(why, "request: payload does not match its length");
  if (shm::is_atomic(r.opcode) && r.length != 8) return fail(why, "request: atomic not 8 bytes");
  if (r.solicited > 1 || r.rnr_retry > 7 || r.timeout > 31 || r.retry_cnt > 7)
    return fail(why, "request: attribute out of range");
  return true;
}

bool check_response(const Response& r, uint32_t payload, const char** why) {
  if (r.status > IBV_WC_GENERAL_ERR) return fail(why, "response: unknown status");
  if (r.byte_len > kMaxPayload) return fail(why, "response: longer than any RDMA message");
  if (payload && (payload != r.byte_len || r.status != IBV_WC_SUCCESS))
    return fail(why, "response: payload does not match its length");
  return true;
}

}  // namespace

bool check_header(const Header& h, const char** why) {
  const auto type = static_cast<Type>(h.type);
  if (!body_size(type)) return fail(why, "unknown frame type");
  if (h.payload > kMaxPayload) return fail(why, "oversized frame");
  if (h.payload && type != Type::kRequest && type != Type::kResponse)
    return fail(why, "payload on a frame type that has none");
  return true;
}

bool check_frame(Type type, const uint8_t* body, uint32_t payload, const char** why) {
  switch (type) {
    case Type::kHello: {
      const auto h = read<Hello>(body);
      if (h.magic != kMagic) return fail(why, "not a vrdma router (bad magic)");
      return h.lane < kLanes || fail(why, "hello: unknown lane");
    }
    case Type::kConnect:
      return src_type_ok(read<Connect>(body).qp_type) || fail(why, "connect: unknown QP type");
    case Type::kConnectRep: {
      auto r = read<ConnectRep>(body);
      return (r.status == 0 && dst_type_ok(r.qp_type)) || (r.status > 0 && r.qp_type == 0) ||
             fail(why, "connect reply: bad status or QP type");
    }
    case Type::kRequest:
      return check_request(read<Request>(body), payload, why);
    case Type::kResponse:
      return check_response(read<Response>(body), payload, why);
    case Type::kCm:
      return read<Cm>(body).len <= sizeof(Cm::body) || fail(why, "cm: longer than its body");
    case Type::kDirect: {
      const auto d = read<Direct>(body);
      if (d.flags & ~uint32_t(kDirectProbe)) return fail(why, "direct: unknown flags");
      if (d.flags & kDirectProbe)
        return (d.dst_qpn == 0 && qp_type_ok(d.qp_type)) || fail(why, "direct: a bad probe");
      return d.qp_type == IBV_QPT_RC || d.qp_type == IBV_QPT_UC ||
             fail(why, "direct: not a connected QP type");
    }
    case Type::kDirectRep: {
      auto r = read<DirectRep>(body);
      return (r.status == 0 && qp_type_ok(r.qp_type) && r.port) ||
             (r.status > 0 && r.qp_type == 0) || fail(why, "direct reply: bad status or QP type");
    }
    case Type::kDirectHello: {
      const auto h = read<DirectHello>(body);
      if (h.magic != kDirectMagic || h.version != kVersion)
        return fail(why, "not a vrdma direct connection (bad magic or version)");
      return qp_type_ok(h.qp_type) || fail(why, "direct hello: unknown QP type");
    }
    case Type::kDirectAdd: {
      const auto a = read<DirectAdd>(body);
      return a.qp_type == IBV_QPT_RC || a.qp_type == IBV_QPT_UC ||
             fail(why, "direct add: not a connected QP type");
    }
    case Type::kClose: {
      const uint32_t role = read<Close>(body).role;
      return role == kCloseSender || role == kCloseReceiver || fail(why, "close: unknown role");
    }
    case Type::kPing:
    case Type::kPong:
    case Type::kPeerGone:
      return true;
  }
  return fail(why, "unknown frame type");
}

}  // namespace vrdma::wire
