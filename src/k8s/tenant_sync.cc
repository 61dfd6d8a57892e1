#include "k8s/tenant_sync.h"

#include <chrono>

#include "common/log.h"

namespace vrdma::k8s {

TenantSync::TenantSync(TenantSyncOptions options)
    : options_(std::move(options)), runtime_(options_.cri_endpoint, options_.timeout_ms) {}

bool TenantSync::sync(std::string* error) {
  std::lock_guard round(sync_mu_);
  std::vector<PodSandboxView> sandboxes;
  if (!runtime_.ready_sandboxes(&sandboxes, error)) return false;
  std::string text = tenant_file_text(sandboxes, options_.tenants, runtime_.target());
  {
    std::lock_guard lock(mu_);
    if (text == written_) return true;
  }
  if (!replace_file(options_.file, text, error)) return false;
  size_t lines = 0;
  for (const auto& s : sandboxes) lines += s.netns_path.empty() ? 0 : 1;
  LOG_INFO("tenants from %s: %zu pod sandboxes with a network namespace, written to %s",
           runtime_.target().c_str(), lines, options_.file.c_str());
  std::lock_guard lock(mu_);
  written_ = std::move(text);
  return true;
}

std::string TenantSync::text() const {
  std::lock_guard lock(mu_);
  return written_;
}

void TenantSync::run() {
  std::unique_lock lock(mu_);
  while (!stopping_) {
    lock.unlock();
    std::string error;
    bool ok = sync(&error);
    lock.lock();
    if (!ok && error != last_error_)
      LOG_WARN("tenants from the platform: %s (the file keeps its last contents)", error.c_str());
    if (ok && !last_error_.empty())
      LOG_INFO("tenants from the platform: the runtime answers again");
    last_error_ = ok ? std::string() : error;
    wake_.wait_for(lock, std::chrono::milliseconds(options_.interval_ms),
                   [this] { return stopping_; });
  }
}

void TenantSync::stop() {
  std::lock_guard lock(mu_);
  stopping_ = true;
  wake_.notify_all();
}

}  // namespace vrdma::k8s
