#include "ctl/cdi_cmd.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "ctl/cdi_spec.h"
#include "ctl/error.h"
#include "ctl/files.h"
#include "ctl/proc.h"
#include "platform/container_edits.h"
#include "platform/daemon_probe.h"
#include "platform/device_view.h"
#include "platform/mount_view.h"

namespace vrdma::ctl {

namespace {

constexpr int kHookHelloTimeoutMs = 5000;
constexpr size_t kMaxStateBytes = 1 << 20;

platform::EditsConfig edits_config(const EditsOptions& o) {
  platform::EditsConfig c = platform::default_edits_config();
  if (!o.lib_dir.empty()) c.lib_dir = o.lib_dir;
  if (!o.socket.empty()) {
    if (o.socket.front() != '/') throw UsageError("--socket must be an absolute path");
    auto slash = o.socket.rfind('/');
    c.socket_dir = slash == 0 ? "/" : o.socket.substr(0, slash);
    c.socket_name = o.socket.substr(slash + 1);
  }
  return c;
}

std::string socket_of(const platform::EditsConfig& c) {
  return (c.socket_dir == "/" ? "" : c.socket_dir) + "/" + c.socket_name;
}

// Opens /proc/<pid>/ns/<kind>; throws Error.
int open_ns(pid_t pid, const char* kind) {
  std::string path = "/proc/" + std::to_string(pid) + "/ns/" + kind;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(errno_text("cannot open " + path, errno));
  return fd;
}

bool same_file(const std::string& a, const std::string& b) {
  struct stat sa {
  }, sb{};
  return ::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0 && sa.st_dev == sb.st_dev &&
         sa.st_ino == sb.st_ino;
}

// The container's root before pivot_root (the bundle's rootfs, seen from its mount namespace),
// or "/" after it.
std::string view_root(const std::string& root) {
  return root != "/" && ::access(root.c_str(), F_OK) == 0 && !same_file(root, "/") ? root : "/";
}

// The parent of /proc/<who> ("self" or a pid), as /proc numbers it (the host's numbers before
// pivot_root, whatever our own pid namespace).
pid_t parent_of(const std::string& who) {
  auto text = read_file("/proc/" + who + "/stat");
  if (!text) return 0;
  size_t paren = text->rfind(')');
  if (paren == std::string::npos) return 0;
  int ppid = 0;
  char state = 0;
  if (std::sscanf(text->c_str() + paren + 1, " %c %d", &state, &ppid) != 2) return 0;
  return ppid;
}

// The nearest ancestor in a mount namespace other than ours: the runtime that made the
// container, outside it. 0 when there is none (then we are not inside a container).
pid_t runtime_outside(struct stat* mnt_out) {
  pid_t p = parent_of("self");
  for (int depth = 0; depth < 32 && p > 1; ++depth, p = parent_of(std::to_string(p))) {
    const std::string ns = "/proc/" + std::to_string(p) + "/ns/mnt";
    if (!same_file(ns, "/proc/self/ns/mnt") && ::stat(ns.c_str(), mnt_out) == 0) return p;
  }
  return 0;
}

// The hook run inside the container's namespaces (pid 0 in the state): /proc is still the
// host's before pivot_root, and the runtime that started the container is an ancestor outside
// them; our mount and network namespaces must differ from its.
int hook_in_container(const platform::EditsConfig& config, const platform::ContainerEdits& edits,
                      const struct stat& node, const std::string& root) {
  struct stat runtime_mnt {};
  const pid_t runtime = runtime_outside(&runtime_mnt);
  if (runtime == 0)
    throw Error(
        "the state names no container pid, and the hook runs in its runtime's mount "
        "namespace: not inside a container");
  if (same_file("/proc/self/ns/net", "/proc/" + std::to_string(runtime) + "/ns/net"))
    throw Error("the hook runs in its runtime's network namespace, not a container's");
  const struct stat& init_mnt = runtime_mnt;
  auto probe = platform::probe_daemon(socket_of(config), kHookHelloTimeoutMs);
  if (!probe.hello) throw Error("no device view: " + probe.error);
  const platform::DeviceIdentity id =
      platform::identity_from_hello(*probe.hello, edits.uverbs_index, node.st_rdev);
  const platform::MountNsId host{static_cast<uint64_t>(init_mnt.st_dev),
                                 static_cast<uint64_t>(init_mnt.st_ino)};
  platform::mount_device_view(host, view_root(root), platform::device_view(id));
  return kExitOk;
}

}  // namespace

int edits_command(const EditsOptions& options, bool engine_args) {
  platform::ContainerEdits edits = platform::container_edits(edits_config(options));
  if (engine_args) {
    for (const auto& a : platform::engine_run_args(edits)) std::cout << a << "\n";
    return kExitOk;
  }
  std::cout << platform::to_json(edits).dump(2) << "\n";
  return kExitOk;
}

int cdi_generate(const CdiGenerateOptions& o) {
  platform::EditsConfig config = edits_config(o.edits);
  platform::ContainerEdits edits = platform::container_edits(config);
  CdiOptions cdi;
  struct stat st {};
  if (::stat(config.device_host_path.c_str(), &st) < 0 || !S_ISCHR(st.st_mode))
    throw Error(config.device_host_path + " is not a character device");
  cdi.node_major = major(st.st_rdev);
  cdi.node_minor = minor(st.st_rdev);
  if (!o.no_hook) {
    char self[4096];
    ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n <= 0) throw Error(errno_text("readlink /proc/self/exe", errno));
    cdi.hook_path.assign(self, static_cast<size_t>(n));
    cdi.socket = socket_of(config);
  }
  std::string podman_max;
  if (auto podman = find_tool("podman")) {
    CommandResult r = run_command({*podman, "--version"}, 10000);
    if (r.ok()) podman_max = podman_max_cdi_version(r.out);
  }
  if (o.version == "auto") {
    cdi.version = kCdiDefaultVersion;
  } else {
    if (!cdi_version_supported(o.version))
      throw UsageError("--cdi-version " + o.version +
                       ": use 0.3.0, 0.4.0, 0.5.0, 0.6.0, 0.7.0, 0.8.0 or 1.0.0");
    cdi.version = o.version;
  }
  if (!podman_max.empty() && compare_versions(cdi.version, podman_max) > 0)
    std::cerr << "vrdma cdi generate: warning: the podman found here accepts CDI versions up to "
              << podman_max << "; it will refuse this " << cdi.version << " spec\n";
  const std::string text = cdi_spec(edits, cdi).dump(2) + "\n";
  if (o.output == "-") {
    std::cout << text;
    return kExitOk;
  }
  auto slash = o.output.rfind('/');
  if (slash != std::string::npos && slash > 0) make_dirs(o.output.substr(0, slash));
  write_file_atomic(o.output, text);
  ::chmod(o.output.c_str(), 0644);
  std::cout << "wrote " << o.output << " (CDI " << cdi.version << "): use --device " << kCdiKind
            << "=" << edits.device_name << "\n";
  return kExitOk;
}

int cdi_list(const std::string& path) {
  std::vector<std::string> files;
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    for (const auto& e : fs::directory_iterator(path, ec)) {
      auto ext = e.path().extension();
      if (ext == ".json") files.push_back(e.path());
    }
    std::sort(files.begin(), files.end());
  } else {
    files.push_back(path);
  }
  int found = 0;
  for (const auto& f : files) {
    auto text = read_file(f);
    if (!text) throw Error("no CDI spec at " + f + " (vrdma cdi generate writes one)");
    nlohmann::json spec;
    try {
      spec = nlohmann::json::parse(*text);
    } catch (const nlohmann::json::exception& e) {
      throw Error(f + ": not JSON: " + e.what());
    }
    try {
      for (const auto& name : cdi_device_names(spec)) {
        if (!spec.contains("kind") || spec["kind"] != kCdiKind) continue;
        std::cout << name << "\n";
        ++found;
      }
    } catch (const std::exception& e) {
      throw Error(f + ": " + e.what());
    }
  }
  if (!found) throw Error("no " + std::string(kCdiKind) + " device in " + path);
  return kExitOk;
}

int cdi_hook(const std::string& socket_arg) {
  // The OCI state: {"ociVersion", "id", "status", "pid", "bundle", "annotations"}.
  std::string input;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(STDIN_FILENO, buf, sizeof(buf))) != 0) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Error(errno_text("read the container state from stdin", errno));
    input.append(buf, static_cast<size_t>(n));
    if (input.size() > kMaxStateBytes) throw Error("container state on stdin is too large");
  }
  nlohmann::json state;
  try {
    state = nlohmann::json::parse(input);
  } catch (const nlohmann::json::exception& e) {
    throw UsageError(std::string("stdin is not an OCI container state: ") + e.what());
  }
  if (!state.contains("pid") || !state["pid"].is_number_integer() || state["pid"] < 0 ||
      !state.contains("bundle") || !state["bundle"].is_string())
    throw UsageError("the container state on stdin has no pid or bundle");
  // Pid 0: the runtime runs the hook inside the container's namespaces, as the OCI runtime spec
  // says of createContainer hooks (crun does, and passes no pid); else the hook runs in the
  // runtime's namespaces and joins the container's through its pid.
  const pid_t pid = state["pid"].get<pid_t>();
  const std::string bundle = state["bundle"];
  auto config_text = read_file(bundle + "/config.json");
  if (!config_text) throw Error("no config.json in bundle " + bundle);
  std::string root = "/";
  try {
    auto config = nlohmann::json::parse(*config_text);
    if (config.contains("root") && config["root"].contains("path"))
      root = config["root"]["path"].get<std::string>();
  } catch (const nlohmann::json::exception& e) {
    throw Error(bundle + "/config.json: " + e.what());
  }
  if (root.empty() || root.front() != '/') root = bundle + "/" + root;

  platform::EditsConfig config = edits_config({"", socket_arg});
  platform::ContainerEdits edits = platform::container_edits(config);
  struct stat node {};
  if (::stat(config.device_host_path.c_str(), &node) < 0)
    throw Error(errno_text("stat " + config.device_host_path, errno));

  if (pid == 0) return hook_in_container(config, edits, node, root);
  const platform::MountNsId host = platform::current_mount_ns();
  int net_fd = open_ns(pid, "net");
  int mnt_fd = open_ns(pid, "mnt");
  // Ask vrdmad from the container's network namespace: it answers with what the libraries in
  // the container will get (address, node GUID, device name).
  if (::setns(net_fd, CLONE_NEWNET) < 0)
    throw Error(errno_text("cannot enter the container's network namespace", errno));
  ::close(net_fd);
  auto probe = platform::probe_daemon(socket_of(config), kHookHelloTimeoutMs);
  if (!probe.hello) throw Error("no device view: " + probe.error);
  const platform::DeviceIdentity id =
      platform::identity_from_hello(*probe.hello, edits.uverbs_index, node.st_rdev);

  if (::setns(mnt_fd, CLONE_NEWNS) < 0)
    throw Error(errno_text("cannot enter the container's mount namespace", errno));
  ::close(mnt_fd);
  // Before pivot_root (createRuntime, createContainer) the container's root is the bundle's
  // rootfs in this namespace; after it (startContainer) it is "/".
  platform::mount_device_view(host, view_root(root), platform::device_view(id));
  return kExitOk;
}

}  // namespace vrdma::ctl
