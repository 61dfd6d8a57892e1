// The device as programs find it in a container: the files under /sys/class/infiniband and
// /sys/class/infiniband_verbs that rdma-core, UCX, NCCL, perftest and rdma-core's test suite
// read, with the values vrdma's libibverbs answers to ibv_query_device, ibv_query_port and
// ibv_query_gid in that container. The values that differ per container (GID 0 holds the
// container's address, the node GUID is derived from it, the interface name) come from
// vrdmad's Hello as that container sees it, so the view cannot disagree with the library.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/protocol.h"

namespace vrdma::platform {

// Port attributes vrdma's libibverbs reports (src/compat/verbs/device_verbs.cc); the device
// view test compares the files built from them with what ibv_devinfo -v prints.
inline constexpr const char* kFwVer = "vrdma 0.1.0";
inline constexpr const char* kHcaType = "vrdma";
inline constexpr int kPortState = 4;         // IBV_PORT_ACTIVE
inline constexpr int kPortPhysState = 5;     // LinkUp
inline constexpr int kActiveWidthX = 4;      // active_width 2 = 4X
inline constexpr int kActiveSpeedGbps = 25;  // active_speed 32 = EDR, 25 Gb/s per lane
inline constexpr int kUverbsAbiVersion = 6;  // /sys/class/infiniband_verbs/abi_version
inline constexpr int kDriverAbiVersion = 1;  // uverbs<N>/abi_version

struct DeviceIdentity {
  std::string device_name = "vrdma0";
  int uverbs_index = 0;
  uint64_t node_guid = 0;   // network byte order, as vrdmad's Hello and ibv_get_device_guid
  uint32_t ipv4 = 0;        // network byte order: GID 0 is ::ffff:<ipv4>
  std::string ifname;       // the container's interface holding ipv4 (device/net, ndevs/0)
  unsigned node_major = 1;  // the numbers of /dev/infiniband/uverbs<N> (uverbs<N>/dev)
  unsigned node_minor = 3;
};

struct ViewEntry {
  enum class Kind { kDir, kFile, kSymlink };
  Kind kind;
  std::string path;     // relative to /sys/class
  std::string content;  // file text (with its newline) or symlink target
};

// The identity of the device a container sees: what vrdmad's Hello answered inside the
// container's network namespace, the container's interface holding that address, and the
// numbers of its device node `node` (st_rdev).
DeviceIdentity identity_from_hello(const proto::HelloRep& hello, int uverbs_index, dev_t node);

// Every directory, file and symlink of the view, parents before children.
std::vector<ViewEntry> device_view(const DeviceIdentity& id);

// "0276:7264:0a4d:000a" (sysfs node_guid) and "0000:...:ffff:0a4d:000a" (sysfs gids/N).
std::string sysfs_guid(uint64_t guid_net_order);
std::string sysfs_gid(uint32_t ipv4_net_order);

// Creates the entries under dir (which must exist). Throws std::runtime_error.
void write_view(const std::string& dir, const std::vector<ViewEntry>& entries);

// The name of the interface that holds ipv4 in the calling thread's network namespace, or ""
// if none does.
std::string interface_of(uint32_t ipv4_net_order);

}  // namespace vrdma::platform
