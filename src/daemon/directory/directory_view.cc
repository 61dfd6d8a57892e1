#include "daemon/directory/directory_view.h"

#include <arpa/inet.h>

#include <algorithm>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

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
  networks_.erase(self_.host_id);
  for (auto it = claims_.begin(); it != claims_.end();) {
    it->second.erase(self_.host_id);
    it = it->second.empty() ? claims_.erase(it) : std::next(it);
  }
  settle();
}

void DirectoryView::clear() {
  hosts_.clear();
  networks_.clear();
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
    case EntryKind::kNetwork: {
      const std::pair<uint32_t, uint32_t> net{k->cidr.network, k->cidr.mask};
      if (u.deleted || !parse_network_value(u.value, &why)) {
        if (auto it = networks_.find(k->host); it != networks_.end()) {
          it->second.erase(net);
          if (it->second.empty()) networks_.erase(it);
        }
        return u.deleted ? "" : "ignoring " + printable(u.key) + ": " + why;
      }
      networks_[k->host][net] = u.create_revision;
      return "";
    }
    case EntryKind::kContainer: {
      std::optional<ContainerInfo> info;
      if (!u.deleted) info = parse_container_value(u.value, &why);
      if (!info) {
        if (auto it = claims_.find(k->ipv4); it != claims_.end()) {
          it->second.erase(k->host);
          if (it->second.empty()) claims_.erase(it);
        }
        return u.deleted ? "" : "ignoring " + printable(u.key) + ": " + why;
      }
      claims_[k->ipv4][k->host] = Claim{std::move(*info), u.create_revision};
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
  groups_.clear();
  std::set<std::string> refusals;

  // The accepted blocks overlapping [first, last]: since blocks are disjoint, those from the
  // last one starting at or before `first` up to the last one starting at or before `last`.
  auto overlapping = [&](uint32_t first, uint32_t last) {
    std::vector<std::map<uint32_t, Block>::iterator> found;
    auto it = blocks_.upper_bound(first);
    if (it != blocks_.begin()) {
      auto prev = std::prev(it);
      if (prev->second.last >= first) found.push_back(prev);
    }
    for (; it != blocks_.end() && it->first <= last; ++it) found.push_back(it);
    return found;
  };
  // Places `c` for `host` unless another host holds part of it; blocks of `host` inside it
  // (networks nest or are disjoint) merge into it. The holder it overlaps, if refused.
  auto place = [&](const Ipv4Cidr& c,
                   uint32_t host) -> std::optional<std::pair<Ipv4Cidr, uint32_t>> {
    auto found = overlapping(c.network, last_address(c));
    for (auto it : found) {
      if (it->second.host != host)
        return std::make_pair(Ipv4Cidr{it->first, ~(it->second.last - it->first)}, it->second.host);
    }
    bool inside_own = found.size() == 1 && found[0]->first <= c.network &&
                      found[0]->second.last >= last_address(c);
    if (inside_own) return std::nullopt;  // nested in a block it holds already
    for (auto it : found) blocks_.erase(it);
    blocks_[c.network] = Block{last_address(c), host};
    return std::nullopt;
  };

  for (const auto& c : broadest_first(self_.cidrs)) place(c, self_.host_id);

  // Every network claim of a known host, earliest first (broadest first within one revision).
  struct NetworkClaim {
    int64_t created;
    uint32_t host;
    Ipv4Cidr cidr;
  };
  std::vector<NetworkClaim> order;
  for (const auto& [id, nets] : networks_) {
    if (!hosts_.count(id)) continue;  // no valid info entry: not a host (yet)
    for (const auto& [net, created] : nets) order.push_back({created, id, {net.first, net.second}});
  }
  std::sort(order.begin(), order.end(), [](const NetworkClaim& a, const NetworkClaim& b) {
    return std::make_tuple(a.created, a.host, a.cidr.prefix_len(), a.cidr.network) <
           std::make_tuple(b.created, b.host, b.cidr.prefix_len(), b.cidr.network);
  });
  for (const auto& [id, rec] : hosts_) accepted_[id] = rec.entry;
  for (const auto& claim : order) {
    HostEntry& e = accepted_[claim.host];
    if (e.cidrs.size() >= kMaxCidrsPerHost) {
      refusals.insert(host_text(claim.host) + " claims network " + cidr_text(claim.cidr) +
                      ", more than " + std::to_string(kMaxCidrsPerHost) + " networks: refused");
      continue;
    }
    if (auto held = place(claim.cidr, claim.host)) {
      refusals.insert(host_text(claim.host) + " claims network " + cidr_text(claim.cidr) +
                      ", which overlaps " + cidr_text(held->first) + " of " +
                      (held->second == self_.host_id
                           ? "this host"
                           : host_text(held->second) + " (claimed first)") +
                      ": refused; the first claim holds");
      continue;
    }
    e.cidrs.push_back(claim.cidr);
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
        if (auto held = overlapping(ip, ip); !held.empty())
          holder = ", which belongs to " + (held[0]->second.host == self_.host_id
                                                ? std::string("this host")
                                                : host_text(held[0]->second.host));
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
    if (winner) {
      owners_[ip] = winner->first;
      for (uint32_t g : winner->second.info.groups) groups_[g].emplace_back(winner->first, ip);
    }
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

const ContainerInfo* DirectoryView::container(uint32_t ipv4_host) const {
  auto o = owners_.find(ipv4_host);
  if (o == owners_.end()) return nullptr;
  auto by_host = claims_.find(ipv4_host);
  if (by_host == claims_.end()) return nullptr;
  auto c = by_host->second.find(o->second);
  return c == by_host->second.end() ? nullptr : &c->second.info;
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
