#include "platform/container_edits.h"

#include <cstdlib>

#include "common/protocol.h"
#include "platform/install_paths.h"

namespace vrdma::platform {

namespace {

std::string strip_slashes(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

}  // namespace

EditsConfig default_edits_config() {
  EditsConfig c;
  const char* lib = ::getenv("VRDMA_LIBDIR");
  c.lib_dir = strip_slashes(lib && *lib ? lib : installed_lib_dir());
  const char* sock = ::getenv(proto::kSocketEnv);
  std::string socket = sock && *sock ? sock : proto::kDefaultSocket;
  auto slash = socket.rfind('/');
  if (slash == std::string::npos) {
    c.socket_dir = ".";
    c.socket_name = socket;
  } else {
    c.socket_dir = slash == 0 ? "/" : socket.substr(0, slash);
    c.socket_name = socket.substr(slash + 1);
  }
  return c;
}

std::string uverbs_path(int index) {
  return "/dev/infiniband/uverbs" + std::to_string(index);
}

ContainerEdits container_edits(const EditsConfig& config) {
  const std::string lib_dir = strip_slashes(config.lib_dir);
  const std::string socket_dir = strip_slashes(config.socket_dir);
  const std::string ctr_lib =
      config.container_lib_dir.empty() ? lib_dir : strip_slashes(config.container_lib_dir);
  const std::string ctr_sock =
      config.container_socket_dir.empty() ? socket_dir : strip_slashes(config.container_socket_dir);
  ContainerEdits e;
  // The container sees the socket's directory, not the socket file: a restarted vrdmad makes a
  // new socket there, which a bind of the old file would not show. Read-only is enough to
  // connect (connect(2) needs write access to the socket inode, which a read-only mount does not
  // take away) and keeps the container from replacing the socket.
  e.mounts.push_back({lib_dir, ctr_lib, true, false});
  e.mounts.push_back({socket_dir, ctr_sock, true, true});
  e.devices.push_back({uverbs_path(config.uverbs_index), config.device_host_path, "rw"});
  e.env.push_back({"LD_LIBRARY_PATH", ctr_lib});
  e.env.push_back({proto::kSocketEnv, ctr_sock + "/" + config.socket_name});
  e.device_name = config.device_name;
  e.uverbs_index = config.uverbs_index;
  return e;
}

nlohmann::json to_json(const ContainerEdits& edits) {
  nlohmann::json j;
  j["env"] = nlohmann::json::array();
  for (const auto& v : edits.env) j["env"].push_back({{"name", v.name}, {"value", v.value}});
  j["mounts"] = nlohmann::json::array();
  for (const auto& m : edits.mounts)
    j["mounts"].push_back({{"host_path", m.host_path},
                           {"container_path", m.container_path},
                           {"read_only", m.read_only},
                           {"noexec", m.noexec}});
  j["devices"] = nlohmann::json::array();
  for (const auto& d : edits.devices)
    j["devices"].push_back({{"container_path", d.container_path},
                            {"host_path", d.host_path},
                            {"permissions", d.permissions}});
  j["device_name"] = edits.device_name;
  j["uverbs_index"] = edits.uverbs_index;
  return j;
}

std::vector<std::string> engine_run_args(const ContainerEdits& edits) {
  std::vector<std::string> args;
  for (const auto& m : edits.mounts)
    args.push_back("--volume=" + m.host_path + ":" + m.container_path +
                   (m.read_only ? ":ro" : ":rw"));
  for (const auto& d : edits.devices)
    args.push_back("--device=" + d.host_path + ":" + d.container_path + ":" + d.permissions);
  for (const auto& v : edits.env) args.push_back("--env=" + v.name + "=" + v.value);
  return args;
}

}  // namespace vrdma::platform
