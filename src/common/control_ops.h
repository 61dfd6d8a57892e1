// The one table of control operations: for every op of protocol.h, its name, the payload it
// carries and the descriptors that come with it. The daemon's decoder, its dispatch, its logs
// and the clients' messages all read this table; nothing else lists the ops.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "common/protocol.h"

namespace vrdma::proto {

// OpSpec<op>: `Payload` (the request's, or the event's, struct), `kName`, and for requests
// `kFds`, the number of descriptors the request must carry.
template <Op op>
struct OpSpec;

template <typename P, int fds, const char* name>
struct Spec {
  using Payload = P;
  static constexpr int kFds = fds;
  static constexpr const char* kName = name;
  static constexpr size_t kPayloadSize = std::is_empty_v<P> ? 0 : sizeof(P);
};

namespace op_names {
inline constexpr char kHello[] = "Hello", kPutFd[] = "PutFd", kGetFd[] = "GetFd",
                      kAllocQpn[] = "AllocQpn", kFreeQpn[] = "FreeQpn", kConnectQp[] = "ConnectQp",
                      kAllocKey[] = "AllocKey", kFreeKey[] = "FreeKey", kStatus[] = "Status",
                      kDropFd[] = "DropFd", kCmListen[] = "CmListen", kCmUnlisten[] = "CmUnlisten",
                      kCmResolve[] = "CmResolve", kCmConnect[] = "CmConnect",
                      kCmAccept[] = "CmAccept", kCmReject[] = "CmReject", kCmRtu[] = "CmRtu",
                      kCmDisconnect[] = "CmDisconnect", kSetQpObject[] = "SetQpObject",
                      kGetMr[] = "GetMr", kReload[] = "Reload", kOpenXrcd[] = "OpenXrcd",
                      kCloseXrcd[] = "CloseXrcd", kSetQpXrcd[] = "SetQpXrcd",
                      kOpenXrcQp[] = "OpenXrcQp", kPacing[] = "Pacing",
                      kCloseXrcQp[] = "CloseXrcQp", kDirectTake[] = "DirectTake",
                      kAdoptMemory[] = "AdoptMemory",
                      kMcastAttach[] = "McastAttach", kMcastDetach[] = "McastDetach",
                      kMcastMembers[] = "McastMembers", kQos[] = "Qos",
                      kQpFatal[] = "QpFatal",
                      kCmRequest[] = "CmRequest", kCmReply[] = "CmReply",
                      kCmRejected[] = "CmRejected", kCmEstablished[] = "CmEstablished",
                      kCmDisconnected[] = "CmDisconnected", kOdpFault[] = "OdpFault",
                      kDirectAccepted[] = "DirectAccepted";
}  // namespace op_names

// Requests (client -> daemon).
template <>
struct OpSpec<Op::kHello> : Spec<HelloReq, 0, op_names::kHello> {};
template <>
struct OpSpec<Op::kPutFd> : Spec<PutFdReq, 1, op_names::kPutFd> {};
template <>
struct OpSpec<Op::kGetFd> : Spec<GetFdReq, 0, op_names::kGetFd> {};
template <>
struct OpSpec<Op::kAllocQpn> : Spec<AllocQpnReq, 0, op_names::kAllocQpn> {};
template <>
struct OpSpec<Op::kFreeQpn> : Spec<FreeQpnReq, 0, op_names::kFreeQpn> {};
template <>
struct OpSpec<Op::kConnectQp> : Spec<ConnectQpReq, 0, op_names::kConnectQp> {};
template <>
struct OpSpec<Op::kAllocKey> : Spec<AllocKeyReq, 0, op_names::kAllocKey> {};
template <>
struct OpSpec<Op::kFreeKey> : Spec<FreeKeyReq, 0, op_names::kFreeKey> {};
template <>
struct OpSpec<Op::kStatus> : Spec<StatusReq, 0, op_names::kStatus> {};
template <>
struct OpSpec<Op::kDropFd> : Spec<DropFdReq, 0, op_names::kDropFd> {};
template <>
struct OpSpec<Op::kCmListen> : Spec<CmListenReq, 0, op_names::kCmListen> {};
template <>
struct OpSpec<Op::kCmUnlisten> : Spec<CmUnlistenReq, 0, op_names::kCmUnlisten> {};
template <>
struct OpSpec<Op::kCmResolve> : Spec<CmResolveReq, 0, op_names::kCmResolve> {};
template <>
struct OpSpec<Op::kCmConnect> : Spec<CmConnectReq, 0, op_names::kCmConnect> {};
template <>
struct OpSpec<Op::kCmAccept> : Spec<CmAcceptReq, 0, op_names::kCmAccept> {};
template <>
struct OpSpec<Op::kCmReject> : Spec<CmRejectReq, 0, op_names::kCmReject> {};
template <>
struct OpSpec<Op::kCmRtu> : Spec<CmRtuReq, 0, op_names::kCmRtu> {};
template <>
struct OpSpec<Op::kCmDisconnect> : Spec<CmDisconnectReq, 0, op_names::kCmDisconnect> {};
template <>
struct OpSpec<Op::kSetQpObject> : Spec<SetQpObjectReq, 0, op_names::kSetQpObject> {};
template <>
struct OpSpec<Op::kGetMr> : Spec<GetMrReq, 0, op_names::kGetMr> {};
template <>
struct OpSpec<Op::kReload> : Spec<ReloadReq, 0, op_names::kReload> {};
template <>
struct OpSpec<Op::kOpenXrcd> : Spec<OpenXrcdReq, 1, op_names::kOpenXrcd> {};
template <>
struct OpSpec<Op::kCloseXrcd> : Spec<CloseXrcdReq, 0, op_names::kCloseXrcd> {};
template <>
struct OpSpec<Op::kSetQpXrcd> : Spec<SetQpXrcdReq, 0, op_names::kSetQpXrcd> {};
template <>
struct OpSpec<Op::kOpenXrcQp> : Spec<OpenXrcQpReq, 0, op_names::kOpenXrcQp> {};
template <>
struct OpSpec<Op::kPacing> : Spec<PacingReq, 0, op_names::kPacing> {};
template <>
struct OpSpec<Op::kCloseXrcQp> : Spec<CloseXrcQpReq, 0, op_names::kCloseXrcQp> {};
template <>
struct OpSpec<Op::kDirectTake> : Spec<DirectTakeReq, 0, op_names::kDirectTake> {};
template <>
struct OpSpec<Op::kAdoptMemory> : Spec<AdoptMemoryReq, 0, op_names::kAdoptMemory> {};
template <>
struct OpSpec<Op::kMcastAttach> : Spec<McastReq, 0, op_names::kMcastAttach> {};
template <>
struct OpSpec<Op::kMcastDetach> : Spec<McastReq, 0, op_names::kMcastDetach> {};
template <>
struct OpSpec<Op::kMcastMembers> : Spec<McastReq, 0, op_names::kMcastMembers> {};
template <>
struct OpSpec<Op::kQos> : Spec<QosReq, 0, op_names::kQos> {};
// Events (daemon -> client, seq 0).
template <>
struct OpSpec<Op::kQpFatal> : Spec<QpFatalEvent, 0, op_names::kQpFatal> {};
template <>
struct OpSpec<Op::kCmRequest> : Spec<CmRequestEvent, 0, op_names::kCmRequest> {};
template <>
struct OpSpec<Op::kCmReply> : Spec<CmEvent, 0, op_names::kCmReply> {};
template <>
struct OpSpec<Op::kCmRejected> : Spec<CmEvent, 0, op_names::kCmRejected> {};
template <>
struct OpSpec<Op::kCmEstablished> : Spec<CmEvent, 0, op_names::kCmEstablished> {};
template <>
struct OpSpec<Op::kCmDisconnected> : Spec<CmEvent, 0, op_names::kCmDisconnected> {};
template <>
struct OpSpec<Op::kOdpFault> : Spec<OdpFaultEvent, 0, op_names::kOdpFault> {};
template <>
struct OpSpec<Op::kDirectAccepted>
    : Spec<DirectAcceptedEvent, 1, op_names::kDirectAccepted> {};

template <Op... ops>
struct OpList {};

using RequestOps =
    OpList<Op::kHello, Op::kPutFd, Op::kGetFd, Op::kAllocQpn, Op::kFreeQpn, Op::kConnectQp,
           Op::kAllocKey, Op::kFreeKey, Op::kStatus, Op::kDropFd, Op::kCmListen, Op::kCmUnlisten,
           Op::kCmResolve, Op::kCmConnect, Op::kCmAccept, Op::kCmReject, Op::kCmRtu,
           Op::kCmDisconnect, Op::kSetQpObject, Op::kGetMr, Op::kReload, Op::kOpenXrcd,
           Op::kCloseXrcd, Op::kSetQpXrcd, Op::kMcastAttach, Op::kMcastDetach,
           Op::kMcastMembers, Op::kQos, Op::kOpenXrcQp, Op::kPacing, Op::kCloseXrcQp,
           Op::kDirectTake, Op::kAdoptMemory>;
using EventOps = OpList<Op::kQpFatal, Op::kCmRequest, Op::kCmReply, Op::kCmRejected,
                        Op::kCmEstablished, Op::kCmDisconnected, Op::kOdpFault,
                        Op::kDirectAccepted>;

namespace detail {
template <Op... ops>
constexpr const char* name_in(OpList<ops...>, Op op) {
  const char* name = nullptr;
  (void)((op == ops ? (name = OpSpec<ops>::kName, true) : false) || ...);
  return name;
}
template <Op... ops>
constexpr int fds_in(OpList<ops...>, Op op) {
  int fds = -1;
  (void)((op == ops ? (fds = OpSpec<ops>::kFds, true) : false) || ...);
  return fds;
}
template <Op... ops>
constexpr size_t largest(OpList<ops...>) {
  size_t n = 0;
  ((n = OpSpec<ops>::kPayloadSize > n ? OpSpec<ops>::kPayloadSize : n), ...);
  return n;
}
}  // namespace detail

// "Hello", "CmReply", ...; "unknown" for anything else.
constexpr const char* op_name(Op op) {
  const char* n = detail::name_in(RequestOps{}, op);
  if (!n) n = detail::name_in(EventOps{}, op);
  return n ? n : "unknown";
}
constexpr bool is_request(Op op) {
  return detail::name_in(RequestOps{}, op) != nullptr;
}
// Descriptors a request must carry; -1 for an op that is not a request.
constexpr int request_fds(Op op) {
  return detail::fds_in(RequestOps{}, op);
}
inline constexpr size_t kLargestRequest = detail::largest(RequestOps{});

// A request's payload, copied out of a packet whose size was checked: calls f(payload) with
// the struct of `op` and returns true, or returns false (unknown op or wrong size).
namespace detail {
template <Op op, typename F>
bool visit_one(const void* data, size_t len, F& f) {
  using P = typename OpSpec<op>::Payload;
  if (len != OpSpec<op>::kPayloadSize) return false;
  P value{};
  if constexpr (!std::is_empty_v<P>) std::memcpy(&value, data, sizeof(P));
  f(value);
  return true;
}
}  // namespace detail

template <typename F, Op... ops>
bool visit_payload(OpList<ops...>, Op op, const void* data, size_t len, F&& f) {
  bool done = false;
  (void)((op == ops ? (done = detail::visit_one<ops>(data, len, f), true) : false) || ...);
  return done;
}

template <typename F>
bool visit_request(Op op, const void* data, size_t len, F&& f) {
  return visit_payload(RequestOps{}, op, data, len, std::forward<F>(f));
}

}  // namespace vrdma::proto
