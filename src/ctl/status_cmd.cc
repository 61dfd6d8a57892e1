// vrdma status: choosing the daemon(s), asking them, printing the answers.
#include "ctl/status_cmd.h"

#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <optional>
#include <utility>
#include <vector>

#include "common/unix_socket.h"
#include "ctl/daemon_client.h"
#include "ctl/error.h"
#include "ctl/netns.h"
#include "ctl/sandbox_state.h"

namespace vrdma::ctl {

namespace {

std::string host_names(const Sandbox& s) {
  std::string names;
  for (const auto& h : s.hosts) names += (names.empty() ? "" : " ") + h.name;
  return names;
}

}  // namespace

std::vector<Target> choose_targets(const StatusOptions& o) {
  if (!o.socket.empty()) return {{o.socket, o.socket}};
  auto sandbox = load_sandbox(run_dir());
  if (!o.host.empty() || o.all) {
    if (!sandbox)
      throw Error(std::string(o.all ? "--all" : "--host") +
                  " needs a sandbox, and none is up (use --socket PATH)");
    if (o.all) {
      std::vector<Target> targets;
      for (const auto& h : sandbox->hosts) targets.push_back({h.name, h.socket, h.netns});
      return targets;
    }
    std::string name = o.host[0] == 'h' ? o.host : "h" + o.host;
    const SandboxHost* h = sandbox->host(name);
    if (!h)
      throw UsageError("no host '" + o.host + "' in the sandbox (hosts: " + host_names(*sandbox) +
                       ")");
    return {{h->name, h->socket, h->netns}};
  }
  if (const char* env = std::getenv(proto::kSocketEnv); env && *env) return {{env, env}};
  if (sandbox && !sandbox->hosts.empty())
    return {{sandbox->hosts[0].name, sandbox->hosts[0].socket, sandbox->hosts[0].netns}};
  return {{proto::kDefaultSocket, proto::kDefaultSocket}};
}

void enter_host_of(const Target& t, std::optional<ScopedNetns>& in_host) {
  if (!t.netns.empty() && ::geteuid() == 0 && netns_alive(t.netns)) in_host.emplace(t.netns);
}

int for_each_daemon(const StatusOptions& o, const char* command,
                    const std::function<void(DaemonClient&, const std::string& label)>& action) {
  std::vector<Target> targets = choose_targets(o);
  int rc = kExitOk;
  for (const Target& t : targets) {
    try {
      std::optional<ScopedNetns> in_host;
      enter_host_of(t, in_host);
      DaemonClient client(t.socket);
      action(client, targets.size() > 1 ? t.label + ": " : "");
    } catch (const Error& e) {
      if (targets.size() == 1) throw;
      std::cerr << "vrdma " << command << ": " << t.label << ": " << e.what() << "\n";
      rc = kExitError;
    }
  }
  return rc;
}

void print_lines(std::ostream& out, const std::string& label, const std::string& text) {
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    out << label << text.substr(start, end - start) << "\n";
    start = end + 1;
  }
}

namespace {

nlohmann::ordered_json query(const Target& t) {
  std::optional<ScopedNetns> in_host;
  enter_host_of(t, in_host);
  DaemonClient client(t.socket);
  std::string text = client.status();
  try {
    return nlohmann::ordered_json::parse(text);
  } catch (const nlohmann::ordered_json::exception& e) {
    throw Error("vrdmad at " + t.socket + " sent a status that is not JSON (" + e.what() + ")");
  }
}

}  // namespace

nlohmann::ordered_json fetch_status(const StatusOptions& o, std::string* label) {
  Target t = choose_targets(o).front();
  if (label) *label = t.label;
  return query(t);
}

int status_command(const StatusOptions& o) {
  std::vector<Target> targets = choose_targets(o);
  int rc = kExitOk;
  nlohmann::ordered_json all = nlohmann::ordered_json::object();
  for (size_t i = 0; i < targets.size(); ++i) {
    const Target& t = targets[i];
    try {
      nlohmann::ordered_json status = query(t);
      if (o.all && o.json) {
        all[t.label] = std::move(status);
      } else if (o.json) {
        std::cout << status.dump(2) << "\n";
      } else {
        if (o.all) std::cout << (i ? "\n" : "") << "== " << t.label << " ==\n";
        print_status(status, std::cout);
      }
    } catch (const Error& e) {
      if (!o.all) throw;
      std::cerr << "vrdma status: " << t.label << ": " << e.what() << "\n";
      if (o.json) all[t.label] = {{"error", e.what()}};
      rc = kExitError;
    }
  }
  if (o.all && o.json) std::cout << all.dump(2) << "\n";
  return rc;
}

}  // namespace vrdma::ctl
