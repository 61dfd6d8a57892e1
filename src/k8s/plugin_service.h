// The DevicePlugin gRPC service: options, ListAndWatch (the advertised IDs, all healthy or all
// unhealthy as vrdmad is), GetPreferredAllocation, Allocate (the container edits), and
// PreStartContainer, which runs the pre-start step when there is one (tenants from the platform:
// the tenant file updated before the container starts).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "k8s/allocation.h"
#include "k8s/deviceplugin_v1beta1.grpc.pb.h"
#include "platform/container_edits.h"

namespace vrdma::k8s {

class DevicePluginService final : public v1beta1::DevicePlugin::Service {
 public:
  // `pre_start`, when set, runs for each PreStartContainer (and makes the plugin ask for it);
  // false with *error fails the call, and the kubelet starts the container later.
  using PreStart = std::function<bool(std::string* error)>;
  DevicePluginService(platform::ContainerEdits edits, AllocationConfig config,
                      PreStart pre_start = {});
  bool pre_start_required() const { return static_cast<bool>(pre_start_); }

  // Called by the health loop; ListAndWatch streams send the new state when it changes.
  void set_healthy(bool healthy);
  bool healthy() const;
  // Ends every ListAndWatch stream: for good (stop, before the plugin exits) or those open now
  // (end_streams, before a server is replaced).
  void stop();
  void end_streams();

  const std::vector<std::string>& ids() const { return ids_; }

  grpc::Status GetDevicePluginOptions(grpc::ServerContext*, const v1beta1::Empty*,
                                      v1beta1::DevicePluginOptions* out) override;
  grpc::Status ListAndWatch(grpc::ServerContext* ctx, const v1beta1::Empty*,
                            grpc::ServerWriter<v1beta1::ListAndWatchResponse>* writer) override;
  grpc::Status GetPreferredAllocation(grpc::ServerContext*,
                                      const v1beta1::PreferredAllocationRequest* req,
                                      v1beta1::PreferredAllocationResponse* out) override;
  grpc::Status Allocate(grpc::ServerContext*, const v1beta1::AllocateRequest* req,
                        v1beta1::AllocateResponse* out) override;
  grpc::Status PreStartContainer(grpc::ServerContext*, const v1beta1::PreStartContainerRequest*,
                                 v1beta1::PreStartContainerResponse*) override;

 private:
  v1beta1::ListAndWatchResponse list(bool healthy) const;

  const platform::ContainerEdits edits_;
  const AllocationConfig config_;
  const std::vector<std::string> ids_;
  const PreStart pre_start_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool healthy_ = false;
  bool stopping_ = false;
  uint64_t generation_ = 0;  // changes with every health change
  uint64_t epoch_ = 0;       // changes when open streams must end
};

}  // namespace vrdma::k8s
