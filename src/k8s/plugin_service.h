// The DevicePlugin gRPC service: options, ListAndWatch (the advertised IDs, all healthy or all
// unhealthy as vrdmad is), GetPreferredAllocation, Allocate (the container edits), and a
// PreStartContainer that has nothing to do.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "k8s/allocation.h"
#include "k8s/deviceplugin_v1beta1.grpc.pb.h"
#include "platform/container_edits.h"

namespace vrdma::k8s {

class DevicePluginService final : public v1beta1::DevicePlugin::Service {
 public:
  DevicePluginService(platform::ContainerEdits edits, AllocationConfig config);

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
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool healthy_ = false;
  bool stopping_ = false;
  uint64_t generation_ = 0;  // changes with every health change
  uint64_t epoch_ = 0;       // changes when open streams must end
};

}  // namespace vrdma::k8s
