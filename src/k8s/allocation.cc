#include "k8s/allocation.h"

#include <algorithm>
#include <regex>
#include <set>

namespace vrdma::k8s {

std::vector<std::string> device_ids(const std::string& device_name, int count) {
  std::vector<std::string> ids;
  for (int i = 0; i < count; ++i) ids.push_back(device_name + "-" + std::to_string(i));
  return ids;
}

bool valid_resource_name(const std::string& name) {
  // A DNS subdomain, a slash, a name of letters, digits, '-', '_' and '.'.
  static const std::regex re(
      R"(([a-z0-9]([-a-z0-9]*[a-z0-9])?)(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)");
  if (name.size() > 253 + 1 + 63 || !std::regex_match(name, re)) return false;
  const std::string domain = name.substr(0, name.find('/'));
  return domain != "kubernetes.io" && domain != "k8s.io" &&
         !(domain.size() > 14 && domain.ends_with(".kubernetes.io"));
}

std::vector<std::string> preferred_allocation(const std::vector<std::string>& advertised,
                                              const std::vector<std::string>& available,
                                              const std::vector<std::string>& must_include,
                                              int size) {
  std::vector<std::string> out;
  std::set<std::string> taken;
  for (const auto& id : must_include) {
    if (static_cast<int>(out.size()) >= size) break;
    if (taken.insert(id).second) out.push_back(id);
  }
  const std::set<std::string> avail(available.begin(), available.end());
  for (const auto& id : advertised) {
    if (static_cast<int>(out.size()) >= size) break;
    if (avail.count(id) && taken.insert(id).second) out.push_back(id);
  }
  return out;
}

v1beta1::ContainerAllocateResponse container_response(const platform::ContainerEdits& edits,
                                                      const AllocationConfig& config) {
  v1beta1::ContainerAllocateResponse r;
  if (config.cdi_devices) r.add_cdi_devices()->set_name(kCdiName);
  if (config.cdi_annotations) (*r.mutable_annotations())[kCdiAnnotationKey] = kCdiName;
  if (config.cdi_devices || config.cdi_annotations) return r;
  for (const auto& v : edits.env) (*r.mutable_envs())[v.name] = v.value;
  for (const auto& m : edits.mounts) {
    auto* mount = r.add_mounts();
    mount->set_container_path(m.container_path);
    mount->set_host_path(m.host_path);
    mount->set_read_only(m.read_only);
  }
  for (const auto& d : edits.devices) {
    auto* dev = r.add_devices();
    dev->set_container_path(d.container_path);
    dev->set_host_path(d.host_path);
    dev->set_permissions(d.permissions);
  }
  return r;
}

nlohmann::json to_json(const v1beta1::ContainerAllocateResponse& r) {
  nlohmann::json j;
  j["envs"] = nlohmann::json::object();
  for (const auto& [k, v] : r.envs()) j["envs"][k] = v;
  j["mounts"] = nlohmann::json::array();
  for (const auto& m : r.mounts())
    j["mounts"].push_back({{"container_path", m.container_path()},
                           {"host_path", m.host_path()},
                           {"read_only", m.read_only()}});
  j["devices"] = nlohmann::json::array();
  for (const auto& d : r.devices())
    j["devices"].push_back({{"container_path", d.container_path()},
                            {"host_path", d.host_path()},
                            {"permissions", d.permissions()}});
  j["annotations"] = nlohmann::json::object();
  for (const auto& [k, v] : r.annotations()) j["annotations"][k] = v;
  j["cdi_devices"] = nlohmann::json::array();
  for (const auto& c : r.cdi_devices()) j["cdi_devices"].push_back(c.name());
  return j;
}

std::vector<std::string> engine_run_args(const v1beta1::ContainerAllocateResponse& r) {
  std::vector<std::string> args;
  for (const auto& m : r.mounts())
    args.push_back("--volume=" + m.host_path() + ":" + m.container_path() +
                   (m.read_only() ? ":ro" : ":rw"));
  for (const auto& d : r.devices())
    args.push_back("--device=" + d.host_path() + ":" + d.container_path() + ":" + d.permissions());
  std::vector<std::string> env;
  for (const auto& [k, v] : r.envs()) env.push_back("--env=" + k + "=" + v);
  std::sort(env.begin(), env.end());  // map order is unspecified
  args.insert(args.end(), env.begin(), env.end());
  for (const auto& c : r.cdi_devices()) args.push_back("--device=" + c.name());
  for (const auto& [k, v] : r.annotations()) args.push_back("--annotation=" + k + "=" + v);
  return args;
}

}  // namespace vrdma::k8s
