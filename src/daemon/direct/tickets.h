// Tickets of the direct path: what a connection to a container's direct port must present before
// vrdmad hands it to anyone. A ticket is issued by the source's host for exactly one source QP
// (at its container's address), one destination QP (at its address) and one connection, kept by
// the destination's host (the router's kDirect, or this host itself for a connection between two
// of its containers), and taken once: a copy replayed later, from anywhere, finds nothing. It
// expires if nobody presents it.
//
// Thread-safe: the router threads keep tickets other hosts send, the control thread takes them.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>

#include "transport/wire.h"

namespace vrdma::daemon {

using TicketId = std::array<uint8_t, 16>;

// 16 bytes from the kernel's CSPRNG.
TicketId new_ticket();

struct Ticket {
  uint32_t src_ipv4 = 0;  // network order
  uint32_t src_qpn = 0;
  uint32_t dst_ipv4 = 0;
  uint32_t dst_qpn = 0;
  uint32_t qp_type = 0;  // the source QP's
  uint32_t dst_owner = 0;  // the client that owned the destination QP when the ticket was kept
  // The connection only proves that the pod network lets the source reach the destination (a
  // connection between two containers of this host, or rdma_cm's): it is answered and closed.
  bool probe = false;
  int64_t expires_ns = 0;
};

class TicketTable {
 public:
  // At most `per_destination` tickets wait for one destination address, `total` in all.
  explicit TicketTable(size_t per_destination = 1024, size_t total = 16384)
      : per_destination_(per_destination), total_(total) {}

  // Keeps a ticket until `t.expires_ns`. EEXIST: the id is taken; ENOSPC: over a bound.
  int keep(const TicketId& id, const Ticket& t, int64_t now);
  // The ticket `hello` presents, taken (it serves once), when it is known, unexpired, and
  // everything the hello and the TCP peer say matches what it was issued for: the peer address
  // is the source's, the QPNs, the addresses and the QP type are the ticket's. A hello that
  // presents a known ticket with anything else wrong burns the ticket too (an attacker who saw
  // it cannot try again), and *why says what did not match. `listener_ipv4`: the address the
  // connection arrived at (the destination container's).
  std::optional<Ticket> take(const wire::DirectHello& hello, uint32_t peer_ipv4,
                             uint32_t listener_ipv4, int64_t now, const char** why);
  // Forgets the expired tickets.
  void expire(int64_t now);
  size_t size() const;

 private:
  void erase_locked(std::map<TicketId, Ticket>::iterator it);

  size_t per_destination_, total_;
  mutable std::mutex mu_;
  std::map<TicketId, Ticket> tickets_;
  std::map<uint32_t, size_t> per_dst_;  // destination address -> tickets waiting for it
};

}  // namespace vrdma::daemon
