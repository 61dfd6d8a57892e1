#include "k8s/kubelet.h"

#include <grpcpp/grpcpp.h>

#include <chrono>

#include "k8s/deviceplugin_v1beta1.grpc.pb.h"
#include "platform/daemon_probe.h"

namespace vrdma::k8s {

GrpcKubelet::GrpcKubelet(std::string socket_path, int timeout_ms)
    : socket_path_(std::move(socket_path)), timeout_ms_(timeout_ms) {}

std::string GrpcKubelet::register_plugin(const v1beta1::RegisterRequest& request) {
  auto channel = grpc::CreateChannel("unix://" + socket_path_, grpc::InsecureChannelCredentials());
  auto stub = v1beta1::Registration::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(timeout_ms_));
  v1beta1::Empty reply;
  grpc::Status status = stub->Register(&ctx, request, &reply);
  if (status.ok()) return "";
  return "Register at " + socket_path_ + " failed: " + status.error_message() + " (code " +
         std::to_string(static_cast<int>(status.error_code())) + ")";
}

DaemonHealth::DaemonHealth(std::string socket, int timeout_ms)
    : socket_(std::move(socket)), timeout_ms_(timeout_ms) {}

bool DaemonHealth::healthy(std::string* why) {
  auto probe = platform::probe_daemon(socket_, timeout_ms_);
  if (probe.hello) return true;
  if (why) *why = probe.error;
  return false;
}

}  // namespace vrdma::k8s
