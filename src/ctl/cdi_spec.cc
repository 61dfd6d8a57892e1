#include "ctl/cdi_spec.h"

#include <regex>
#include <sstream>
#include <stdexcept>

namespace vrdma::ctl {

namespace {

constexpr const char* kVersions[] = {"0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0", "1.0.0"};

std::vector<int> parts(const std::string& v) {
  std::vector<int> out;
  std::stringstream ss(v);
  std::string p;
  while (std::getline(ss, p, '.')) out.push_back(p.empty() ? 0 : std::stoi(p));
  while (out.size() < 3) out.push_back(0);
  return out;
}

}  // namespace

int compare_versions(const std::string& a, const std::string& b) {
  auto pa = parts(a), pb = parts(b);
  return pa < pb ? -1 : pa > pb ? 1 : 0;
}

bool cdi_version_supported(const std::string& version) {
  for (const char* v : kVersions)
    if (version == v) return true;
  return false;
}

nlohmann::json cdi_spec(const platform::ContainerEdits& edits, const CdiOptions& o) {
  if (!cdi_version_supported(o.version))
    throw std::runtime_error("unsupported CDI version " + o.version);
  const bool has_host_path = compare_versions(o.version, "0.5.0") >= 0;
  const bool has_mount_type = compare_versions(o.version, "0.4.0") >= 0;
  nlohmann::json ce;
  ce["env"] = nlohmann::json::array();
  for (const auto& v : edits.env) ce["env"].push_back(v.name + "=" + v.value);
  ce["deviceNodes"] = nlohmann::json::array();
  for (const auto& d : edits.devices) {
    nlohmann::json n = {{"path", d.container_path},
                        {"type", "c"},
                        {"major", o.node_major},
                        {"minor", o.node_minor},
                        {"permissions", d.permissions}};
    if (has_host_path) n["hostPath"] = d.host_path;
    ce["deviceNodes"].push_back(n);
  }
  ce["mounts"] = nlohmann::json::array();
  for (const auto& m : edits.mounts) {
    nlohmann::json opts = {m.read_only ? "ro" : "rw", "nosuid", "nodev"};
    if (m.noexec) opts.push_back("noexec");
    opts.push_back("bind");
    nlohmann::json j = {
        {"hostPath", m.host_path}, {"containerPath", m.container_path}, {"options", opts}};
    if (has_mount_type) j["type"] = "bind";
    ce["mounts"].push_back(j);
  }
  if (!o.hook_path.empty()) {
    nlohmann::json args = {"vrdma", "cdi", "hook"};
    if (!o.socket.empty()) args.insert(args.end(), {"--socket", o.socket});
    ce["hooks"] = nlohmann::json::array(
        {{{"hookName", "createContainer"}, {"path", o.hook_path}, {"args", args}}});
  }
  nlohmann::json spec;
  spec["cdiVersion"] = o.version;
  spec["kind"] = kCdiKind;
  spec["devices"] = nlohmann::json::array({{{"name", edits.device_name}, {"containerEdits", ce}}});
  return spec;
}

std::vector<std::string> cdi_device_names(const nlohmann::json& spec) {
  if (!spec.is_object() || !spec.contains("kind") || !spec["kind"].is_string() ||
      !spec.contains("devices") || !spec["devices"].is_array())
    throw std::runtime_error("not a CDI spec (no kind or devices)");
  std::vector<std::string> names;
  for (const auto& d : spec["devices"]) {
    if (!d.is_object() || !d.contains("name") || !d["name"].is_string())
      throw std::runtime_error("not a CDI spec (a device without a name)");
    names.push_back(spec["kind"].get<std::string>() + "=" + d["name"].get<std::string>());
  }
  return names;
}

std::string podman_max_cdi_version(const std::string& out) {
  static const std::regex re(R"(version\s+(\d+)\.(\d+)\.(\d+))");
  std::smatch m;
  if (!std::regex_search(out, m, re)) return "";
  std::string v = m[1].str() + "." + m[2].str() + "." + m[3].str();
  // podman 4.x vendors CDI 0.5.x (spec versions up to 0.5.0); 5.x vendors 0.6 and later.
  if (compare_versions(v, "5.0.0") < 0) return "0.5.0";
  return "";
}

}  // namespace vrdma::ctl
