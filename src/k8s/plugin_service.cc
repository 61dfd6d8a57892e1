#include "k8s/plugin_service.h"

#include <chrono>
#include <set>

namespace vrdma::k8s {

namespace {

constexpr const char* kHealthy = "Healthy";
constexpr const char* kUnhealthy = "Unhealthy";
constexpr auto kStreamPoll = std::chrono::milliseconds(500);  // notices a gone kubelet

}  // namespace

DevicePluginService::DevicePluginService(platform::ContainerEdits edits, AllocationConfig config,
                                         PreStart pre_start)
    : edits_(std::move(edits)),
      config_(std::move(config)),
      ids_(device_ids(edits_.device_name, config_.devices)),
      pre_start_(std::move(pre_start)) {}

void DevicePluginService::set_healthy(bool healthy) {
  std::lock_guard lock(mu_);
  if (healthy == healthy_ && generation_ != 0) return;
  healthy_ = healthy;
  ++generation_;
  cv_.notify_all();
}

bool DevicePluginService::healthy() const {
  std::lock_guard lock(mu_);
  return healthy_;
}

void DevicePluginService::end_streams() {
  std::lock_guard lock(mu_);
  ++epoch_;
  cv_.notify_all();
}

void DevicePluginService::stop() {
  std::lock_guard lock(mu_);
  stopping_ = true;
  cv_.notify_all();
}

v1beta1::ListAndWatchResponse DevicePluginService::list(bool healthy) const {
  v1beta1::ListAndWatchResponse r;
  for (const auto& id : ids_) {
    auto* d = r.add_devices();
    d->set_id(id);
    d->set_health(healthy ? kHealthy : kUnhealthy);
  }
  return r;
}

grpc::Status DevicePluginService::GetDevicePluginOptions(grpc::ServerContext*,
                                                         const v1beta1::Empty*,
                                                         v1beta1::DevicePluginOptions* out) {
  out->set_pre_start_required(pre_start_required());
  out->set_get_preferred_allocation_available(true);
  return grpc::Status::OK;
}

grpc::Status DevicePluginService::ListAndWatch(
    grpc::ServerContext* ctx, const v1beta1::Empty*,
    grpc::ServerWriter<v1beta1::ListAndWatchResponse>* writer) {
  uint64_t sent = UINT64_MAX;
  std::unique_lock lock(mu_);
  const uint64_t epoch = epoch_;
  while (!stopping_ && epoch == epoch_ && !ctx->IsCancelled()) {
    if (generation_ != sent) {
      sent = generation_;
      auto response = list(healthy_);
      lock.unlock();
      if (!writer->Write(response)) return grpc::Status::OK;  // the kubelet went away
      lock.lock();
      continue;
    }
    cv_.wait_for(lock, kStreamPoll);
  }
  return grpc::Status::OK;
}

grpc::Status DevicePluginService::GetPreferredAllocation(
    grpc::ServerContext*, const v1beta1::PreferredAllocationRequest* req,
    v1beta1::PreferredAllocationResponse* out) {
  for (const auto& c : req->container_requests()) {
    std::vector<std::string> available(c.available_deviceids().begin(),
                                       c.available_deviceids().end());
    std::vector<std::string> must(c.must_include_deviceids().begin(),
                                  c.must_include_deviceids().end());
    auto* r = out->add_container_responses();
    for (auto& id : preferred_allocation(ids_, available, must, c.allocation_size()))
      r->add_deviceids(id);
  }
  return grpc::Status::OK;
}

grpc::Status DevicePluginService::Allocate(grpc::ServerContext*,
                                           const v1beta1::AllocateRequest* req,
                                           v1beta1::AllocateResponse* out) {
  const std::set<std::string> known(ids_.begin(), ids_.end());
  for (const auto& c : req->container_requests()) {
    if (c.devices_ids().empty())
      return {grpc::StatusCode::INVALID_ARGUMENT, "a container request without device IDs"};
    for (const auto& id : c.devices_ids())
      if (!known.count(id)) return {grpc::StatusCode::INVALID_ARGUMENT, "unknown device ID " + id};
    // Every ID of this resource stands for the same shared device: one set of edits.
    *out->add_container_responses() = container_response(edits_, config_);
  }
  return grpc::Status::OK;
}

grpc::Status DevicePluginService::PreStartContainer(grpc::ServerContext*,
                                                    const v1beta1::PreStartContainerRequest*,
                                                    v1beta1::PreStartContainerResponse*) {
  if (!pre_start_) return grpc::Status::OK;  // nothing to prepare
  std::string error;
  if (!pre_start_(&error)) return {grpc::StatusCode::UNAVAILABLE, error};
  return grpc::Status::OK;
}

}  // namespace vrdma::k8s
