// Per-container quotas: what the clients of one container (one network namespace) hold in
// vrdmad together, against limits from the configuration. Every client of a container counts
// towards the same totals, however many connections it opens. Clients of anonymous namespaces
// (which anyone can make) share one set of totals.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "daemon/identity/client_identity.h"

namespace vrdma::daemon {

enum class Resource : uint8_t {
  kConnections,       // connections to vrdmad
  kQps,               // QP numbers
  kMrs,               // memory keys
  kRegisteredBytes,   // bytes of memory registered under those keys
  kFds,               // descriptors handed to vrdmad (PutFd)
  kCmListeners,       // rdma_cm listeners
  kCmConnections,     // rdma_cm connections it initiated
  kDirectoryEntries,  // entries in the cluster directory: its address, its listeners
};
inline constexpr size_t kResourceCount = 8;

// "connections", "qps", "mrs", "registered_bytes", "fds", "cm_listeners", "cm_connections",
// "directory_entries": the names in status and in vrdmad's options.
const char* resource_name(Resource r);
// What a request over the limit is refused with: EMFILE for what behaves like descriptors
// (connections, fds, rdma_cm listeners and connections), EDQUOT for the rest.
int resource_errno(Resource r);

struct QuotaLimits {
  std::array<uint64_t, kResourceCount> max = {
      256,          // connections
      16384,        // QPs
      16384,        // MRs
      64ull << 30,  // registered bytes (64 GiB)
      16384,        // fds
      1024,         // rdma_cm listeners
      16384,        // rdma_cm connections
      1025,         // directory entries: the address and 1024 listeners
  };
  uint64_t& operator[](Resource r) { return max[static_cast<size_t>(r)]; }
  uint64_t operator[](Resource r) const { return max[static_cast<size_t>(r)]; }
  bool operator==(const QuotaLimits&) const = default;
};

class ContainerQuotas {
 public:
  struct Usage {
    std::string name;  // for logs and status
    std::array<uint64_t, kResourceCount> used{};
    std::array<bool, kResourceCount> refused_logged{};
    bool published = false;  // its address counts as a directory entry
    uint64_t operator[](Resource r) const { return used[static_cast<size_t>(r)]; }
  };

  explicit ContainerQuotas(const QuotaLimits& limits) : limits_(limits) {}

  // The key clients of this identity are counted under: their namespace, or one key shared by
  // every anonymous namespace.
  static NetnsId key_of(const Identity& id);

  // Counts `n` of `r` for the container, whose name is `name` in logs. 0, or the errno of
  // resource_errno(r) when that would go over the limit (nothing is counted then). The first
  // refusal of each resource is logged, once per container.
  int charge(const NetnsId& key, const std::string& name, Resource r, uint64_t n = 1);
  // Gives `n` of `r` back. When the container's last connection goes, its address stops
  // counting as a directory entry and the container is forgotten.
  void release(const NetnsId& key, Resource r, uint64_t n = 1);
  // Counts the container's address as a directory entry, once. 0 or EDQUOT.
  int charge_published(const NetnsId& key);

  const Usage* usage(const NetnsId& key) const;
  const std::map<NetnsId, Usage>& containers() const { return usage_; }
  const QuotaLimits& limits() const { return limits_; }

 private:
  QuotaLimits limits_;
  std::map<NetnsId, Usage> usage_;
};

}  // namespace vrdma::daemon
