// What the device plugin answers, built from the container edits: the device IDs it
// advertises, the preferred allocation, and a container's Allocate response. Pure functions,
// shared by the gRPC service and `--print-allocation`.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "k8s/deviceplugin_v1beta1.pb.h"
#include "platform/container_edits.h"

namespace vrdma::k8s {

inline constexpr const char* kApiVersion = "v1beta1";
inline constexpr const char* kDefaultResource = "vrdma.io/hca";
inline constexpr const char* kDefaultPluginDir = "/var/lib/kubelet/device-plugins";
inline constexpr const char* kKubeletSocket = "kubelet.sock";
inline constexpr const char* kDefaultSocketName = "vrdma.sock";
inline constexpr const char* kCdiName = "vrdma.io/hca=vrdma0";  // `vrdma cdi generate`'s device
inline constexpr const char* kCdiAnnotationKey = "cdi.k8s.io/vrdma";
inline constexpr int kDefaultDevices = 64;
inline constexpr int kMaxDevices = 100000;

struct AllocationConfig {
  std::string resource_name = kDefaultResource;
  int devices = kDefaultDevices;  // shareable IDs: how many containers per node may ask
  // With CDI (the CDI spec installed on the node, `vrdma cdi generate`) the runtime applies
  // the edits and builds the device view; the answer then names the CDI device instead of
  // repeating the edits (which the runtime would apply twice).
  bool cdi_devices = false;      // ContainerAllocateResponse.cdi_devices (Kubernetes >= 1.28)
  bool cdi_annotations = false;  // the cdi.k8s.io/ annotation (containerd >= 1.7, CRI-O)
};

// "vrdma0-0" ... "vrdma0-<n-1>".
std::vector<std::string> device_ids(const std::string& device_name, int count);

// A resource name the kubelet accepts: <domain>/<name>, the domain not kubernetes.io.
bool valid_resource_name(const std::string& name);

// The must-include IDs, then available ones in advertised order, up to `size`.
std::vector<std::string> preferred_allocation(const std::vector<std::string>& advertised,
                                              const std::vector<std::string>& available,
                                              const std::vector<std::string>& must_include,
                                              int size);

v1beta1::ContainerAllocateResponse container_response(const platform::ContainerEdits& edits,
                                                      const AllocationConfig& config);

// {"envs": {...}, "mounts": [{"container_path","host_path","read_only"}], "devices":
// [{"container_path","host_path","permissions"}], "annotations": {...}, "cdi_devices": [...]}
nlohmann::json to_json(const v1beta1::ContainerAllocateResponse& response);

// podman/docker run arguments that do what the response asks of a runtime.
std::vector<std::string> engine_run_args(const v1beta1::ContainerAllocateResponse& response);

}  // namespace vrdma::k8s
