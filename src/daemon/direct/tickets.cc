#include "daemon/direct/tickets.h"

#include <errno.h>
#include <string.h>
#include <sys/random.h>

#include <cstdlib>

namespace vrdma::daemon {

TicketId new_ticket() {
  TicketId id{};
  size_t got = 0;
  while (got < id.size()) {
    ssize_t n = ::getrandom(id.data() + got, id.size() - got, 0);
    if (n > 0) {
      got += static_cast<size_t>(n);
    } else if (errno != EINTR) {
      std::abort();  // no randomness: no ticket anyone could not guess
    }
  }
  return id;
}

int TicketTable::keep(const TicketId& id, const Ticket& t, int64_t now) {
  std::lock_guard lock(mu_);
  if (tickets_.count(id)) return EEXIST;
  if (tickets_.size() >= total_ || per_dst_[t.dst_ipv4] >= per_destination_) {
    // Make room from what expired before refusing.
    for (auto it = tickets_.begin(); it != tickets_.end();) {
      auto next = std::next(it);
      if (it->second.expires_ns <= now) erase_locked(it);
      it = next;
    }
    if (tickets_.size() >= total_ || per_dst_[t.dst_ipv4] >= per_destination_) {
      if (per_dst_[t.dst_ipv4] == 0) per_dst_.erase(t.dst_ipv4);
      return ENOSPC;
    }
  }
  tickets_.emplace(id, t);
  ++per_dst_[t.dst_ipv4];
  return 0;
}

std::optional<Ticket> TicketTable::take(const wire::DirectHello& hello, uint32_t peer_ipv4,
                                        uint32_t listener_ipv4, int64_t now, const char** why) {
  TicketId id;
  memcpy(id.data(), hello.ticket, id.size());
  std::lock_guard lock(mu_);
  auto it = tickets_.find(id);
  if (it == tickets_.end()) {
    *why = "unknown ticket";
    return std::nullopt;
  }
  const Ticket t = it->second;
  erase_locked(it);  // one try per ticket, whatever follows
  if (t.expires_ns <= now) {
    *why = "expired ticket";
    return std::nullopt;
  }
  if (peer_ipv4 != t.src_ipv4) {
    *why = "ticket presented from another address than its source's";
    return std::nullopt;
  }
  if (listener_ipv4 != t.dst_ipv4 || hello.dst_ipv4 != t.dst_ipv4 ||
      hello.src_ipv4 != t.src_ipv4 || hello.src_qpn != t.src_qpn ||
      hello.dst_qpn != t.dst_qpn || hello.qp_type != t.qp_type) {
    *why = "ticket presented for another connection than its own";
    return std::nullopt;
  }
  return t;
}

void TicketTable::expire(int64_t now) {
  std::lock_guard lock(mu_);
  for (auto it = tickets_.begin(); it != tickets_.end();) {
    auto next = std::next(it);
    if (it->second.expires_ns <= now) erase_locked(it);
    it = next;
  }
}

size_t TicketTable::size() const {
  std::lock_guard lock(mu_);
  return tickets_.size();
}

void TicketTable::erase_locked(std::map<TicketId, Ticket>::iterator it) {
  auto d = per_dst_.find(it->second.dst_ipv4);
  if (d != per_dst_.end() && --d->second == 0) per_dst_.erase(d);
  tickets_.erase(it);
}

}  // namespace vrdma::daemon
