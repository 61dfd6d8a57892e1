// The sandbox's containers as programs see their files: each container has its own mount
// namespace, made by `vrdma sandbox up` and entered by `vrdma sandbox exec`, with /sys showing
// its network namespace, a private /dev holding the container edits' device node
// (/dev/infiniband/uverbs0) and the device view under /sys/class/infiniband*. The namespaces
// are pinned at <run dir>/mnt/<container> (a private mount, so that nothing propagates to or
// from the host's mounts) and released by `vrdma sandbox down`.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "ctl/sandbox_state.h"
#include "platform/container_edits.h"

namespace vrdma::ctl {

std::string mounts_dir(const std::string& run_dir);  // <run dir>/mnt
std::string mount_ns_path(const std::string& run_dir, const std::string& container);

// The edits the sandbox applies to a container of `host`: the drop-in libraries of this vrdma
// ($VRDMA_LIBDIR, the build tree's, or the installed ones) and the host's vrdmad socket.
platform::ContainerEdits sandbox_edits(const SandboxHost& host);

// Creates and pins the mount namespace of every container. Needs the hosts' vrdmad running:
// each container's device view holds what its vrdmad answers to a Hello from that container.
// `step` runs before each container (it throws to interrupt). Throws Error.
void build_container_mounts(const Sandbox& sandbox, const std::function<void()>& step);

// Unpins every namespace under <run dir>/mnt and removes it; true if there was anything.
bool release_container_mounts(const std::string& run_dir, std::vector<std::string>& errors);

// Moves the calling (single-threaded) process into the container's mount namespace, keeping
// its working directory when that exists there. False if the sandbox has none for it.
bool enter_container_mounts(const std::string& run_dir, const std::string& container);

}  // namespace vrdma::ctl
