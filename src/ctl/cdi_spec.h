// The Container Device Interface (CDI) spec of vrdma: one device, vrdma.io/hca=vrdma0, whose
// container edits are the container edits (src/platform) plus a createContainer hook that
// builds the container's device view (`vrdma cdi hook`).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "platform/container_edits.h"

namespace vrdma::ctl {

inline constexpr const char* kCdiKind = "vrdma.io/hca";
inline constexpr const char* kCdiDefaultOutput = "/etc/cdi/vrdma.json";
// The oldest version with deviceNodes.hostPath, and the newest that Debian 12's podman 4.3.1
// (CDI 0.5.2) accepts; later engines accept it too.
inline constexpr const char* kCdiDefaultVersion = "0.5.0";

struct CdiOptions {
  std::string version = kCdiDefaultVersion;
  std::string hook_path;    // the vrdma binary run as the createContainer hook; empty: no hook
  std::string socket;       // vrdmad's socket on the host, passed to the hook
  unsigned node_major = 1;  // of the edits' device host node (filled in from stat)
  unsigned node_minor = 3;
};

// Versions this generator can write: 0.3.0 ... 1.0.0. Below 0.5.0 the device node has no
// hostPath (a node with the host node's numbers is made instead) and below 0.4.0 mounts have
// no type.
bool cdi_version_supported(const std::string& version);

nlohmann::json cdi_spec(const platform::ContainerEdits& edits, const CdiOptions& options);

// Fully qualified device names in a spec ("vrdma.io/hca=vrdma0"). Throws std::runtime_error if
// it is not a CDI spec.
std::vector<std::string> cdi_device_names(const nlohmann::json& spec);

// The highest CDI version podman accepts from `podman --version` output ("podman version
// 4.3.1"), or "" when that is not known; used to warn when the spec would be refused.
std::string podman_max_cdi_version(const std::string& version_output);

// -1, 0, 1 comparing "a.b.c" versions.
int compare_versions(const std::string& a, const std::string& b);

}  // namespace vrdma::ctl
