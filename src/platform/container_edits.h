// What a container needs to use vrdma, described once: the drop-in libraries, the directory of
// vrdmad's socket, the device node programs look for, the environment, and the device view
// (sysfs). `vrdma sandbox`, the CDI spec (`vrdma cdi generate`) and the Kubernetes device plugin
// all apply these edits; none of them adds anything of its own.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace vrdma::platform {

// Where things are on the host and where they appear in the container. The defaults are those
// of an installed vrdma (VRDMA_LIBDIR of the build, vrdmad's default socket).
struct EditsConfig {
  std::string lib_dir;     // host directory of the drop-in libraries
  std::string socket_dir;  // host directory holding vrdmad's socket
  std::string socket_name = "vrdmad.sock";
  std::string container_lib_dir;     // empty: same path as on the host
  std::string container_socket_dir;  // empty: same path as on the host
  // The host node behind /dev/infiniband/uverbs<N>. /dev/null: a character device that any
  // program may open, read (EOF) and write (discarded), and that does nothing else.
  std::string device_host_path = "/dev/null";
  std::string device_name = "vrdma0";  // what ibv_get_device_name answers (vrdmad's Hello)
  int uverbs_index = 0;
};

// The defaults: $VRDMA_LIBDIR or the installed library directory, and the directory of
// $VRDMA_SOCKET or /run/vrdma/vrdmad.sock.
EditsConfig default_edits_config();

struct Mount {
  std::string host_path;
  std::string container_path;
  bool read_only = true;
  bool noexec = false;  // where the engine can say so (CDI); the libraries must stay executable
  bool operator==(const Mount&) const = default;
};

struct DeviceNode {
  std::string container_path;  // /dev/infiniband/uverbs0
  std::string host_path;       // /dev/null
  std::string permissions;     // cgroup access, from "rwm"
  bool operator==(const DeviceNode&) const = default;
};

struct EnvVar {
  std::string name;
  std::string value;
  bool operator==(const EnvVar&) const = default;
};

struct ContainerEdits {
  std::vector<EnvVar> env;
  std::vector<Mount> mounts;
  std::vector<DeviceNode> devices;
  // The per-container sysfs view (see device_view.h): it depends on the container's address,
  // so each integration builds it when the container's network namespace exists.
  std::string device_name;
  int uverbs_index = 0;
};

ContainerEdits container_edits(const EditsConfig& config);

// {"env": [{"name","value"}], "mounts": [{"host_path","container_path","read_only"}],
//  "devices": [{"container_path","host_path","permissions"}], "device_name", "uverbs_index",
//  "socket", "lib_dir"}: what `vrdma edits --json` prints; the tests compare the sandbox, the CDI
// spec and the device plugin's answers with it.
nlohmann::json to_json(const ContainerEdits& edits);

// podman/docker run arguments that apply the same edits (-v, --device, -e), one per element.
std::vector<std::string> engine_run_args(const ContainerEdits& edits);

// /dev/infiniband/uverbs<N>
std::string uverbs_path(int index);

}  // namespace vrdma::platform
