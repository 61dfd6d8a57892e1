// Tenants from the platform, the Kubernetes side: each pod sandbox the container runtime runs on
// this node (its network namespace, its pod's Kubernetes namespace) becomes one line of the
// file vrdmad reads with --platform-tenants (src/daemon/identity/platform_tenants.h), so that a
// container's tenant is its pod's namespace, or what --namespace-tenant maps it to.
//
// Why the runtime: it made the sandbox and its network namespace from the kubelet's request,
// so the pairing (network namespace, pod namespace) is the platform's own record; nothing the
// pod controls (its environment, its annotations, its files) takes part. The kubelet's
// pod-resources API would need joining to the allocation and still not name the namespace of a
// network namespace.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace vrdma::k8s {

// What the runtime says of one pod sandbox.
struct PodSandboxView {
  std::string id;
  std::string pod_namespace;
  std::string pod_name;
  std::string netns_path;  // "" when the runtime names none (host network, or not ready)
};

// Kubernetes namespace -> tenant; a namespace it does not hold is a tenant of its own name.
class NamespaceTenants {
 public:
  // "NAMESPACE=TENANT". False with *error when either side is not a valid name.
  bool add(std::string_view rule, std::string* error);
  std::string tenant_of(const std::string& pod_namespace) const;

 private:
  std::map<std::string, std::string> map_;
};

// The network namespace's path in a PodSandboxStatus's verbose info: the JSON under "info",
// runtimeSpec.linux.namespaces[type == "network"].path (containerd and CRI-O both answer so).
// "" when there is none.
std::string netns_path_from_info(const std::map<std::string, std::string>& info);

// The file's text: a header, then "TENANT NETNS_PATH  # NAMESPACE/NAME SANDBOX" per sandbox
// with a network namespace, sorted by path.
std::string tenant_file_text(const std::vector<PodSandboxView>& sandboxes,
                             const NamespaceTenants& tenants, const std::string& source);

// Replaces `path` by a file holding `text` (mode 0644, written aside and renamed, so a reader
// never sees half of it), making its directory (0755) when missing. False with *error.
bool replace_file(const std::string& path, const std::string& text, std::string* error);

}  // namespace vrdma::k8s
