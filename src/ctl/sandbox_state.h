// The sandbox test bed: its layout (names, addresses, paths) and the state file
// <run dir>/sandbox.json that `vrdma sandbox up` writes and the other commands read.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace vrdma::ctl {

inline constexpr int kMaxHosts = 8;
inline constexpr int kMaxContainersPerHost = 64;
inline constexpr const char* kRunDirEnv = "VRDMA_RUN_DIR";
inline constexpr const char* kDefaultRunDir = "/run/vrdma";
inline constexpr const char* kHostBridge = "vbr0";      // in each host namespace
inline constexpr const char* kUnderlayBridge = "ubr0";  // in the underlay namespace
inline constexpr const char* kUnderlayDev = "u0";  // each host's link to the underlay
inline constexpr const char* kUnderlayEtcdIp = "10.76.0.254";  // ubr0's address: etcd's
inline constexpr int kEtcdClientPort = 2379;
inline constexpr int kEtcdPeerPort = 2380;  // on 127.0.0.1 inside the underlay namespace
inline constexpr int kEtcdMetricsPort = 2381;  // /health, plain HTTP, on 127.0.0.1 there too
inline constexpr int kRouterPort = 7471;    // each host's vrdmad router, on its underlay_ip

// How the daemons of a multi-host sandbox find each other (`sandbox up --directory`).
inline constexpr const char* kDirectoryEtcd = "etcd";
inline constexpr const char* kDirectoryEmbedded = "embedded";

struct SandboxHost {
  int id = 0;
  std::string name;         // "h0"
  std::string netns;        // "vrdma-h0"
  std::string ip;           // bridge address, 10.77.<id>.1
  std::string underlay_ip;  // 10.76.0.<id+1>, empty with a single host
  std::string router;       // underlay_ip:kRouterPort, empty with a single host
  std::string pod_cidr;     // 10.77.<id>.0/24
  std::string socket;       // <run dir>/h0/vrdmad.sock
  std::string pidfile;
  std::string log;
  pid_t pid = 0;  // vrdmad
};

struct SandboxContainer {
  std::string name;   // "h0c1"
  std::string netns;  // "vrdma-h0c1"
  std::string ip;     // 10.77.<host>.<10+j>
  std::string host;   // "h0"
  int host_id = 0;
  std::string socket;  // the host's vrdmad socket
};

// The etcd of a multi-host sandbox: in the underlay namespace, files under <run dir>/etcd.
struct SandboxEtcd {
  std::string binary;  // the etcd executable
  std::string netns;
  std::string client_url;   // https://10.76.0.254:2379 (client certificates required)
  std::string peer_url;     // http://127.0.0.1:2380
  std::string metrics_url;  // http://127.0.0.1:2381 (/health)
  std::string data_dir;     // <run dir>/etcd/data
  std::string log;          // <run dir>/etcd/etcd.log
  std::string pidfile;      // <run dir>/etcd/etcd.pid
  pid_t pid = 0;            // when started; running_etcd() tells whether it still runs
};

struct Sandbox {
  int version = 1;
  std::string run_dir;
  std::string daemon;   // the vrdmad binary
  int64_t created = 0;  // unix time
  int containers_per_host = 0;
  std::string underlay;  // underlay_netns(), or empty with a single host
  // With several hosts kDirectoryEtcd or kDirectoryEmbedded; empty with a single host (its
  // vrdmad runs as it always has, without directory options).
  std::string directory;
  // With several hosts: "tls" (certificates in <run dir>/pki) or "plaintext".
  std::string router_security;
  SandboxEtcd etcd;  // with kDirectoryEtcd only
  std::string pki;   // <run dir>/pki with several hosts (sandbox_pki.h)
  std::vector<SandboxHost> hosts;
  std::vector<SandboxContainer> containers;

  const SandboxHost* host(const std::string& name) const;
  const SandboxContainer* container(const std::string& name) const;
  std::vector<std::string> names() const;  // hosts and containers
};

// JSON field names are those of the structs; missing fields keep their defaults.
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(SandboxHost, id, name, netns, ip, underlay_ip,
                                                router, pod_cidr, socket, pidfile, log, pid)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(SandboxEtcd, binary, netns, client_url, peer_url,
                                                metrics_url, data_dir, log, pidfile, pid)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(SandboxContainer, name, netns, ip, host, host_id,
                                                socket)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(Sandbox, version, run_dir, daemon, created,
                                                containers_per_host, underlay, directory,
                                                router_security, etcd, pki, hosts, containers)

// The namespace that links the hosts of a multi-host sandbox: <prefix>net.
std::string underlay_netns();

// $VRDMA_RUN_DIR, else /run/vrdma.
std::string run_dir();
std::string state_path(const std::string& run_dir);
std::string host_dir(const std::string& run_dir, int host_id);
std::string etcd_dir(const std::string& run_dir);  // <run dir>/etcd

// Names, addresses and paths of a sandbox with this shape (no side effects). `directory`
// (kDirectoryEtcd or kDirectoryEmbedded) matters with several hosts only.
Sandbox plan_sandbox(int hosts, int containers_per_host, const std::string& run_dir,
                     const std::string& directory = kDirectoryEtcd);

// The state file, or nullopt if none. A corrupt file throws Error.
std::optional<Sandbox> load_sandbox(const std::string& run_dir);
void save_sandbox(const Sandbox& sandbox);

// Serializes `vrdma sandbox up` and `down`: an exclusive flock on the run
// directory (created if missing), released when the process exits, even by
// SIGKILL. Throws Error if another command holds it.
class RunDirLock {
 public:
  explicit RunDirLock(const std::string& run_dir);
  ~RunDirLock();
  RunDirLock(const RunDirLock&) = delete;
  RunDirLock& operator=(const RunDirLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace vrdma::ctl
