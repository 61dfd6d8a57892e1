#include "k8s/cri_client.h"

#include <grpcpp/grpcpp.h>

#include <chrono>

#include "k8s/cri_runtime_v1.grpc.pb.h"

namespace vrdma::k8s {

namespace {

void set_deadline(grpc::ClientContext* ctx, int timeout_ms) {
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(timeout_ms));
}

std::string failure(const char* call, const std::string& target, const grpc::Status& s) {
  return std::string(call) + " at " + target + " failed: " + s.error_message() + " (code " +
         std::to_string(static_cast<int>(s.error_code())) + ")";
}

}  // namespace

CriRuntime::CriRuntime(const std::string& endpoint, int timeout_ms)
    : target_(endpoint.rfind("unix://", 0) == 0 ? endpoint : "unix://" + endpoint),
      timeout_ms_(timeout_ms),
      channel_(grpc::CreateChannel(target_, grpc::InsecureChannelCredentials())) {}

CriRuntime::~CriRuntime() = default;

bool CriRuntime::ready_sandboxes(std::vector<PodSandboxView>* out, std::string* error) {
  out->clear();
  auto stub = runtime::v1::RuntimeService::NewStub(channel_);
  runtime::v1::ListPodSandboxRequest list_req;
  list_req.mutable_filter()->mutable_state()->set_state(runtime::v1::SANDBOX_READY);
  runtime::v1::ListPodSandboxResponse list;
  {
    grpc::ClientContext ctx;
    set_deadline(&ctx, timeout_ms_);
    grpc::Status s = stub->ListPodSandbox(&ctx, list_req, &list);
    if (!s.ok()) {
      *error = failure("ListPodSandbox", target_, s);
      return false;
    }
  }
  for (const auto& item : list.items()) {
    if (item.state() != runtime::v1::SANDBOX_READY) continue;
    runtime::v1::PodSandboxStatusRequest req;
    req.set_pod_sandbox_id(item.id());
    req.set_verbose(true);
    runtime::v1::PodSandboxStatusResponse status;
    grpc::ClientContext ctx;
    set_deadline(&ctx, timeout_ms_);
    grpc::Status s = stub->PodSandboxStatus(&ctx, req, &status);
    if (s.error_code() == grpc::StatusCode::NOT_FOUND) continue;  // gone meanwhile
    if (!s.ok()) {
      *error = failure("PodSandboxStatus", target_, s);
      return false;
    }
    // The status's own metadata: the runtime's record of the sandbox it reports on.
    if (status.status().id() != item.id() || status.status().state() != runtime::v1::SANDBOX_READY)
      continue;
    PodSandboxView v;
    v.id = item.id();
    v.pod_namespace = status.status().metadata().namespace_();
    v.pod_name = status.status().metadata().name();
    v.netns_path = netns_path_from_info({status.info().begin(), status.info().end()});
    out->push_back(std::move(v));
  }
  return true;
}

}  // namespace vrdma::k8s
