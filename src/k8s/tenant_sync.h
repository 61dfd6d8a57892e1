// Keeps vrdmad's platform tenants file (--platform-tenants) equal to what the container runtime
// says of this node's pod sandboxes: asks it every interval and rewrites the file when its text
// changes. Runs in the device plugin's process (`vrdma device-plugin --tenants-from-cri`), beside
// or instead of (--tenants-only) the plugin itself, so that gRPC stays out of vrdmad.
#pragma once

#include <condition_variable>
#include <mutex>
#include <string>

#include "k8s/cri_client.h"
#include "k8s/pod_tenants.h"

namespace vrdma::k8s {

struct TenantSyncOptions {
  std::string cri_endpoint;
  std::string file = "/run/vrdma-platform/tenants";
  int interval_ms = 1000;
  int timeout_ms = 2000;
  NamespaceTenants tenants;
};

class TenantSync {
 public:
  explicit TenantSync(TenantSyncOptions options);

  // One round: the runtime's sandboxes, and the file when its text changed. False with *error.
  // Rounds run one at a time (the loop's, and the device plugin's PreStartContainer's).
  bool sync(std::string* error);
  // The file's text as of the last round; "" before one succeeded.
  std::string text() const;

  // Rounds every interval until stop() (from another thread).
  void run();
  void stop();

 private:
  TenantSyncOptions options_;
  CriRuntime runtime_;
  std::mutex sync_mu_;  // one round at a time: a slower, older round never writes last
  mutable std::mutex mu_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::string written_;
  std::string last_error_;
};

}  // namespace vrdma::k8s
