// A connected client of vrdmad, as the daemon knows it: who it is (found by the daemon
// itself), what it has handed over (descriptors, its arena) and where its connection stands.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <utility>

#include "common/protocol.h"
#include "common/unique_fd.h"
#include "daemon/identity/client_identity.h"
#include "daemon/registry/arena_view.h"
#include "daemon/registry/object_view.h"

namespace vrdma::daemon {

// A descriptor a client handed over with PutFd.
struct ClientFd {
  UniqueFd fd;
  proto::FdKind kind{};
  uint64_t size = 0;  // files: the size the file has (sealed: it cannot change)
  // Memory sealed against new writable mappings: the daemon's own writable mapping, made before
  // the seal, for its router.
  void* kept = nullptr;
  // Who unmaps `kept` once the router can no longer be using it (null: unmapped at once).
  std::function<void(void*, size_t)> unmap_kept;
  ObjectView object;  // QP objects: the daemon's mapping
  // Memory: a System V segment's file (AdoptMemory), not a sealed memfd. Whoever holds a
  // writable descriptor of it could shrink it, so vrdmad's router never maps it.
  bool segment = false;
  ClientFd() = default;
  ClientFd(ClientFd&& o) noexcept
      : fd(std::move(o.fd)),
        kind(o.kind),
        size(o.size),
        kept(std::exchange(o.kept, nullptr)),
        unmap_kept(std::move(o.unmap_kept)),
        object(std::move(o.object)),
        segment(o.segment) {}
  ClientFd& operator=(ClientFd&&) = delete;
  ~ClientFd();
};

struct Client {
  uint32_t id = 0;
  UniqueFd sock;
  bool identified = false;
  std::string identify_error;
  Identity ident;
  std::string tenant;  // "" without a device
  // 0 when the client may have a device; else the errno its verbs Hello gets, and why.
  int device_refusal = 0;
  std::string refusal_why;
  // Refused whatever it asks (EMFILE: its container is over its connection quota): its Hello
  // gets this errno. Such clients (and unidentified ones) are counted in refused_pending_.
  int refused = 0;
  NetnsId quota_key;                // the container its use is counted under
  bool connection_counted = false;  // its connection counts towards the container's quota
  uint32_t kind = 0;                // proto::ClientKind once hello is true
  bool hello = false;
  bool doomed = false;  // scheduled for drop; nothing more is read from or sent to it
  std::string drop_reason;
  int protocol_errors = 0;
  // The pacing pages it was given (Op::kPacing), under the address and tenant it had then.
  bool pacing = false;
  uint32_t pacing_ipv4 = 0;
  std::string pacing_tenant;
  bool direct_port = false;  // counted among its container's direct port's clients
  // The direct path: its number for other hosts (what their processes' connections to it are
  // known by; random, never reused), and the processes of other hosts it was given a
  // connection to (by their numbers).
  uint64_t direct_key = 0;
  std::set<uint64_t> direct_links;
  std::map<uint32_t, ClientFd> fds;
  ArenaView arena;
};

}  // namespace vrdma::daemon
