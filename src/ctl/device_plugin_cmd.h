// vrdma device-plugin: runs the Kubernetes device plugin (a program of its own, so that the
// CLI and vrdmad carry no gRPC).
#pragma once

#include <string>
#include <vector>

namespace vrdma::ctl {

// Replaces this process with vrdma-device-plugin and `args`: $VRDMA_DEVICE_PLUGIN, else next to
// this vrdma, in the build tree (../k8s) or installed (../libexec/vrdma). Returns only on
// failure (exit code).
int run_device_plugin(const std::vector<std::string>& args);

}  // namespace vrdma::ctl
