#include "ctl/sandbox_state.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

#include <cstdlib>

#include "ctl/error.h"
#include "ctl/files.h"
#include "ctl/netns.h"

namespace vrdma::ctl {

const SandboxHost* Sandbox::host(const std::string& name) const {
  for (const auto& h : hosts)
    if (h.name == name) return &h;
  return nullptr;
}

const SandboxContainer* Sandbox::container(const std::string& name) const {
  for (const auto& c : containers)
    if (c.name == name) return &c;
  return nullptr;
}

std::vector<std::string> Sandbox::names() const {
  std::vector<std::string> out;
  for (const auto& h : hosts) out.push_back(h.name);
  for (const auto& c : containers) out.push_back(c.name);
  return out;
}

std::string underlay_netns() {
  return netns_prefix() + "net";
}

std::string run_dir() {
  const char* env = ::getenv(kRunDirEnv);
  std::string dir = env && *env ? env : kDefaultRunDir;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return dir;
}

std::string state_path(const std::string& run_dir) {
  return run_dir + "/sandbox.json";
}

std::string host_dir(const std::string& run_dir, int host_id) {
  return run_dir + "/h" + std::to_string(host_id);
}

std::string etcd_dir(const std::string& run_dir) {
  return run_dir + "/etcd";
}

Sandbox plan_sandbox(int hosts, int containers_per_host, const std::string& run_dir,
                     const std::string& directory) {
  const std::string prefix = netns_prefix();
  Sandbox s;
  s.run_dir = run_dir;
  s.created = static_cast<int64_t>(::time(nullptr));
  s.containers_per_host = containers_per_host;
  if (hosts > 1) {
    s.underlay = underlay_netns();
    s.directory = directory;
    s.pki = run_dir + "/pki";
  }
  if (s.directory == kDirectoryEtcd) {
    std::string dir = etcd_dir(run_dir);
    s.etcd.netns = s.underlay;
    s.etcd.client_url =
        "https://" + std::string(kUnderlayEtcdIp) + ":" + std::to_string(kEtcdClientPort);
    s.etcd.peer_url = "http://127.0.0.1:" + std::to_string(kEtcdPeerPort);
    s.etcd.metrics_url = "http://127.0.0.1:" + std::to_string(kEtcdMetricsPort);
    s.etcd.data_dir = dir + "/data";
    s.etcd.log = dir + "/etcd.log";
    s.etcd.pidfile = dir + "/etcd.pid";
  }
  for (int i = 0; i < hosts; ++i) {
    SandboxHost h;
    h.id = i;
    h.name = "h" + std::to_string(i);
    h.netns = prefix + h.name;
    h.ip = "10.77." + std::to_string(i) + ".1";
    h.pod_cidr = "10.77." + std::to_string(i) + ".0/24";
    if (hosts > 1) {
      h.underlay_ip = "10.76.0." + std::to_string(i + 1);
      h.router = h.underlay_ip + ":" + std::to_string(kRouterPort);
    }
    std::string dir = host_dir(run_dir, i);
    h.socket = dir + "/vrdmad.sock";
    h.pidfile = dir + "/vrdmad.pid";
    h.log = dir + "/vrdmad.log";
    for (int j = 0; j < containers_per_host; ++j) {
      SandboxContainer c;
      c.name = h.name + "c" + std::to_string(j);
      c.netns = prefix + c.name;
      c.ip = "10.77." + std::to_string(i) + "." + std::to_string(10 + j);
      c.host = h.name;
      c.host_id = i;
      c.socket = h.socket;
      s.containers.push_back(std::move(c));
    }
    s.hosts.push_back(std::move(h));
  }
  return s;
}

std::optional<Sandbox> load_sandbox(const std::string& run_dir) {
  std::string path = state_path(run_dir);
  auto text = read_file(path);
  if (!text) return std::nullopt;
  try {
    return nlohmann::json::parse(*text).get<Sandbox>();
  } catch (const nlohmann::json::exception& e) {
    throw Error("corrupt state file " + path + " (" + e.what() +
                "); run `vrdma sandbox down` to clean up");
  }
}

void save_sandbox(const Sandbox& sandbox) {
  write_file_atomic(state_path(sandbox.run_dir), nlohmann::json(sandbox).dump(2) + "\n");
}

RunDirLock::RunDirLock(const std::string& run_dir) {
  make_dirs(run_dir);
  fd_ = ::open(run_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd_ < 0) throw Error(errno_text("cannot open " + run_dir, errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) < 0) {
    int err = errno;
    ::close(fd_);
    fd_ = -1;
    if (err == EWOULDBLOCK)
      throw Error("another `vrdma sandbox up` or `down` is running (lock on " + run_dir + ")");
    throw Error(errno_text("cannot lock " + run_dir, err));
  }
}

RunDirLock::~RunDirLock() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace vrdma::ctl
