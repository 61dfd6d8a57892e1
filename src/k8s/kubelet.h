// The plugin's outside world, behind interfaces so that the plugin runs against fakes in
// tests: the kubelet's Registration service, and vrdmad's health.
#pragma once

#include <string>

#include "k8s/deviceplugin_v1beta1.pb.h"

namespace vrdma::k8s {

class Kubelet {
 public:
  virtual ~Kubelet() = default;
  // Registration.Register; "" on success, else why not.
  virtual std::string register_plugin(const v1beta1::RegisterRequest& request) = 0;
};

class HealthProbe {
 public:
  virtual ~HealthProbe() = default;
  // True while vrdmad answers; `why` says why not.
  virtual bool healthy(std::string* why) = 0;
};

// Registration over the kubelet's Unix socket (gRPC, deadline `timeout_ms`).
class GrpcKubelet final : public Kubelet {
 public:
  GrpcKubelet(std::string socket_path, int timeout_ms);
  std::string register_plugin(const v1beta1::RegisterRequest& request) override;

 private:
  std::string socket_path_;
  int timeout_ms_;
};

// vrdmad answers a status-only Hello within `timeout_ms`; the plugin never becomes a verbs
// client and leaves nothing behind in vrdmad.
class DaemonHealth final : public HealthProbe {
 public:
  DaemonHealth(std::string socket, int timeout_ms);
  bool healthy(std::string* why) override;

 private:
  std::string socket_;
  int timeout_ms_;
};

}  // namespace vrdma::k8s
