#include "daemon/registry/registry.h"

#include <errno.h>
#include <sys/random.h>

#include <random>

#include "common/protocol.h"
#include "shm/layout.h"

namespace vrdma::daemon {

namespace {
const std::set<uint32_t> kEmpty;
}

uint32_t RandomSource::next() {
  if (pos_ >= sizeof(buf_) / sizeof(buf_[0])) {
    size_t got = 0;
    auto* bytes = reinterpret_cast<unsigned char*>(buf_);
    while (got < sizeof(buf_)) {
      ssize_t n = ::getrandom(bytes + got, sizeof(buf_) - got, 0);
      if (n > 0) {
        got += static_cast<size_t>(n);
      } else if (n < 0 && errno != EINTR) {
        // No getrandom (very old kernel or seccomp): fall back to the C++ library's source.
        std::random_device rd;
        for (size_t i = got / sizeof(uint32_t); i < sizeof(buf_) / sizeof(buf_[0]); ++i)
          buf_[i] = rd();
        break;
      }
    }
    pos_ = 0;
  }
  return buf_[pos_++];
}

Registry::Registry(std::function<uint32_t()> random32) : random32_(std::move(random32)) {}

uint32_t Registry::random32() {
  return random32_ ? random32_() : random_.next();
}

int Registry::alloc_qpn(uint32_t owner, uint32_t type, uint32_t arena_offset, size_t quota,
                        uint32_t* qpn) {
  if (qpns_of(owner).size() >= quota) return EDQUOT;
  if (qps_.size() >= kMaxLiveQpns) return ENOSPC;
  constexpr uint32_t kSpace = kLastQpn - kFirstQpn + 1;
  for (int draw = 0; draw < kQpnDraws; ++draw) {
    uint32_t candidate = kFirstQpn + random32() % kSpace;
    if (qps_.count(candidate)) continue;
    QpRecord rec;
    rec.owner = owner;
    rec.type = type;
    rec.arena_offset = arena_offset;
    qps_.emplace(candidate, std::move(rec));
    clients_[owner].qpns.insert(candidate);
    *qpn = candidate;
    return 0;
  }
  return ENOSPC;
}

void Registry::set_peer(uint32_t qpn, uint32_t peer_ipv4, uint32_t peer_qpn) {
  auto it = qps_.find(qpn);
  if (it == qps_.end()) return;
  it->second.has_peer = true;
  it->second.peer_ipv4 = peer_ipv4;
  it->second.peer_qpn = peer_qpn;
}

void Registry::set_path(uint32_t qpn, ConnectPath path, const char* why) {
  auto it = qps_.find(qpn);
  if (it == qps_.end()) return;
  it->second.path = path;
  it->second.path_why = why;
}

const char* path_name(ConnectPath p) {
  switch (p) {
    case ConnectPath::kNone:
      return "none";
    case ConnectPath::kSharedMemory:
      return "shared-memory";
    case ConnectPath::kDirect:
      return "direct";
    case ConnectPath::kRouted:
      return "routed";
    case ConnectPath::kMediated:
      return "mediated";
  }
  return "none";
}

void Registry::set_objects(uint32_t qpn, uint32_t object_fd_id, uint32_t srq_fd_id,
                           uint32_t notify_fd_id, uint32_t pd) {
  auto it = qps_.find(qpn);
  if (it == qps_.end()) return;
  it->second.object_fd_id = object_fd_id;
  it->second.srq_fd_id = srq_fd_id;
  it->second.notify_fd_id = notify_fd_id;
  it->second.pd = pd;
}

void Registry::set_xrcd(uint32_t qpn, uint32_t xrcd) {
  auto it = qps_.find(qpn);
  if (it != qps_.end()) it->second.xrcd = xrcd;
}

void Registry::clear_peer(uint32_t qpn) {
  auto it = qps_.find(qpn);
  if (it == qps_.end()) return;
  it->second.has_peer = false;
  it->second.peer_ipv4 = 0;
  it->second.peer_qpn = 0;
}

bool Registry::names_peer(uint32_t qpn, uint32_t peer_ipv4, uint32_t peer_qpn) const {
  const QpRecord* r = find_qp(qpn);
  return r && r->has_peer && r->peer_ipv4 == peer_ipv4 && r->peer_qpn == peer_qpn;
}

const QpRecord* Registry::find_qp(uint32_t qpn) const {
  auto it = qps_.find(qpn);
  return it == qps_.end() ? nullptr : &it->second;
}

void Registry::unlink(uint32_t local_qpn, uint32_t dest_qpn) {
  auto l = qps_.find(local_qpn);
  auto d = qps_.find(dest_qpn);
  if (l == qps_.end() || d == qps_.end()) return;
  if (!l->second.out.erase(dest_qpn)) return;
  d->second.in.erase(local_qpn);
  auto c = clients_.find(l->second.owner);
  if (c == clients_.end()) return;
  auto n = c->second.links_to.find(d->second.owner);
  if (n != c->second.links_to.end() && --n->second == 0) c->second.links_to.erase(n);
}

void Registry::link(uint32_t local_qpn, uint32_t dest_qpn) {
  auto l = qps_.find(local_qpn);
  auto d = qps_.find(dest_qpn);
  if (l == qps_.end() || d == qps_.end()) return;
  if (l->second.out.count(dest_qpn)) return;
  if (l->second.type != static_cast<uint32_t>(proto::QpType::kUd)) {
    std::vector<uint32_t> old(l->second.out.begin(), l->second.out.end());
    for (uint32_t o : old) unlink(local_qpn, o);
  }
  l->second.out.insert(dest_qpn);
  d->second.in.insert(local_qpn);
  ++clients_[l->second.owner].links_to[d->second.owner];
}

bool Registry::has_link_to(uint32_t client, uint32_t owner) const {
  auto c = clients_.find(client);
  return c != clients_.end() && c->second.links_to.count(owner) != 0;
}

void Registry::erase_qp(uint32_t qpn) {
  auto it = qps_.find(qpn);
  if (it == qps_.end()) return;
  std::vector<uint32_t> out(it->second.out.begin(), it->second.out.end());
  for (uint32_t d : out) unlink(qpn, d);
  std::vector<uint32_t> in(it->second.in.begin(), it->second.in.end());
  for (uint32_t l : in) unlink(l, qpn);
  uint32_t owner = it->second.owner;
  qps_.erase(it);
  if (auto c = clients_.find(owner); c != clients_.end()) c->second.qpns.erase(qpn);
}

void Registry::forget_if_empty(uint32_t client) {
  auto c = clients_.find(client);
  if (c != clients_.end() && c->second.qpns.empty() && c->second.keys.empty() &&
      c->second.links_to.empty())
    clients_.erase(c);
}

int Registry::free_qpn(uint32_t requester, uint32_t qpn) {
  auto it = qps_.find(qpn);
  if (it == qps_.end()) return ENOENT;
  if (it->second.owner != requester) return EPERM;
  std::set<uint32_t> peers_owners;
  for (uint32_t l : it->second.in) peers_owners.insert(qps_.at(l).owner);
  erase_qp(qpn);
  forget_if_empty(requester);
  for (uint32_t o : peers_owners) forget_if_empty(o);
  return 0;
}

int Registry::alloc_key(uint32_t owner, uint32_t index, uint32_t access, uint64_t length,
                        size_t quota, uint32_t* key, uint32_t pd) {
  if (index == 0 || index >= shm::kMrSlots) return EINVAL;
  if (keys_of(owner).size() >= quota) return EDQUOT;
  for (int tries = 0; tries < 1000; ++tries) {
    uint32_t k = random32();
    if (k == 0 || keys_.count(k)) continue;
    if (auto w = keys_.find(k & ~0xFFu); w != keys_.end() && w->second.window) continue;
    keys_.emplace(k, KeyRecord{owner, index, access, length, pd});
    clients_[owner].keys.insert(k);
    *key = k;
    return 0;
  }
  return ENOSPC;
}

int Registry::alloc_window_key(uint32_t owner, uint32_t index, uint32_t pd, size_t quota,
                               uint32_t* key) {
  if (index == 0 || index >= shm::kMrSlots) return EINVAL;
  if (keys_of(owner).size() >= quota) return EDQUOT;
  for (int tries = 0; tries < 1000; ++tries) {
    uint32_t base = random32() & ~0xFFu;
    if (base == 0) continue;
    bool taken = false;
    for (uint32_t low = 0; low < 256 && !taken; ++low) taken = keys_.count(base | low) != 0;
    if (taken) continue;
    KeyRecord rec{owner, index, 0, 0, pd};
    rec.window = true;
    keys_.emplace(base, rec);
    clients_[owner].keys.insert(base);
    *key = base;
    return 0;
  }
  return ENOSPC;
}

int Registry::free_key(uint32_t requester, uint32_t key) {
  auto it = keys_.find(key);
  if (it == keys_.end() || it->second.owner != requester) return ENOENT;
  keys_.erase(it);
  clients_[requester].keys.erase(key);
  forget_if_empty(requester);
  return 0;
}

int Registry::replace_key(uint32_t requester, uint32_t key, uint32_t index, uint32_t access,
                          uint64_t length, uint32_t pd) {
  if (index == 0 || index >= shm::kMrSlots) return EINVAL;
  auto it = keys_.find(key);
  if (it == keys_.end() || it->second.owner != requester || it->second.window) return ENOENT;
  it->second = KeyRecord{requester, index, access, length, pd};
  return 0;
}

const KeyRecord* Registry::find_key(uint32_t key) const {
  auto it = keys_.find(key);
  if (it != keys_.end() && !it->second.window) return &it->second;
  it = keys_.find(key & ~0xFFu);
  return it != keys_.end() && it->second.window ? &it->second : nullptr;
}

void Registry::mark_implicit(uint32_t key) {
  auto it = keys_.find(key);
  if (it != keys_.end() && !it->second.window) it->second.implicit = true;
}

const std::set<uint32_t>& Registry::qpns_of(uint32_t client) const {
  auto c = clients_.find(client);
  return c == clients_.end() ? kEmpty : c->second.qpns;
}

const std::set<uint32_t>& Registry::keys_of(uint32_t client) const {
  auto c = clients_.find(client);
  return c == clients_.end() ? kEmpty : c->second.keys;
}

std::vector<FatalNotice> Registry::notices_for_death(uint32_t client) const {
  std::set<std::pair<uint32_t, uint32_t>> seen;  // (client, qpn), ordered and unique
  for (uint32_t qpn : qpns_of(client)) {
    const QpRecord& rec = qps_.at(qpn);
    // A datagram QP has no connection to lose: sends to a destination that is gone are
    // dropped, as on a fabric, and the QP goes on serving its other destinations.
    if (rec.type == static_cast<uint32_t>(proto::QpType::kUd)) continue;
    for (uint32_t l : rec.in) {
      const QpRecord& from = qps_.at(l);
      if (from.owner != client && from.type != static_cast<uint32_t>(proto::QpType::kUd))
        seen.emplace(from.owner, l);
    }
  }
  std::vector<FatalNotice> out;
  out.reserve(seen.size());
  for (auto [c, q] : seen) out.push_back({c, q});
  return out;
}

void Registry::remove_client(uint32_t client) {
  auto c = clients_.find(client);
  if (c == clients_.end()) return;
  std::set<uint32_t> touched;
  std::vector<uint32_t> qpns(c->second.qpns.begin(), c->second.qpns.end());
  for (uint32_t q : qpns) {
    for (uint32_t l : qps_.at(q).in) touched.insert(qps_.at(l).owner);
    erase_qp(q);
  }
  for (uint32_t k : c->second.keys) keys_.erase(k);
  clients_.erase(client);
  for (uint32_t o : touched)
    if (o != client) forget_if_empty(o);
}

}  // namespace vrdma::daemon
