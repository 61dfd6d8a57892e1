// The sockets of the direct path in vrdmad's control loop (non-blocking, in its epoll):
//
//   listeners   one per container with a device: a TCP socket on the container's direct port
//               (wire::kDirectPort), made inside the container's network namespace, so that what
//               reaches it came over the pod network, through whatever rules govern the
//               container's traffic;
//   arrivals    connections accepted there, until their first frame (a DirectHello) is read:
//               nothing else is read from them, each has a deadline, and unauthenticated ones
//               are bounded per source address (the oldest of that source makes room) and in all;
//   dials       connections vrdmad opens from a container's namespace to another container's
//               direct port, until the far end's vrdmad answers that it accepted the hello.
//
// What a hello presents is for the caller to judge (tickets.h); this class only moves bytes.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/unique_fd.h"
#include "transport/wire.h"

namespace vrdma::daemon {

struct DirectPortLimits {
  uint32_t arrivals_per_source = 8;  // unauthenticated connections from one address
  uint32_t arrivals_total = 1024;
  int64_t hello_ns = 2'000'000'000;  // an arrival says hello within this, or is closed
  // A dial's TCP handshake is the pod network's say and keeps the caller's deadline; once it
  // is through, the far end's vrdmad (a busy host's control plane) has this long to answer.
  int64_t answer_ns = 3'000'000'000;
};

class DirectPort {
 public:
  // Tags: kTagBase | id in the caller's epoll.
  static constexpr uint64_t kTagBase = 7ull << 32;
  static bool is_tag(uint64_t tag) { return (tag >> 32) == 7; }

  // A connection whose hello arrived; the caller takes `fd` (or it is closed on return).
  struct Arrival {
    UniqueFd fd;
    wire::DirectHello hello{};
    uint32_t peer_ipv4 = 0;      // the TCP peer (network order)
    uint32_t listener_ipv4 = 0;  // the container it arrived at
  };
  using OnArrival = std::function<void(Arrival&)>;
  // A dial ends: 0 with the connection (the far end accepted), or an errno (ECONNREFUSED: it
  // refused or nobody listens; ETIMEDOUT: no answer in time).
  using Dialed = std::function<void(int status, UniqueFd fd)>;

  DirectPort(int epoll_fd, DirectPortLimits lim, OnArrival on_arrival);
  ~DirectPort();
  DirectPort(const DirectPort&) = delete;
  DirectPort& operator=(const DirectPort&) = delete;

  // Listens on `sock` (a TCP socket the caller made in the container's namespace) at
  // ipv4:port. Returns its id (> 0), or 0 with *err.
  uint32_t listen(UniqueFd sock, uint32_t ipv4, uint16_t port, int* err);
  void unlisten(uint32_t id);  // its arrivals go with it
  // Connects `sock` (made in the source's namespace) to dst_ipv4:port by `deadline_ns`, sends
  // `hello` and waits for the one-byte answer (until the later of `deadline_ns` and
  // answer_ns after the handshake); `done` runs from on_event or expire (or at once when the
  // connect fails at once).
  void dial(UniqueFd sock, uint32_t dst_ipv4, uint16_t port, const wire::DirectHello& hello,
            int64_t deadline_ns, Dialed done);

  void on_event(uint64_t tag, uint32_t events, int64_t now);
  // Arrivals and dials past their deadlines end. The next deadline (ns; -1: none).
  int64_t expire(int64_t now);

  size_t listeners() const { return listeners_.size(); }
  size_t arrivals() const { return arrivals_.size(); }
  size_t dials() const { return dials_.size(); }
  // Arrivals closed to make room for others (a source over its bound, or all of them full).
  uint64_t evicted() const { return evicted_; }

 private:
  struct Listener {
    UniqueFd fd;
    uint32_t ipv4 = 0;
  };
  struct Conn {
    UniqueFd fd;
    int64_t deadline = 0;
    uint8_t buf[sizeof(wire::Header) + sizeof(wire::DirectHello)] = {};
    size_t have = 0;
    uint32_t peer_ipv4 = 0;
    uint32_t listener = 0;  // arrivals: the listener's id
    uint64_t seq = 0;       // arrivals: their order (the oldest makes room)
    // Dials: the hello sent (bytes of buf), then the answer awaited.
    bool connected = false;
    Dialed done;
  };
  void accept_all(uint32_t listener_id, const Listener& l, int64_t now);
  void make_room(uint32_t peer_ipv4);  // evicts to stay within the arrival bounds
  void read_hello(uint32_t id, int64_t now);
  void step_dial(uint32_t id, uint32_t events, int64_t now);
  void end_dial(uint32_t id, int status);
  void watch(int fd, uint32_t id, uint32_t events, bool add);

  int epoll_;
  DirectPortLimits lim_;
  OnArrival on_arrival_;
  uint32_t next_id_ = 1;
  uint64_t next_seq_ = 1;
  uint64_t evicted_ = 0;
  std::map<uint32_t, Listener> listeners_;
  std::map<uint32_t, Conn> arrivals_;
  std::map<uint32_t, Conn> dials_;
  std::map<uint32_t, uint32_t> per_source_;  // peer address -> its arrivals
};

}  // namespace vrdma::daemon
