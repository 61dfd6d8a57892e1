#include "daemon/core/reload.h"

#include <errno.h>

#include <memory>
#include <set>

#include "common/log.h"

namespace vrdma::daemon {

namespace {

std::string apply_log_level(Daemon&, const DaemonOptions& now) {
  auto level = parse_log_level(now.log_level);
  if (!level) return "unknown level '" + now.log_level + "'";
  set_log_level(*level);
  return "";
}

// Tenant rules decide at admission (a client's tenant is fixed when it connects) and for each
// request from another host (by its source address): new rules apply to new connections and
// to other hosts' requests from now on; a connected client keeps its tenant until it reconnects.
std::string apply_tenants(Daemon& daemon, const DaemonOptions& now) {
  daemon.set_tenant_rules(now.cfg.tenants);
  return "";
}

// Allowed pairs of tenants decide when QPs connect and when rdma_cm connections are asked
// for: new rules apply to connections made from now on; connections already made stay.
std::string apply_allow(Daemon& daemon, const DaemonOptions& now) {
  daemon.set_tenant_allow(now.cfg.allow);
  return "";
}

// QoS rules apply at once to the router's scheduler; a container or tenant whose rule left
// the file goes back to the defaults (weight 1, no limit).
std::string apply_qos(Daemon& daemon, const DaemonOptions& now) {
  daemon.set_qos_rules(now.cfg.qos);
  return "";
}

// The keys a reload applies. Add an entry to make a setting reloadable.
constexpr ReloadHook kHooks[] = {
    {"log-level", apply_log_level},
    {"tenant", apply_tenants},
    {"allow", apply_allow},
    {"qos", apply_qos},
};

std::string value_text(const CLI::App& app, const std::string& key,
                       const std::map<std::string, std::vector<std::string>>& given) {
  auto it = given.find(key);
  if (it == given.end()) {
    const CLI::Option* opt = app.get_option_no_throw("--" + key);
    std::string d = opt ? opt->get_default_str() : "";
    return d.empty() ? "(default)" : d + " (default)";
  }
  std::string out;
  for (const auto& v : it->second) out += (out.empty() ? "" : ", ") + v;
  return it->second.size() == 1 ? out : "[" + out + "]";
}

}  // namespace

std::span<const ReloadHook> reload_hooks() {
  return kHooks;
}

bool reloadable(const std::string& key) {
  for (const auto& h : kHooks)
    if (key == h.key) return true;
  return false;
}

Reloader::Reloader(std::vector<std::string> args, const DaemonSettings& running)
    : args_(std::move(args)),
      file_(running.file()),
      in_force_(config::given_values(running.app())) {}

ReloadOutcome Reloader::reload(Daemon& daemon) {
  auto next = std::make_unique<DaemonSettings>();
  std::vector<const char*> argv;
  for (const auto& a : args_) argv.push_back(a.c_str());
  std::string checked;
  try {
    next->parse(static_cast<int>(argv.size()), argv.data());
    checked = check_options(&next->options());
  } catch (const CLI::ParseError& e) {
    checked = e.what();
  }
  if (!checked.empty()) {
    LOG_ERROR("reload: configuration refused, nothing changed: %s", checked.c_str());
    return {EINVAL, "configuration refused, nothing changed: " + checked + "\n"};
  }

  const auto now = config::given_values(next->app());
  std::set<std::string> keys;
  for (const auto& [k, v] : in_force_) keys.insert(k);
  for (const auto& [k, v] : now) keys.insert(k);
  std::string text;
  const std::string source = next->file().empty() ? "no configuration file" : next->file();
  if (next->file() != file_) {
    text += "configuration file: " + (file_.empty() ? std::string("none") : file_) + " -> " +
            (next->file().empty() ? std::string("none") : next->file()) + "\n";
    file_ = next->file();
  }
  for (const auto& key : keys) {
    auto was = in_force_.find(key);
    auto is = now.find(key);
    bool same = (was == in_force_.end()) == (is == now.end()) &&
                (was == in_force_.end() || was->second == is->second);
    if (same) continue;
    std::string change = key + ": " + value_text(next->app(), key, in_force_) + " -> " +
                         value_text(next->app(), key, now);
    const ReloadHook* hook = nullptr;
    for (const auto& h : kHooks)
      if (key == h.key) hook = &h;
    if (!hook) {
      LOG_WARN("reload: %s: needs a restart", change.c_str());
      text += change + " (needs a restart)\n";
      continue;
    }
    if (std::string err = hook->apply(daemon, next->options()); !err.empty()) {
      LOG_ERROR("reload: %s: not applied: %s", change.c_str(), err.c_str());
      text += change + " (not applied: " + err + ")\n";
      continue;
    }
    LOG_INFO("reload: %s: applied", change.c_str());
    text += change + " (applied)\n";
    if (is == now.end())
      in_force_.erase(key);
    else
      in_force_[key] = is->second;
  }
  if (text.empty()) {
    LOG_INFO("reload: %s: no change", source.c_str());
    text = "no change (" + source + ")\n";
  }
  return {0, text};
}

}  // namespace vrdma::daemon
