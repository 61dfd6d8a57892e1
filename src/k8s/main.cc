// vrdma-device-plugin (run as `vrdma device-plugin`): the Kubernetes device plugin of vrdma.
// A process of its own, so that gRPC and the kubelet's API stay out of vrdmad, which trusts
// nothing it does not need; it talks to vrdmad only as a status client.
#include <signal.h>

#include <CLI/CLI.hpp>
#include <iostream>

#include "k8s/allocation.h"
#include "k8s/kubelet.h"
#include "k8s/plugin.h"
#include "platform/container_edits.h"

namespace {

constexpr int kRegisterTimeoutMs = 10000;
constexpr int kHealthTimeoutMs = 1000;

}  // namespace

int main(int argc, char** argv) {
  using namespace vrdma;
  CLI::App app{
      "vrdma device-plugin: advertise vrdma's device to the kubelet (device plugin API "
      "v1beta1)",
      "vrdma device-plugin"};
  k8s::PluginOptions o;
  platform::EditsConfig edits_config = platform::default_edits_config();
  std::string socket = edits_config.socket_dir + "/" + edits_config.socket_name;
  bool print_allocation = false, print_config = false, engine_args = false;
  app.add_option("--resource-name", o.allocation.resource_name,
                 "Extended resource name (a domain, a slash, a name)")
      ->capture_default_str();
  app.add_option("--devices", o.allocation.devices,
                 "How many device IDs to advertise: containers per node that may hold one")
      ->check(CLI::Range(1, k8s::kMaxDevices))
      ->capture_default_str();
  app.add_option("--plugin-dir", o.plugin_dir,
                 "The kubelet's device-plugin directory (kubelet.sock lives there)")
      ->capture_default_str();
  app.add_option("--endpoint", o.socket_name, "This plugin's socket name in --plugin-dir")
      ->capture_default_str();
  app.add_option("--socket", socket,
                 "vrdmad's socket on the host (health, and the directory containers get)")
      ->capture_default_str();
  app.add_option("--lib-dir", edits_config.lib_dir, "Host directory of the drop-in libraries")
      ->capture_default_str();
  app.add_flag("--cdi-devices", o.allocation.cdi_devices,
               "Answer Allocate with the CDI device vrdma.io/hca=vrdma0 (Kubernetes >= 1.28 with "
               "a CDI runtime and `vrdma cdi generate` on the node) instead of the edits");
  app.add_flag("--cdi-annotations", o.allocation.cdi_annotations,
               "Answer Allocate with the annotation cdi.k8s.io/vrdma=vrdma.io/hca=vrdma0 "
               "(containerd >= 1.7, CRI-O) instead of the edits");
  app.add_option("--health-interval-ms", o.health_interval_ms, "How often to ask vrdmad")
      ->check(CLI::Range(100, 60000))
      ->capture_default_str();
  app.add_flag("--print-allocation", print_allocation,
               "Print the Allocate answer for one container (JSON) and exit");
  app.add_flag("--engine-args", engine_args,
               "With --print-allocation: print it as podman/docker run arguments, one a line");
  app.add_flag("--print-config", print_config,
               "Print the paths and names the plugin uses (JSON) and exit");
  app.footer(
      "Every advertised ID stands for the same shared device; Allocate answers with the\n"
      "container edits (vrdma edits): the drop-in libraries and vrdmad's socket directory\n"
      "mounted read-only, /dev/infiniband/uverbs0 (a bind of /dev/null), LD_LIBRARY_PATH and\n"
      "VRDMA_SOCKET. The devices are Unhealthy while vrdmad does not answer.");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (!k8s::valid_resource_name(o.allocation.resource_name)) {
    std::cerr << "vrdma device-plugin: --resource-name " << o.allocation.resource_name
              << ": use <domain>/<name> with a domain other than kubernetes.io\n";
    return 2;
  }
  if (socket.empty() || socket.front() != '/' || o.plugin_dir.empty() ||
      o.plugin_dir.front() != '/') {
    std::cerr << "vrdma device-plugin: --socket and --plugin-dir must be absolute paths\n";
    return 2;
  }
  if (o.socket_name.empty() || o.socket_name.find('/') != std::string::npos ||
      o.socket_name == k8s::kKubeletSocket) {
    std::cerr << "vrdma device-plugin: --endpoint must be a file name other than kubelet.sock\n";
    return 2;
  }
  while (o.plugin_dir.size() > 1 && o.plugin_dir.back() == '/') o.plugin_dir.pop_back();
  auto slash = socket.rfind('/');
  edits_config.socket_dir = slash == 0 ? "/" : socket.substr(0, slash);
  edits_config.socket_name = socket.substr(slash + 1);
  const platform::ContainerEdits edits = platform::container_edits(edits_config);

  if (print_config) {
    nlohmann::json j = {{"resource_name", o.allocation.resource_name},
                        {"devices", o.allocation.devices},
                        {"plugin_dir", o.plugin_dir},
                        {"endpoint", o.socket_name},
                        {"plugin_socket", o.plugin_dir + "/" + o.socket_name},
                        {"kubelet_socket", o.plugin_dir + "/" + k8s::kKubeletSocket},
                        {"vrdmad_socket", socket},
                        {"edits", platform::to_json(edits)}};
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  if (print_allocation) {
    auto response = k8s::container_response(edits, o.allocation);
    if (engine_args) {
      for (const auto& a : k8s::engine_run_args(response)) std::cout << a << "\n";
    } else {
      std::cout << k8s::to_json(response).dump(2) << "\n";
    }
    return 0;
  }

  // Signals arrive through the plugin's signalfd; block them before any thread starts.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
  try {
    k8s::GrpcKubelet kubelet(o.plugin_dir + "/" + k8s::kKubeletSocket, kRegisterTimeoutMs);
    k8s::DaemonHealth health(socket, kHealthTimeoutMs);
    k8s::Plugin plugin(o, edits, kubelet, health);
    return plugin.run();
  } catch (const std::exception& e) {
    std::cerr << "vrdma device-plugin: " << e.what() << "\n";
    return 1;
  }
}
