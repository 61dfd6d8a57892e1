// Host-wide tables of the control path: QP numbers (owner, type, arena offset, links between
// QPs) and memory keys. Pure bookkeeping, no I/O; the caller does the permission checks that
// need client identity (tenants) and sends whatever notifications the results call for.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <unordered_map>
#include <vector>

namespace vrdma::daemon {

// How a connected QP reaches its destination (status, metrics), and why.
enum class ConnectPath : uint8_t {
  kNone = 0,
  kSharedMemory,  // a container of this host, of the same tenant
  kDirect,        // a container of another host, straight over the pod network
  kRouted,        // through the routers of both hosts
  kMediated,      // another tenant's container that a rule lets it reach: through the router
};
const char* path_name(ConnectPath p);

struct QpRecord {
  uint32_t owner = 0;
  uint32_t type = 0;  // proto::QpType
  uint32_t arena_offset = 0;
  // What senders reach (the owner's fd ids): the QP object, its SRQ's object (0: none), the
  // eventfd senders write (0: none), and its protection domain.
  uint32_t object_fd_id = 0;
  uint32_t srq_fd_id = 0;
  uint32_t notify_fd_id = 0;
  uint32_t pd = 0;
  uint32_t xrcd = 0;  // XRC_RECV QPs and XRC SRQs: their XRC domain (0: none yet)
  std::set<uint32_t> out;  // destination QPNs this QP was connected to
  std::set<uint32_t> in;   // QPNs (of any client) connected to this one
  // What the QP's RTR names as its destination (RC, UC; set by ConnectQp): the peer's address
  // (network order) and QP number, on this host or another.
  bool has_peer = false;
  uint32_t peer_ipv4 = 0;
  uint32_t peer_qpn = 0;
  ConnectPath path = ConnectPath::kNone;
  const char* path_why = "";  // a literal
};

struct KeyRecord {
  uint32_t owner = 0;
  uint32_t index = 0;
  uint32_t access = 0;
  uint64_t length = 0;
  uint32_t pd = 0;
  // A memory window: the record answers for key & ~0xff and its 255 variants; the rights and
  // range are the window's as bound, which the owner's MR table holds.
  bool window = false;
  // An implicit ODP MR: no pages of its own; grants of it are of the owner's registrations
  // with the same rights and protection domain (daemon/core/implicit_odp.cc).
  bool implicit = false;
};

// "Tell `client` that its QP `qpn` lost its peer."
struct FatalNotice {
  uint32_t client = 0;
  uint32_t qpn = 0;
};

// 32 random bits per call from the kernel's CSPRNG (getrandom), buffered.
class RandomSource {
 public:
  uint32_t next();

 private:
  uint32_t buf_[64];
  size_t pos_ = 64;
};

class Registry {
 public:
  static constexpr uint32_t kFirstQpn = 0x100;
  static constexpr uint32_t kLastQpn = 0xFFFFFF;
  // At most half the QPN space is live at once, so that a random draw finds a free number
  // with probability 1/2 or better: kQpnDraws draws fail with probability 2^-64 at most.
  static constexpr size_t kMaxLiveQpns = (kLastQpn - kFirstQpn + 1) / 2;
  static constexpr int kQpnDraws = 64;

  // random32 is for tests; by default QPNs and keys come from RandomSource.
  explicit Registry(std::function<uint32_t()> random32 = {});

  // QPs. Errors are positive errno values; 0 on success. QPNs are drawn at random among the
  // free ones (24 bits, from kFirstQpn): one QPN says nothing about the others. EDQUOT (the
  // owner holds `quota`), ENOSPC (kMaxLiveQpns are live).
  int alloc_qpn(uint32_t owner, uint32_t type, uint32_t arena_offset, size_t quota, uint32_t* qpn);
  int free_qpn(uint32_t requester, uint32_t qpn);  // ENOENT, EPERM
  const QpRecord* find_qp(uint32_t qpn) const;
  // Records local -> dest. RC and UC QPs have one peer at a time, so connecting one again
  // replaces its earlier link; a UD QP collects links to every destination it resolves.
  // Both QPNs must exist.
  void link(uint32_t local_qpn, uint32_t dest_qpn);
  // The shared objects of QP `qpn` (at AllocQpn, and again when a reset renews them).
  void set_objects(uint32_t qpn, uint32_t object_fd_id, uint32_t srq_fd_id, uint32_t notify_fd_id,
                   uint32_t pd);
  // The XRC domain of an XRC_RECV QP or XRC SRQ.
  void set_xrcd(uint32_t qpn, uint32_t xrcd);
  // Records what QP `qpn`'s RTR names as its destination (replacing what an earlier RTR named).
  void set_peer(uint32_t qpn, uint32_t peer_ipv4, uint32_t peer_qpn);
  // How the QP reaches its destination, and why (`why`: a literal).
  void set_path(uint32_t qpn, ConnectPath path, const char* why);
  // A reset: the QP names nobody until its next RTR.
  void clear_peer(uint32_t qpn);
  // Whether QP `qpn` exists and its RTR named (peer_ipv4, peer_qpn): the destination's consent.
  bool names_peer(uint32_t qpn, uint32_t peer_ipv4, uint32_t peer_qpn) const;
  // QP `qpn` is `to`'s from now on (a shared XRC_RECV QP whose owner let it go): the links to
  // and from it follow, its arena record (the old owner's) is no more. ENOENT.
  int hand_over(uint32_t qpn, uint32_t to);
  // Whether `client` holds a link from one of its QPs to a QP of `owner`.
  bool has_link_to(uint32_t client, uint32_t owner) const;

  // Keys: 32 unguessable bits, never 0, unique among live keys; nothing in a key says where its
  // MR is (`index`, the owner's slot, is kept here).
  int alloc_key(uint32_t owner, uint32_t index, uint32_t access, uint64_t length, size_t quota,
                uint32_t* key, uint32_t pd = 0);
  // A memory window's key family (see KeyRecord::window): a key with its low byte 0.
  int alloc_window_key(uint32_t owner, uint32_t index, uint32_t pd, size_t quota, uint32_t* key);
  // Only the owner may free; for anyone else a key is as unknown as a key that does not exist
  // (ENOENT), so that FreeKey cannot be used to probe for other clients' keys.
  int free_key(uint32_t requester, uint32_t key);
  // The owner's key `key` now describes another registration (ibv_rereg_mr). ENOENT as above.
  int replace_key(uint32_t requester, uint32_t key, uint32_t index, uint32_t access,
                  uint64_t length, uint32_t pd);
  const KeyRecord* find_key(uint32_t key) const;
  // The owner's key `key` is an implicit ODP MR's (KeyRecord::implicit).
  void mark_implicit(uint32_t key);

  const std::set<uint32_t>& qpns_of(uint32_t client) const;
  const std::set<uint32_t>& keys_of(uint32_t client) const;
  size_t qp_count() const { return qps_.size(); }
  size_t key_count() const { return keys_.size(); }

  // For a client that died: every (other client, its RC or UC QP) connected to one of its QPs,
  // once per QP. UD QPs are never told: a datagram destination that goes loses nobody a QP.
  std::vector<FatalNotice> notices_for_death(uint32_t client) const;
  // Drops every QP, link and key of the client.
  void remove_client(uint32_t client);

 private:
  struct ClientRes {
    std::set<uint32_t> qpns;
    std::set<uint32_t> keys;
    std::map<uint32_t, uint32_t> links_to;  // owner client -> number of links to its QPs
  };
  void unlink(uint32_t local_qpn, uint32_t dest_qpn);
  void erase_qp(uint32_t qpn);
  void forget_if_empty(uint32_t client);
  uint32_t random32();

  std::function<uint32_t()> random32_;
  RandomSource random_;
  std::map<uint32_t, QpRecord> qps_;
  std::unordered_map<uint32_t, KeyRecord> keys_;
  std::map<uint32_t, ClientRes> clients_;
};

}  // namespace vrdma::daemon
