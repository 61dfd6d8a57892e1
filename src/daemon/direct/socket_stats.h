// The direct path's traffic as the kernel counts it: the TCP connections of a container's
// network namespace to or from the direct port, read through NETLINK_SOCK_DIAG (the kernel's
// socket statistics, as `ss -ti` shows them). The container's processes own those sockets but
// cannot change what the kernel counted on them, nor move direct-path data on other sockets (vrdmad
// opens every direct connection itself, to or from that port), so these are the per-container
// figures vrdmad reports for the direct path, where its own router sees none of the bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>

namespace vrdma::daemon {

struct SocketBytes {
  uint64_t sent = 0;      // bytes the peer acknowledged (tcpi_bytes_acked)
  uint64_t received = 0;  // bytes received in order (tcpi_bytes_received)
};

// Every TCP connection (not listening) of the namespace `diag_fd` was made in whose local or
// remote port is `port`, by socket cookie. 0, or errno.
int read_port_sockets(int diag_fd, uint16_t port, std::map<uint64_t, SocketBytes>& out);

// A NETLINK_SOCK_DIAG socket of the namespace it is made in, subscribed to the kernel's last
// word on each TCP socket it destroys (SKNLGRP_INET_TCP_DESTROY: the final counts). Non-blocking;
// 0, or errno.
int subscribe_destroyed(int fd);
// The connections to or from `port` destroyed since the last call, with their final counts.
void read_destroyed(int fd, uint16_t port, std::map<uint64_t, SocketBytes>& out);

// A namespace's totals kept monotonic as connections come and go: a connection that is gone
// counts with its final figures when the kernel said them, else with its last reading.
class DirectTraffic {
 public:
  // Folds in the connections destroyed since the last update, then the live ones (read after).
  void update(const std::map<uint64_t, SocketBytes>& destroyed,
              const std::map<uint64_t, SocketBytes>& live);
  SocketBytes totals() const;
  size_t connections() const { return live_.size(); }
  // Starts from the totals of an earlier ledger of the namespace.
  void carry(const SocketBytes& earlier) { gone_ = earlier; }

 private:
  static constexpr size_t kMaxRecent = 4096;
  std::map<uint64_t, SocketBytes> live_;
  // Gone from a reading without their final figures yet: counted with their last ones, the
  // rest added when the kernel's word comes.
  std::map<uint64_t, SocketBytes> recent_;
  SocketBytes gone_;
};

}  // namespace vrdma::daemon
