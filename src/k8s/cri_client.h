// A client of the container runtime's CRI RuntimeService (runtime.v1, on the runtime's Unix
// socket: /run/containerd/containerd.sock, /var/run/crio/crio.sock): the ready pod sandboxes
// with their pods' namespaces and network namespaces. See cri_runtime_v1.proto.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "k8s/pod_tenants.h"

namespace grpc {
class Channel;
}

namespace vrdma::k8s {

class CriRuntime {
 public:
  // `endpoint`: a socket path or unix://PATH.
  CriRuntime(const std::string& endpoint, int timeout_ms);
  ~CriRuntime();

  // The ready sandboxes (ListPodSandbox, then PodSandboxStatus verbose for each). False with
  // *error when the runtime does not answer; a sandbox that went away in between is left out.
  bool ready_sandboxes(std::vector<PodSandboxView>* out, std::string* error);

  const std::string& target() const { return target_; }

 private:
  std::string target_;
  int timeout_ms_;
  std::shared_ptr<grpc::Channel> channel_;
};

}  // namespace vrdma::k8s
