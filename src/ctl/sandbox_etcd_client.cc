// What the vrdma command asks of a multi-host sandbox's etcd, as etcd's root user (the
// sandbox's root certificate): setting up auth with one user and role per host, and reading
// the directory (`vrdma sandbox etcd get`). etcd listens only inside the underlay namespace,
// and gRPC opens its connections from threads of its own, so the client runs in a child
// process that enters the namespace first (this process has no gRPC state to inherit).
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>
#include <thread>

#include "common/unique_fd.h"
#include "ctl/error.h"
#include "ctl/files.h"
#include "ctl/netns.h"
#include "ctl/proc.h"
#include "ctl/sandbox.h"
#include "ctl/sandbox_etcd.h"
#include "ctl/sandbox_pki.h"
#include "etcd/etcd_auth.h"
#include "etcd/etcd_client.h"

namespace vrdma::ctl {

namespace {

using Clock = std::chrono::steady_clock;

constexpr int kChildTimeoutMs = 30000;
constexpr int kCallTimeoutMs = 2000;
constexpr int kAttempts = 10;  // etcd said it is healthy; its gRPC side may need a moment

// Runs fn() in a child process inside `netns`. Returns its exit status (or 125 if it did not
// exit normally) and what it wrote to *out. Throws Error if the child cannot be started.
int run_in_netns(const std::string& netns, const std::function<int(std::string*)>& fn,
                 std::string* out) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) < 0) throw Error(errno_text("pipe", errno));
  UniqueFd rd(fds[0]), wr(fds[1]);
  UniqueFd ns(::open(netns_path(netns).c_str(), O_RDONLY | O_CLOEXEC));
  if (ns.get() < 0) throw Error(errno_text("cannot open namespace " + netns, errno));
  std::cout.flush();
  pid_t pid = ::fork();
  if (pid < 0) throw Error(errno_text("fork", errno));
  if (pid == 0) {
    rd.reset();
    std::string text;
    int rc = 126;
    if (::setns(ns.get(), CLONE_NEWNET) == 0) {
      rc = fn(&text);
    } else {
      text = std::string("cannot enter the namespace ") + netns + ": " + std::strerror(errno);
    }
    size_t done = 0;
    while (done < text.size()) {
      ssize_t n = ::write(wr.get(), text.data() + done, text.size() - done);
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    ::_exit(rc);  // no destructors, no atexit: gRPC's threads just end
  }
  wr.reset();
  out->clear();
  auto deadline = Clock::now() + std::chrono::milliseconds(kChildTimeoutMs);
  char buf[65536];
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    pollfd p{rd.get(), POLLIN, 0};
    if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) == 0) {
      ::kill(pid, SIGKILL);
      break;
    }
    ssize_t n = ::read(rd.get(), buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out->append(buf, static_cast<size_t>(n));
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 125;
}

// A client of the sandbox's etcd as root (in the child, inside the underlay namespace).
bool root_client(const Sandbox& sandbox, std::unique_ptr<etcd::Client>* client,
                 std::string* error) {
  const std::string& dir = sandbox.run_dir;
  etcd::Credentials creds;
  if (!etcd::load_credentials(pki_cert(dir, "ca"), pki_cert(dir, "root"), pki_key(dir, "root"),
                              &creds, error))
    return false;
  *client = std::make_unique<etcd::Client>(
      std::vector<etcd::Endpoint>{{kUnderlayEtcdIp, static_cast<uint16_t>(kEtcdClientPort)}},
      std::move(creds), kCallTimeoutMs);
  return true;
}

// Retries `call` while etcd does not answer yet (a fresh connection each time).
bool with_retries(etcd::Client& client, const std::function<bool(std::string*)>& call,
                  std::string* error) {
  for (int i = 0;; ++i) {
    if (call(error)) return true;
    bool unreachable = error->find("connect") != std::string::npos ||
                       error->find("no answer") != std::string::npos;
    if (!unreachable || i + 1 >= kAttempts) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    client.next_endpoint();
  }
}

}  // namespace

void setup_etcd_auth(const Sandbox& sandbox) {
  std::string out;
  int rc = run_in_netns(
      sandbox.etcd.netns,
      [&](std::string* text) {
        std::unique_ptr<etcd::Client> root;
        if (!root_client(sandbox, &root, text)) return 1;
        // The first call shows etcd answers on gRPC; the rest follow on the same connection.
        std::vector<etcd::Kv> kvs;
        int64_t rev;
        if (!with_retries(
                *root,
                [&](std::string* e) {
                  return root->range_prefix(etcd::kDirectoryPrefix, &kvs, &rev, e);
                },
                text))
          return 1;
        std::vector<uint32_t> ids;
        for (const auto& h : sandbox.hosts) ids.push_back(static_cast<uint32_t>(h.id));
        return etcd::setup_auth(*root, ids, true, text) ? 0 : 1;
      },
      &out);
  if (rc != 0)
    throw Error("cannot set up etcd's users and roles at " + sandbox.etcd.client_url + ": " +
                (out.empty() ? "exit status " + std::to_string(rc) : out));
}

int sandbox_etcd_get(const std::string& prefix) {
  const std::string dir = run_dir();
  auto sandbox = load_sandbox(dir);
  if (!sandbox || sandbox->directory != kDirectoryEtcd)
    throw Error("no multi-host sandbox with etcd is up");
  if (!running_etcd(dir)) throw Error("the sandbox's etcd is not running");
  std::string out;
  int rc = run_in_netns(
      sandbox->etcd.netns,
      [&](std::string* text) {
        std::unique_ptr<etcd::Client> root;
        if (!root_client(*sandbox, &root, text)) return 1;
        std::vector<etcd::Kv> kvs;
        int64_t rev;
        if (!with_retries(
                *root, [&](std::string* e) { return root->range_prefix(prefix, &kvs, &rev, e); },
                text))
          return 1;
        nlohmann::json j = nlohmann::json::object();
        for (const auto& kv : kvs) j[kv.key] = kv.value;
        *text = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
        return 0;
      },
      &out);
  if (rc != 0) throw Error("reading etcd at " + sandbox->etcd.client_url + ": " + out);
  std::cout << out;
  return kExitOk;
}

}  // namespace vrdma::ctl
