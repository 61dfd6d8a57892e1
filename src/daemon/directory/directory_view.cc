#include "daemon/directory/directory_view.h"

#include <arpa/inet.h>

#include <algorithm>
#include <tuple>

#include "common/address.h"
#include "daemon/directory/entries.h"

namespace vrdma::daemon {

namespace {

uint32_t last_address(const Ipv4Cidr& c) {
  return c.network | ~c.mask;
}

// Broadest first: a network nested in one already placed is then found inside it.
std::vector<Ipv4Cidr> broadest_first(std::vector<Ipv4Cidr> cidrs) {
  std::stable_sort(cidrs.begin(), cidrs.end(), [](const Ipv4Cidr& a, const Ipv4Cidr& b) {
    return a.prefix_len() < b.prefix_len();
  });
  return cidrs;
}

std::string host_text(uint32_t id) {
  return "host " + std::to_string(id);
}

std::string addr_text(uint32_t ipv4_host) {
  return ipv4_text(htonl(ipv4_host));
}

}  // namespace

void DirectoryView::set_self(HostEntry self) {
  self_ = std::move(self);
  hosts_.erase(self_.host_id);
  for (auto it = claims_.begin(); it != claims_.end();) {
    it->second.erase(self_.host_id);
    it = it->second.empty() ? claims_.erase(it) : std::next(it);
  }
  settle();
}

void DirectoryView::clear() {
  hosts_.clear();
  claims_.clear();
}

std::string DirectoryView::apply(const DirectoryUpdate& u) {
  std::string why;
  auto k = parse_entry_key(u.key, &why);
  if (!k) return "ignoring " + printable(u.key) + ": " + why;
  if (k->host == self_.host_id) return "";  // this host knows its own entries
  switch (k->kind) {
    case EntryKind::kHostInfo: {
      if (u.deleted) {
        hosts_.erase(k->host);
        return "";
      }
      auto info = parse_host_info(k->host, u.value, &why);
      if (!info) {
        hosts_.erase(k->host);  // what etcd holds now is not usable
        return "ignoring " + printable(u.key) + ": " + why;
      }
      hosts_[k->host] = HostRecord{std::move(*info), u.create_revision};
      return "";
    }
    case EntryKind::kContainer: {
      std::optional<std::string> name;
      if (!u.deleted) name = parse_container_value(u.value, &why);
      if (!name) {
        if (auto it = claims_.find(k->ipv4); it != claims_.end()) {
          it->second.erase(k->host);
          if (it->second.empty()) claims_.erase(it);
        }
        return u.deleted ? "" : "ignoring " + printable(u.key) + ": " + why;
      }
      claims_[k->ipv4][k->host] = Claim{std::move(*name), u.create_revision};
      return "";
    }
    case EntryKind::kListener:
      // Not kept: a connection request goes to the host that owns the address, which knows
      // its own listeners. Checked all the same, so that a bad one is seen in the log.
      if (!u.deleted && !parse_listener_value(u.value, &why))
        return "ignoring " + printable(u.key) + ": " + why;
      return "";
  }
  return "";
}

std::vector<std::string> DirectoryView::settle() {
  accepted_.clear();
  blocks_.clear();
  owners_.clear();
  std::set<std::string> refusals;

  // The accepted block overlapping [first, last], if any. Blocks are disjoint, so if any
  // overlaps, the one starting last at or before `last` does.
  auto overlapping = [&](uint32_t first, uint32_t last) -> const std::pair<const uint32_t, Block>* {
    auto it = blocks_.upper_bound(last);
    if (it == blocks_.begin()) return nullptr;
    --it;
    return it->second.last >= first ? &*it : nullptr;
  };

  for (const auto& c : broadest_first(self_.cidrs)) {
    if (!overlapping(c.network, last_address(c)))
      blocks_[c.network] = Block{last_address(c), self_.host_id};
  }

  std::vector<const HostRecord*> order;
  for (const auto& [id, rec] : hosts_) order.push_back(&rec);
  std::sort(order.begin(), order.end(), [](const HostRecord* a, const HostRecord* b) {
    return std::tie(a->created, a->entry.host_id) < std::tie(b->created, b->entry.host_id);
  });
  for (const HostRecord* rec : order) {
    const uint32_t id = rec->entry.host_id;
    HostEntry e = rec->entry;
    e.cidrs.clear();
    for (const auto& c : broadest_first(rec->entry.cidrs)) {
      const auto* held = overlapping(c.network, last_address(c));
      if (!held) {
        blocks_[c.network] = Block{last_address(c), id};
        e.cidrs.push_back(c);
      } else if (held->second.host == id) {
        e.cidrs.push_back(c);  // nested in its own
      } else {
        Ipv4Cidr other{held->first, ~(held->second.last - held->first)};
        refusals.insert(host_text(id) + " claims network " + cidr_text(c) + ", which overlaps " +
                        cidr_text(other) + " of " +
                        (held->second.host == self_.host_id
                             ? "this host"
                             : host_text(held->second.host) + " (published first)") +
                        ": refused; the first claim holds");
      }
    }
    accepted_[id] = std::move(e);
  }

  for (const auto& [address, by_host] : claims_) {
    const uint32_t ip = address;  // a plain variable: lambdas capture it (clang 14)
    const std::pair<const uint32_t, Claim>* winner = nullptr;
    for (const auto& entry : by_host) {
      const auto& [host, claim] = entry;
      auto h = accepted_.find(host);
      if (h == accepted_.end()) continue;  // its host is not known (yet)
      bool inside = std::any_of(h->second.cidrs.begin(), h->second.cidrs.end(),
                                [&](const Ipv4Cidr& c) { return c.contains(ip); });
      if (!inside) {
        std::string holder;
        if (const auto* held = overlapping(ip, ip))
          holder = ", which belongs to " + (held->second.host == self_.host_id
                                                ? std::string("this host")
                                                : host_text(held->second.host));
        refusals.insert(host_text(host) + " claims container address " + addr_text(ip) +
                        " outside its networks" + holder + ": refused");
        continue;
      }
      if (!winner ||
          std::tie(claim.created, host) < std::tie(winner->second.created, winner->first)) {
        if (winner)
          refusals.insert(host_text(winner->first) + " claims container address " + addr_text(ip) +
                          ", held by " + host_text(host) + " (published first)" + ": refused");
        winner = &entry;
      } else {
        refusals.insert(host_text(host) + " claims container address " + addr_text(ip) +
                        ", held by " + host_text(winner->first) + " (published first)" +
                        ": refused");
      }
    }
    if (winner) owners_[ip] = winner->first;
  }

  std::vector<std::string> fresh;
  for (const auto& r : refusals)
    if (!refusals_.count(r)) fresh.push_back(r);
  refusals_ = std::move(refusals);
  return fresh;
}

std::optional<HostEntry> DirectoryView::host_by_id(uint32_t id) const {
  if (id == self_.host_id) return self_;
  auto it = accepted_.find(id);
  if (it == accepted_.end()) return std::nullopt;
  return it->second;
}

std::optional<HostEntry> DirectoryView::host_of(uint32_t ipv4_host) const {
  if (auto o = owners_.find(ipv4_host); o != owners_.end()) {
    if (auto h = accepted_.find(o->second); h != accepted_.end()) return h->second;
  }
  for (const auto& c : self_.cidrs)
    if (c.contains(ipv4_host)) return self_;
  auto it = blocks_.upper_bound(ipv4_host);
  if (it == blocks_.begin()) return std::nullopt;
  --it;
  if (it->second.last < ipv4_host) return std::nullopt;
  return host_by_id(it->second.host);
}

}  // namespace vrdma::daemon
