// vrdma-device-plugin (run as `vrdma device-plugin`): the Kubernetes device plugin of vrdma.
// A process of its own, so that gRPC and the kubelet's API stay out of vrdmad, which trusts
// nothing it does not need; it talks to vrdmad only as a status client.
#include <signal.h>
#include <string.h>

#include <CLI/CLI.hpp>
#include <iostream>
#include <thread>

#include "common/log.h"
#include "k8s/allocation.h"
#include "k8s/kubelet.h"
#include "k8s/plugin.h"
#include "k8s/tenant_sync.h"
#include "platform/container_edits.h"

namespace {

constexpr int kRegisterTimeoutMs = 10000;
constexpr int kHealthTimeoutMs = 1000;

// Everything the command line sets.
struct CommandLine {
  vrdma::k8s::PluginOptions o;
  vrdma::platform::EditsConfig edits_config = vrdma::platform::default_edits_config();
  std::string socket = edits_config.socket_dir + "/" + edits_config.socket_name;
  bool print_allocation = false, print_config = false, engine_args = false;
  // Tenants from the platform (tenant_sync.h).
  vrdma::k8s::TenantSyncOptions tenants;
  std::vector<std::string> namespace_tenants;
  bool tenants_only = false, print_tenants = false;
};

void add_options(CLI::App& app, CommandLine& c) {
  using namespace vrdma;
  app.add_option("--resource-name", c.o.allocation.resource_name,
                 "Extended resource name (a domain, a slash, a name)")
      ->capture_default_str();
  app.add_option("--devices", c.o.allocation.devices,
                 "How many device IDs to advertise: containers per node that may hold one")
      ->check(CLI::Range(1, k8s::kMaxDevices))
      ->capture_default_str();
  app.add_option("--plugin-dir", c.o.plugin_dir,
                 "The kubelet's device-plugin directory (kubelet.sock lives there)")
      ->capture_default_str();
  app.add_option("--endpoint", c.o.socket_name, "This plugin's socket name in --plugin-dir")
      ->capture_default_str();
  app.add_option("--socket", c.socket,
                 "vrdmad's socket on the host (health, and the directory containers get)")
      ->capture_default_str();
  app.add_option("--lib-dir", c.edits_config.lib_dir, "Host directory of the drop-in libraries")
      ->capture_default_str();
  app.add_flag("--cdi-devices", c.o.allocation.cdi_devices,
               "Answer Allocate with the CDI device vrdma.io/hca=vrdma0 (Kubernetes >= 1.28 with "
               "a CDI runtime and `vrdma cdi generate` on the node) instead of the edits");
  app.add_flag("--cdi-annotations", c.o.allocation.cdi_annotations,
               "Answer Allocate with the annotation cdi.k8s.io/vrdma=vrdma.io/hca=vrdma0 "
               "(containerd >= 1.7, CRI-O) instead of the edits");
  app.add_option("--health-interval-ms", c.o.health_interval_ms, "How often to ask vrdmad")
      ->check(CLI::Range(100, 60000))
      ->capture_default_str();
  app.add_option("--tenants-from-cri", c.tenants.cri_endpoint,
                 "The container runtime's CRI socket (/run/containerd/containerd.sock, "
                 "/var/run/crio/crio.sock): keep --tenant-file, which vrdmad reads with "
                 "--platform-tenants, equal to its ready pod sandboxes, so that a container's "
                 "tenant is its pod's Kubernetes namespace");
  app.add_option("--tenant-file", c.tenants.file,
                 "Where to write the tenants from the platform (vrdmad --platform-tenants); "
                 "outside every container's mounts")
      ->capture_default_str();
  app.add_option("--namespace-tenant", c.namespace_tenants,
                 "NAMESPACE=TENANT: pods of this Kubernetes namespace are tenant TENANT (several "
                 "namespaces may share one); other namespaces are tenants of their own name "
                 "(repeatable)")
      ->allow_extra_args(false);
  app.add_option("--tenants-interval-ms", c.tenants.interval_ms,
                 "How often to ask the container runtime")
      ->check(CLI::Range(100, 600000))
      ->capture_default_str();
  app.add_flag("--tenants-only", c.tenants_only,
               "With --tenants-from-cri: keep the tenant file only, without serving the kubelet");
  app.add_flag("--print-tenants", c.print_tenants,
               "With --tenants-from-cri: ask the runtime once, write the tenant file, print it "
               "and exit");
  app.add_flag("--print-allocation", c.print_allocation,
               "Print the Allocate answer for one container (JSON) and exit");
  app.add_flag("--engine-args", c.engine_args,
               "With --print-allocation: print it as podman/docker run arguments, one a line");
  app.add_flag("--print-config", c.print_config,
               "Print the paths and names the plugin uses (JSON) and exit");
  app.footer(
      "Every advertised ID stands for the same shared device; Allocate answers with the\n"
      "container edits (vrdma edits): the drop-in libraries and vrdmad's socket directory\n"
      "mounted read-only, /dev/infiniband/uverbs0 (a bind of /dev/null), LD_LIBRARY_PATH and\n"
      "VRDMA_SOCKET. The devices are Unhealthy while vrdmad does not answer.");
}

// Checks what the options say and completes them. 0, or the exit status (2) after a message.
int check_options(CommandLine& c) {
  using namespace vrdma;
  if (!k8s::valid_resource_name(c.o.allocation.resource_name)) {
    std::cerr << "vrdma device-plugin: --resource-name " << c.o.allocation.resource_name
              << ": use <domain>/<name> with a domain other than kubernetes.io\n";
    return 2;
  }
  if (c.socket.empty() || c.socket.front() != '/' || c.o.plugin_dir.empty() ||
      c.o.plugin_dir.front() != '/') {
    std::cerr << "vrdma device-plugin: --socket and --plugin-dir must be absolute paths\n";
    return 2;
  }
  if (c.o.socket_name.empty() || c.o.socket_name.find('/') != std::string::npos ||
      c.o.socket_name == k8s::kKubeletSocket) {
    std::cerr << "vrdma device-plugin: --endpoint must be a file name other than kubelet.sock\n";
    return 2;
  }
  for (const auto& rule : c.namespace_tenants) {
    std::string error;
    if (!c.tenants.tenants.add(rule, &error)) {
      std::cerr << "vrdma device-plugin: --namespace-tenant: " << error << "\n";
      return 2;
    }
  }
  if ((c.tenants_only || c.print_tenants || !c.namespace_tenants.empty()) &&
      c.tenants.cri_endpoint.empty()) {
    std::cerr << "vrdma device-plugin: --tenants-only, --print-tenants and --namespace-tenant "
                 "need --tenants-from-cri\n";
    return 2;
  }
  if (c.tenants.file.empty() || c.tenants.file.front() != '/') {
    std::cerr << "vrdma device-plugin: --tenant-file must be an absolute path\n";
    return 2;
  }
  while (c.o.plugin_dir.size() > 1 && c.o.plugin_dir.back() == '/') c.o.plugin_dir.pop_back();
  auto slash = c.socket.rfind('/');
  c.edits_config.socket_dir = slash == 0 ? "/" : c.socket.substr(0, slash);
  c.edits_config.socket_name = c.socket.substr(slash + 1);
  return 0;
}

// --print-config and --print-allocation.
int print(const CommandLine& c, const vrdma::platform::ContainerEdits& edits) {
  using namespace vrdma;
  if (c.print_config) {
    nlohmann::json j = {{"resource_name", c.o.allocation.resource_name},
                        {"devices", c.o.allocation.devices},
                        {"plugin_dir", c.o.plugin_dir},
                        {"endpoint", c.o.socket_name},
                        {"plugin_socket", c.o.plugin_dir + "/" + c.o.socket_name},
                        {"kubelet_socket", c.o.plugin_dir + "/" + k8s::kKubeletSocket},
                        {"vrdmad_socket", c.socket},
                        {"edits", platform::to_json(edits)}};
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  auto response = k8s::container_response(edits, c.o.allocation);
  if (c.engine_args) {
    for (const auto& a : k8s::engine_run_args(response)) std::cout << a << "\n";
  } else {
    std::cout << k8s::to_json(response).dump(2) << "\n";
  }
  return 0;
}

// --print-tenants: one round, printed.
int print_tenants(const CommandLine& c) {
  vrdma::k8s::TenantSync sync(c.tenants);
  std::string error;
  if (!sync.sync(&error)) {
    std::cerr << "vrdma device-plugin: " << error << "\n";
    return 1;
  }
  std::cout << sync.text();
  return 0;
}

// The tenant file kept up to date in a thread of its own while `body` runs (given the
// TenantSync, or nullptr without --tenants-from-cri).
template <typename Body>
int with_tenant_sync(const CommandLine& c, Body body) {
  if (c.tenants.cri_endpoint.empty()) return body(nullptr);
  vrdma::k8s::TenantSync sync(c.tenants);
  std::thread thread([&sync] { sync.run(); });
  int rc = 1;
  try {
    rc = body(&sync);
  } catch (...) {
    sync.stop();
    thread.join();
    throw;
  }
  sync.stop();
  thread.join();
  return rc;
}

// Serves the kubelet (or, with --tenants-only, keeps the tenant file) until SIGTERM or SIGINT.
int serve(const CommandLine& c, const vrdma::platform::ContainerEdits& edits) {
  using namespace vrdma;
  // Signals arrive through the plugin's signalfd (or sigwait); block them before any thread
  // starts.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
  try {
    if (c.tenants_only) {
      return with_tenant_sync(c, [&set](k8s::TenantSync*) {
        int sig = 0;
        sigwait(&set, &sig);
        LOG_INFO("stopping on %s", strsignal(sig));
        return 0;
      });
    }
    k8s::GrpcKubelet kubelet(c.o.plugin_dir + "/" + k8s::kKubeletSocket, kRegisterTimeoutMs);
    k8s::DaemonHealth health(c.socket, kHealthTimeoutMs);
    return with_tenant_sync(c, [&](k8s::TenantSync* sync) {
      k8s::PluginOptions o = c.o;
      // The pod's sandbox exists before its containers: a round before each one starts puts
      // it in the file before any of its programs can reach vrdmad.
      if (sync) o.pre_start = [sync](std::string* error) { return sync->sync(error); };
      k8s::Plugin plugin(o, edits, kubelet, health);
      return plugin.run();
    });
  } catch (const std::exception& e) {
    std::cerr << "vrdma device-plugin: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "vrdma device-plugin: advertise vrdma's device to the kubelet (device plugin API "
      "v1beta1)",
      "vrdma device-plugin"};
  vrdma::set_log_program("vrdma-device-plugin");
  CommandLine c;
  add_options(app, c);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (int rc = check_options(c)) return rc;
  const vrdma::platform::ContainerEdits edits = vrdma::platform::container_edits(c.edits_config);
  if (c.print_config || c.print_allocation) return print(c, edits);
  if (c.print_tenants) return print_tenants(c);
  return serve(c, edits);
}
