// rdma_cm as a service of vrdmad: listeners, connection requests, replies, rejects, RTUs and
// disconnects between the host's clients, and with clients on other hosts through the router
// (cm_remote.cc). The QPs on both sides stay the clients' own: each client moves its QPs
// through their states itself, as librdmacm does over a kernel CM. The service reaches the
// rest of vrdmad only through CmPort.
#pragma once

#include <cstdint>
#include <set>
#include <string>

#include "common/protocol.h"
#include "daemon/cm/cm_table.h"
#include "transport/wire.h"

namespace vrdma::daemon {

class Directory;

// Who sent a request, as vrdmad identified it, and where the reply goes.
struct CmCaller {
  uint32_t client = 0;
  uint32_t ipv4 = 0;  // network byte order
  std::string tenant;
  proto::Op op{};
  uint32_t seq = 0;
};

// What the service needs from the rest of vrdmad.
class CmPort {
 public:
  virtual ~CmPort() = default;
  // Replies to a request. False when the caller could not be told (it is being dropped).
  virtual bool cm_reply(const CmCaller& to, int status, const void* payload, size_t len) = 0;
  // Sends an event (seq 0) to a live client; nothing when it is gone.
  virtual void cm_event(uint32_t client, proto::Op op, const void* payload, size_t len) = 0;
  // The tenant of a live client; false when there is no such client.
  virtual bool cm_client_tenant(uint32_t client, std::string* tenant) = 0;
  // The tenant an address of another host belongs to, by this host's rules.
  virtual std::string cm_tenant_of(uint32_t ipv4) = 0;
  // Whether a container of tenant `from` may connect to a listener of tenant `to`.
  virtual bool cm_may_initiate(const std::string& from, const std::string& to) {
    return from == to;
  }
  // Whether `qpn` is a QP of `client`, and its type.
  virtual bool cm_qp_of(uint32_t client, uint32_t qpn, uint32_t* type) = 0;
  // The host that owns an address on another host: 0, or the errno to answer with
  // (EHOSTUNREACH, EAGAIN while the directory is unavailable).
  virtual int cm_remote_host(uint32_t ipv4, uint32_t* host) = 0;
  // Sends an rdma_cm message to another host's daemon: 0 or an errno.
  virtual int cm_send_to_host(uint32_t host, const wire::Cm& m) = 0;
  // Counts a listener or connection of `client` against its quotas (0 or the errno to refuse
  // with), and gives it back. Clients of other hosts (id 0) are not counted here.
  virtual int cm_charge(uint32_t /*client*/, CmCharge /*what*/) { return 0; }
  virtual void cm_release(uint32_t /*client*/, CmCharge /*what*/) {}
};

class CmService {
 public:
  CmService(CmPort& port, Directory& directory) : port_(port), directory_(directory) {
    table_.set_quota_hooks(
        {[this](uint32_t client, CmCharge what) { return port_.cm_charge(client, what); },
         [this](uint32_t client, CmCharge what) { port_.cm_release(client, what); }});
  }

  // A client of this host said Hello with this address: rdma_cm answers for it (a connect
  // there without a listener is refused rather than unreachable). True the first time.
  bool add_address(uint32_t ipv4) { return addresses_.insert(ipv4).second; }
  // Its last client went away: the address is no longer served here.
  void remove_address(uint32_t ipv4) { addresses_.erase(ipv4); }

  // Requests of the control protocol.
  void on_request(const CmCaller& c, const proto::CmListenReq& r);
  void on_request(const CmCaller& c, const proto::CmUnlistenReq& r);
  void on_request(const CmCaller& c, const proto::CmResolveReq& r);
  void on_request(const CmCaller& c, const proto::CmConnectReq& r);
  void on_request(const CmCaller& c, const proto::CmAcceptReq& r);
  void on_request(const CmCaller& c, const proto::CmRejectReq& r);
  void on_request(const CmCaller& c, const proto::CmRtuReq& r);
  void on_request(const CmCaller& c, const proto::CmDisconnectReq& r);

  // An rdma_cm message another host's daemon forwarded (cm_remote.cc); `host` is the host the
  // message came from, as the router authenticated it.
  void on_remote(uint32_t host, const wire::Cm& m);
  // Every connection with a side on `host` ends: its link closed, or the directory dropped it.
  // Local sides hear what the other side's death would tell them.
  void host_gone(uint32_t host);
  // Timers of connections with another host: a side that waits for that host (a reply, an
  // answer of our listener, an RTU) gives up after remote_timeout_ns; hosts that left the
  // directory are gone. Call when next_deadline() has passed.
  void tick(int64_t now);
  // When tick() must run next (ns), or -1.
  int64_t next_deadline(int64_t now) const;
  void set_remote_timeout(int64_t ns) { remote_timeout_ns_ = ns; }

  // Forgets the client's listeners and connections and tells the other sides (if `notify`).
  void client_gone(uint32_t client, bool notify);

  const CmTable& table() const { return table_; }

 private:
  bool owns(uint32_t ipv4) const { return addresses_.count(ipv4) != 0; }
  void event(uint32_t client, proto::Op op, const proto::CmEvent& ev);
  // Sends a message about `conn` to the host of its other side.
  void forward(const CmConnection& conn, proto::Op op, const void* body, size_t len);
  // What the passive or active side hears when the other side disconnects.
  void tell_disconnect(const CmConnection& conn, bool passive_side_left);

  // Across hosts (cm_remote.cc).
  void connect_remote(const CmCaller& c, const proto::CmConnectReq& r);
  void remote_connect(uint32_t host, uint32_t sender_conn, const uint8_t* body, size_t len);
  void remote_answer(uint32_t host, proto::Op op, uint32_t sender_conn, uint32_t receiver_conn,
                     const uint8_t* body, size_t len);
  void remote_rtu(uint32_t host, uint32_t sender_conn);
  void remote_disconnect(uint32_t host, uint32_t sender_conn, uint32_t receiver_conn,
                         const uint8_t* body, size_t len);

  bool host_owns(uint32_t host, uint32_t ipv4);  // the address is in the host's networks
  void time_out(const CmConnection& conn);

  CmPort& port_;
  Directory& directory_;
  CmTable table_;
  std::set<uint32_t> addresses_;
  int64_t remote_timeout_ns_ = 30'000'000'000;
  int64_t next_host_check_ns_ = 0;
};

}  // namespace vrdma::daemon
