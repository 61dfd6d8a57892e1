// The device plugin's life: serve DevicePlugin on <plugin dir>/<socket name>, register with the
// kubelet, follow vrdmad's health, and start over when the kubelet restarts (kubelet.sock made
// again) or the plugin's socket disappears (a restarting kubelet deletes every socket there).
// Ends cleanly on SIGTERM or SIGINT.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>

#include "k8s/allocation.h"
#include "k8s/kubelet.h"
#include "k8s/plugin_service.h"
#include "platform/container_edits.h"

namespace grpc {
class Server;
}

namespace vrdma::k8s {

struct PluginOptions {
  AllocationConfig allocation;
  std::string plugin_dir = kDefaultPluginDir;
  std::string socket_name = kDefaultSocketName;
  int health_interval_ms = 1000;
  int register_retry_ms = 3000;
  // Run before each container that holds a device starts (PreStartContainer); none: the
  // kubelet is told not to call it.
  DevicePluginService::PreStart pre_start;
};

class Plugin {
 public:
  Plugin(PluginOptions options, platform::ContainerEdits edits, Kubelet& kubelet,
         HealthProbe& health);
  ~Plugin();

  // Runs until SIGTERM or SIGINT (which the caller has blocked). Returns the exit code.
  int run();

 private:
  std::string socket_path() const;
  std::string kubelet_path() const;
  void start_server();
  void stop_server();
  bool socket_is_ours() const;
  bool try_register();
  // Registration with the kubelet: now, and again (backing off) until it succeeds.
  void register_soon();
  void maybe_register();
  void check_health();

  PluginOptions options_;
  Kubelet& kubelet_;
  HealthProbe& health_;
  DevicePluginService service_;
  std::unique_ptr<grpc::Server> server_;
  dev_t socket_dev_ = 0;
  ino_t socket_ino_ = 0;
  // A socket file exists a moment before its server listens: retry soon, then less often.
  static constexpr int kFirstRetryMs = 100;
  bool want_register_ = false;
  std::chrono::steady_clock::time_point next_register_{};
  int retry_ms_ = kFirstRetryMs;
  bool last_health_known_ = false;
  bool last_health_ = false;
};

}  // namespace vrdma::k8s
