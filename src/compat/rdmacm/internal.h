// Internals of the drop-in librdmacm.so.1: the objects behind the handles it gives out, the
// process-wide state, and the helpers its files share.
//
// Every rdma_cm operation goes to vrdmad through libibverbs.so.1's private interface
// (vrdma_cm_call, version node VRDMA_PRIVATE_1), so the daemon sees one client per process.
// The daemon's events arrive through vrdma_cm_set_handler on whichever thread reads the
// control socket; the handler only queues them on the channel of the id they belong to.
// Work that needs the daemon or a QP (moving the QP on a reply, sending the RTU) is done
// later, by the thread that takes the event in rdma_get_cm_event.
//
// Locks: g_mu (the id tables) before a channel's mu; neither is ever held across a call to
// the daemon or a verbs call.
#pragma once

#include <unistd.h>

#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

#include <cstdint>
#include <deque>
#include <mutex>
#include <unordered_map>

#include "common/protocol.h"
#include "export.h"

extern "C" int vrdma_cm_call(uint16_t op, const void* req, size_t len, void* reply,
                             size_t* reply_len);
extern "C" void vrdma_cm_set_handler(void (*fn)(uint16_t op, const void* payload, size_t len));

namespace vrdma::cm {

static_assert(sizeof(rdma_cm_id) == 416, "rdma_cm_id must keep rdma-core 44's layout");

inline constexpr uint32_t kUdQkey = 0x01234567;
inline constexpr uint8_t kMaxRdAtomic = 16;
// Reject reasons of the IB CM, as a real RDMA_CM_EVENT_REJECTED carries them in `status`.
inline constexpr int kRejInvalidServiceId = 8;  // nobody listens
inline constexpr int kRejConsumerDefined = 28;  // rdma_reject

struct Id;

// What a queued event still needs before the application sees it.
enum class Work : uint8_t {
  kNone,
  kReply,  // the peer accepted: move the QP to RTR/RTS, send the RTU (RC/UC)
};

struct Event {
  rdma_cm_event ev;  // first: handed out
  Work work = Work::kNone;
  proto::CmEvent raw{};  // for kReply
  uint8_t private_data[proto::kCmPrivateData];
};

struct Channel {
  rdma_event_channel ch;  // first: handed out; ch.fd is an eventfd, readable while queued
  std::mutex mu;
  std::deque<Event*> queue;
};

enum class State : uint8_t {
  kIdle,
  kBound,
  kAddrResolved,
  kRouteResolved,
  kListening,
  kConnecting,    // active: CmConnect sent, waiting for the reply
  kResponded,     // active: CONNECT_RESPONSE given to an application without QP
  kRequested,     // passive: a connect request, not yet answered
  kAccepting,     // passive: accepted, waiting for the RTU
  kConnected,
  kDisconnected,
  kRejected,
};

struct Id {
  rdma_cm_id id;  // first: handed out
  uint64_t cookie = 0;
  bool sync = false;          // created without a channel: operations wait for their events
  Channel* own_channel = nullptr;  // the private channel of a synchronous id
  State state = State::kIdle;
  bool bound = false;
  bool passive = false;       // created from a connect request
  bool disconnect_queued = false;
  uint32_t conn_id = 0;
  uint32_t listen_ip = 0;
  uint32_t remote_qpn = 0;
  uint32_t remote_qkey = 0;
  proto::CmParams mine{};     // the parameters this side gave
  proto::CmParams peer{};     // the other side's
  bool own_cqs = false;       // rdma_create_qp made id->send_cq/recv_cq and their channels
  ibv_qp_init_attr* ep_attr = nullptr;  // rdma_create_ep of a passive endpoint: for its requests
  ibv_pd* ep_pd = nullptr;
  ibv_sa_path_rec path{};
  int ack_timeout = -1;       // RDMA_OPTION_ID_ACK_TIMEOUT, for the QP's RTS (-1: the default)
};

// The process's one context on the vrdma device, shared by every id, with a default PD.
struct Shared {
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  uint32_t ipv4 = 0;  // network byte order
  pid_t pid = 0;      // the process that opened it (a child of fork opens its own)
};
// Opens it on first use. nullptr with errno set when there is no device.
Shared* shared();
Shared* shared_if_open();  // never opens (safe in the event handler)

// ---- tables (g_mu) ----
std::mutex& table_mu();
void register_id(Id* id);    // by cookie (and by conn_id for passive ids)
void unregister_id(Id* id);

// ---- channels and events (event_channel.cc) ----
inline Id* impl(rdma_cm_id* id) { return reinterpret_cast<Id*>(id); }
inline Channel* impl(rdma_event_channel* ch) { return reinterpret_cast<Channel*>(ch); }
Channel* new_channel();
void delete_channel(Channel* ch);
Event* new_event(Id* id, rdma_cm_event_type type, int status = 0);
void set_private(Event* e, const uint8_t* data, uint8_t len);
// Queues an event on the id's channel. With `once_disconnect` a DISCONNECTED event is
// dropped if the id already had one.
void queue_event(Id* id, Event* e);
// Removes the queued events of an id (and, with `listener`, the requests made for it);
// returns the ids of dropped connect requests, which the caller destroys.
std::deque<Id*> purge_events(Channel* ch, Id* id);
void move_events(Channel* from, Channel* to, Id* id);
// For synchronous ids: takes the next event and checks it is `want`; 0, or -1 with errno.
int wait_event(Id* id, rdma_cm_event_type want, rdma_cm_event** keep = nullptr);
void on_daemon_event(uint16_t op, const void* payload, size_t len);

// ---- helpers (cm_id.cc / connect.cc) ----
int fail(int err);  // errno = err, returns -1
int call(proto::Op op, const void* req, size_t len, void* reply = nullptr, size_t reply_len = 0);
template <typename T>
int call(proto::Op op, const T& req, void* reply = nullptr, size_t reply_len = 0) {
  return call(op, &req, sizeof(req), reply, reply_len);
}
uint16_t pick_port();
void fill_gid(ibv_gid& gid, uint32_t ipv4);
void fill_ah(ibv_ah_attr& ah, uint32_t ipv4);
uint32_t sin_ip(const sockaddr* sa);
uint8_t clamp_rd(uint8_t v);
// Moves a connected QP to RTR and RTS with the peer's QPN and address.
int qp_to_rts(Id* id);
// The attributes for the given qp_state (rdma_init_qp_attr).
int init_qp_attr(Id* id, ibv_qp_attr* attr, int* mask);
void send_disconnect(Id* id);   // tells the daemon, once, that this side leaves
// Leaves the id's multicast groups (multicast.cc); rdma_destroy_id does.
void forget_multicast(Id* id);

}  // namespace vrdma::cm
