// Making the device view and the device node appear inside a container's mount namespace.
// Every function here takes the host's mount namespace, recorded by the caller before it
// entered or made the container's, and refuses to run in it (or in pid 1's, where that can be
// read), so that a mistake cannot change what the host sees.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "platform/container_edits.h"
#include "platform/device_view.h"

namespace vrdma::platform {

struct MountNsId {
  uint64_t dev = 0;
  uint64_t ino = 0;
  bool operator==(const MountNsId&) const = default;
};

// The calling process's mount namespace. Throws std::runtime_error.
MountNsId current_mount_ns();

// Throws std::runtime_error if the calling process is in `host` or in pid 1's namespace.
void require_other_mount_ns(const MountNsId& host);

// Shows `entries` under <root>/sys/class next to what the sysfs mounted there already has: the
// entries are written to a tmpfs staged under <root>/dev, which becomes the upper layer of a
// read-only overlay on <root>/sys/class; the staging mount and directory are gone afterwards
// (the overlay keeps its own reference). <root>/sys must be a sysfs mount and <root>/dev a
// directory the caller may write (a container's own /dev). Throws std::runtime_error.
void mount_device_view(const MountNsId& host, const std::string& root,
                       const std::vector<ViewEntry>& entries);

// Gives the calling mount namespace its own /dev, as container engines do: a tmpfs holding the
// host's /dev entries (directories such as pts and shm bound recursively, device nodes and
// files bound, symlinks copied) and the edits' device nodes (each a bind of its host node).
// Nothing is created in the host's /dev. Throws std::runtime_error.
void mount_private_dev(const MountNsId& host, const std::vector<DeviceNode>& nodes);

// Replaces /sys with a sysfs mounted from the calling thread's network namespace, so that
// /sys/class/net shows that namespace's interfaces (what `ip netns exec` does).
void mount_sysfs_for_current_netns(const MountNsId& host);

}  // namespace vrdma::platform
