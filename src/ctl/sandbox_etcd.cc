#include "ctl/sandbox_etcd.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <iostream>

#include "common/unique_fd.h"
#include "ctl/error.h"
#include "ctl/files.h"
#include "ctl/netns.h"
#include "ctl/proc.h"
#include "ctl/sandbox.h"
#include "ctl/sandbox_pki.h"

namespace vrdma::ctl {

namespace {

using Clock = std::chrono::steady_clock;

constexpr int kProbeTimeoutMs = 500;
constexpr const char* kEtcdName = "vrdma-sandbox";  // the member's name

bool wait_ready(int fd, short events, Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  pollfd p{fd, events, 0};
  return left.count() > 0 && ::poll(&p, 1, static_cast<int>(left.count())) == 1;
}

// True if etcd at ip:port, seen from inside `netns`, says it is healthy (GET /health).
bool etcd_healthy(const std::string& netns, const std::string& ip, int port) {
  auto deadline = Clock::now() + std::chrono::milliseconds(kProbeTimeoutMs);
  int raw_fd;
  {
    ScopedNetns in(netns);  // the socket belongs to the namespace it was made in
    raw_fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  }
  UniqueFd fd(raw_fd);
  if (fd.get() < 0) return false;
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  if (::inet_pton(AF_INET, ip.c_str(), &sa.sin_addr) != 1) return false;
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) < 0) {
    if (errno != EINPROGRESS || !wait_ready(fd.get(), POLLOUT, deadline)) return false;
    int err = 0;
    socklen_t len = sizeof(err);
    if (::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len) < 0 || err) return false;
  }
  std::string request = "GET /health HTTP/1.1\r\nHost: " + ip + "\r\nConnection: close\r\n\r\n";
  if (::send(fd.get(), request.data(), request.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(request.size()))
    return false;
  std::string reply;
  char buf[1024];
  while (reply.size() < 16384 && wait_ready(fd.get(), POLLIN, deadline)) {
    ssize_t n = ::recv(fd.get(), buf, sizeof(buf), 0);
    if (n <= 0) break;
    reply.append(buf, static_cast<size_t>(n));
  }
  return reply.rfind("HTTP/1.1 200", 0) == 0 &&
         reply.find("\"health\":\"true\"") != std::string::npos;
}

// The sandbox, if it has an etcd. Throws Error otherwise.
Sandbox sandbox_with_etcd(const std::string& dir) {
  auto sandbox = load_sandbox(dir);
  if (!sandbox) throw Error("no sandbox is up (vrdma sandbox up --hosts N first, N > 1)");
  if (sandbox->directory != kDirectoryEtcd) {
    throw Error(sandbox->hosts.size() > 1
                    ? "this sandbox has no etcd: its hosts use the embedded directory"
                    : "this sandbox has a single host and no etcd (vrdma sandbox up --hosts N, "
                      "N > 1, has one)");
  }
  if (!netns_alive(sandbox->etcd.netns))
    throw Error("the sandbox's namespace " + sandbox->etcd.netns +
                " is missing; vrdma sandbox down, then up again");
  return *sandbox;
}

std::string log_excerpt(const std::string& log) {
  std::string tail = tail_lines(log, 20);
  if (tail.empty()) return "\n(" + log + " is empty)";
  return "\n--- last lines of " + log + " ---\n" + tail + "---";
}

}  // namespace

std::string find_etcd() {
  if (const char* env = ::getenv(kEtcdEnv); env && *env) {
    if (!is_executable_file(env))
      throw Error(std::string(kEtcdEnv) + "=" + env + " is not an executable file");
    return env;
  }
  if (auto path = find_tool("etcd")) return *path;
  throw Error(std::string("a multi-host sandbox needs etcd (Debian package etcd-server), or ") +
              "--directory embedded; set " + kEtcdEnv + "=/path/to/etcd if it is elsewhere");
}

pid_t start_etcd(const Sandbox& sandbox, const std::function<void()>& step) {
  const SandboxEtcd& e = sandbox.etcd;
  make_dirs(e.data_dir.substr(0, e.data_dir.rfind('/')));
  // clang-format off
  std::vector<std::string> argv = {e.binary,
                                   "--name", kEtcdName,
                                   "--data-dir", e.data_dir,
                                   "--listen-client-urls", e.client_url,
                                   "--advertise-client-urls", e.client_url,
                                   "--listen-peer-urls", e.peer_url,
                                   "--initial-advertise-peer-urls", e.peer_url,
                                   "--initial-cluster", std::string(kEtcdName) + "=" + e.peer_url,
                                   "--listen-metrics-urls", e.metrics_url,
                                   "--client-cert-auth",
                                   "--trusted-ca-file", pki_cert(sandbox.run_dir, "ca"),
                                   "--cert-file", pki_cert(sandbox.run_dir, "etcd"),
                                   "--key-file", pki_key(sandbox.run_dir, "etcd")};
  // clang-format on
  pid_t pid = spawn_in_netns(e.netns, argv, e.log);
  write_file_atomic(e.pidfile, std::to_string(pid) + "\n");

  auto deadline = Clock::now() + std::chrono::milliseconds(kEtcdStartTimeoutMs);
  for (;;) {
    step();
    int status;
    if (::waitpid(pid, &status, WNOHANG) == pid)
      throw Error("etcd ended (" + describe_wait_status(status) + ") before answering on " +
                  e.client_url + log_excerpt(e.log));
    if (etcd_healthy(e.netns, "127.0.0.1", kEtcdMetricsPort)) return pid;
    if (Clock::now() >= deadline)
      throw Error("etcd did not answer on " + e.client_url + " within " +
                  std::to_string(kEtcdStartTimeoutMs / 1000) + " s" + log_excerpt(e.log));
    sleep_ms(100);
  }
}

pid_t running_etcd(const std::string& run_dir) {
  std::string dir = etcd_dir(run_dir);
  auto text = read_file(dir + "/etcd.pid");
  if (!text) return 0;
  pid_t pid = static_cast<pid_t>(std::atoi(text->c_str()));
  if (!pid_alive(pid)) return 0;
  std::string cmdline = " " + read_cmdline(pid) + " ";
  return cmdline.find(" --data-dir " + dir + "/data ") != std::string::npos ? pid : 0;
}

bool stop_etcd(pid_t pid) {
  return terminate_processes({pid}, kEtcdStopGraceMs, false).empty();
}

int sandbox_etcd_start() {
  const std::string dir = run_dir();
  RunDirLock lock(dir);
  Sandbox sandbox = sandbox_with_etcd(dir);
  if (pid_t pid = running_etcd(dir)) {
    std::cout << "etcd already runs (pid " << pid << ")\n";
    return kExitOk;
  }
  sandbox.etcd.pid = start_etcd(sandbox, [] {});
  save_sandbox(sandbox);
  std::cout << "etcd started (pid " << sandbox.etcd.pid << "), answering on "
            << sandbox.etcd.client_url << "\n";
  return kExitOk;
}

int sandbox_etcd_stop() {
  const std::string dir = run_dir();
  RunDirLock lock(dir);
  Sandbox sandbox = sandbox_with_etcd(dir);
  pid_t pid = running_etcd(dir);
  if (!pid) {
    std::cout << "etcd is not running\n";
    return kExitOk;
  }
  bool graceful = stop_etcd(pid);
  sandbox.etcd.pid = 0;
  save_sandbox(sandbox);
  std::cout << "etcd (pid " << pid << ") " << (graceful ? "stopped" : "ignored SIGTERM; killed it")
            << "\n";
  return kExitOk;
}

}  // namespace vrdma::ctl
