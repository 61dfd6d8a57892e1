#include "k8s/pod_tenants.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "common/unique_fd.h"

namespace vrdma::k8s {

namespace {

// What vrdmad takes as a tenant name (letters, digits and - _ . :); Kubernetes namespaces are
// DNS labels, always valid.
bool valid_name(std::string_view name) {
  if (name.empty()) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_' || c == '.' || c == ':';
  });
}

bool mkdirs(const std::string& dir, std::string* error) {
  std::string partial;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = dir.find('/', pos + 1);
    partial = dir.substr(0, pos);
    if (partial.empty()) continue;
    if (::mkdir(partial.c_str(), 0755) < 0 && errno != EEXIST) {
      *error = "mkdir " + partial + ": " + strerror(errno);
      return false;
    }
  }
  return true;
}

}  // namespace

bool NamespaceTenants::add(std::string_view rule, std::string* error) {
  size_t eq = rule.find('=');
  std::string_view ns = rule.substr(0, eq);
  std::string_view tenant = eq == std::string_view::npos ? "" : rule.substr(eq + 1);
  if (!valid_name(ns) || !valid_name(tenant)) {
    *error =
        "expected NAMESPACE=TENANT (letters, digits and - _ . :), not '" + std::string(rule) + "'";
    return false;
  }
  map_[std::string(ns)] = std::string(tenant);
  return true;
}

std::string NamespaceTenants::tenant_of(const std::string& pod_namespace) const {
  auto it = map_.find(pod_namespace);
  return it == map_.end() ? pod_namespace : it->second;
}

std::string netns_path_from_info(const std::map<std::string, std::string>& info) {
  auto it = info.find("info");
  if (it == info.end()) return {};
  auto j = nlohmann::json::parse(it->second, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return {};
  const auto spec = j.find("runtimeSpec");
  if (spec == j.end() || !spec->is_object()) return {};
  const auto linux_ = spec->find("linux");
  if (linux_ == spec->end() || !linux_->is_object()) return {};
  const auto nss = linux_->find("namespaces");
  if (nss == linux_->end() || !nss->is_array()) return {};
  for (const auto& ns : *nss) {
    if (!ns.is_object() || ns.value("type", "") != "network") continue;
    const auto path = ns.find("path");
    if (path != ns.end() && path->is_string()) return path->get<std::string>();
  }
  return {};
}

std::string tenant_file_text(const std::vector<PodSandboxView>& sandboxes,
                             const NamespaceTenants& tenants, const std::string& source) {
  std::vector<const PodSandboxView*> with_netns;
  for (const auto& s : sandboxes)
    if (!s.netns_path.empty() && s.netns_path.front() == '/' && valid_name(s.pod_namespace) &&
        s.netns_path.find_first_of(" \t\n#") == std::string::npos)
      with_netns.push_back(&s);
  std::sort(with_netns.begin(), with_netns.end(),
            [](const auto* a, const auto* b) { return a->netns_path < b->netns_path; });
  std::string text = "# vrdma tenants from the platform (" + source +
                     "): TENANT NETNS_PATH  # NAMESPACE/POD SANDBOX\n";
  for (const auto* s : with_netns) {
    text += tenants.tenant_of(s->pod_namespace) + " " + s->netns_path + "  # " + s->pod_namespace +
            "/" + s->pod_name + " " + s->id + "\n";
  }
  return text;
}

bool replace_file(const std::string& path, const std::string& text, std::string* error) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos || slash == 0) {
    *error = "not an absolute path below a directory: " + path;
    return false;
  }
  if (!mkdirs(path.substr(0, slash), error)) return false;
  std::string tmp = path + ".XXXXXX";
  UniqueFd fd(::mkostemp(tmp.data(), O_CLOEXEC));
  if (!fd) {
    *error = "mkstemp " + tmp + ": " + strerror(errno);
    return false;
  }
  auto fail = [&](const char* what) {
    *error = std::string(what) + " " + tmp + ": " + strerror(errno);
    ::unlink(tmp.c_str());
    return false;
  };
  if (::fchmod(fd.get(), 0644) < 0) return fail("chmod");
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd.get(), text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail("write");
    done += static_cast<size_t>(n);
  }
  if (::rename(tmp.c_str(), path.c_str()) < 0) return fail("rename (to the file itself)");
  return true;
}

}  // namespace vrdma::k8s
