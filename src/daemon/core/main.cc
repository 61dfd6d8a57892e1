// vrdmad: the per-host vrdma daemon.
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "common/log.h"
#include "daemon/core/daemon.h"
#include "daemon/core/options.h"
#include "daemon/core/reload.h"

namespace {

vrdma::daemon::Daemon* g_daemon = nullptr;

void on_stop_signal(int) {
  if (g_daemon) g_daemon->stop();
}

void on_reload_signal(int) {
  if (g_daemon) g_daemon->request_reload();
}

// Creates the socket's parent directories (mode 0755) when they do not exist.
int make_parent_dirs(const std::string& socket_path) {
  std::filesystem::path parent = std::filesystem::path(socket_path).parent_path();
  if (parent.empty()) return 0;
  std::string partial;
  for (const auto& part : parent) {
    partial = (std::filesystem::path(partial) / part).string();
    if (partial == "/") continue;
    if (::mkdir(partial.c_str(), 0755) < 0 && errno != EEXIST) return errno;
  }
  return 0;
}

void raise_fd_limit() {
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &rl);
  }
}

}  // namespace

int main(int argc, char** argv) {
  using namespace vrdma;
  using namespace vrdma::daemon;
  DaemonSettings settings;
  try {
    settings.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return settings.app().exit(e);  // --help
    std::fprintf(stderr, "vrdmad: %s\n", e.what());
    return 2;
  }
  if (settings.print_template()) {
    std::fputs(config_file_template(settings.app()).c_str(), stdout);
    return 0;
  }
  if (settings.print_config()) {
    std::fputs(config::effective_config(settings.app()).c_str(), stdout);
    return 0;
  }
  DaemonOptions& opts = settings.options();
  if (std::string error = check_options(&opts); !error.empty()) {
    std::fprintf(stderr, "vrdmad: %s\n", error.c_str());
    return 2;
  }
  set_log_level(*parse_log_level(opts.log_level));
  DaemonConfig& cfg = opts.cfg;

  ::signal(SIGPIPE, SIG_IGN);
  raise_fd_limit();
  if (int err = make_parent_dirs(cfg.socket_path)) {
    LOG_ERROR("cannot create the directory of %s: %s", cfg.socket_path.c_str(), strerror(err));
    return 1;
  }

  Daemon daemon(cfg);
  g_daemon = &daemon;
  Reloader reloader(std::vector<std::string>(argv, argv + argc), settings);
  daemon.set_reload_handler([&] { return reloader.reload(daemon); });
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGTERM, &sa, nullptr);
  ::sigaction(SIGINT, &sa, nullptr);
  sa.sa_handler = on_reload_signal;
  ::sigaction(SIGHUP, &sa, nullptr);

  if (!settings.file().empty()) LOG_INFO("configuration file %s", settings.file().c_str());
  if (daemon.start() != 0) return 1;
  int err = daemon.run();
  g_daemon = nullptr;
  return err != 0 ? 1 : 0;
}
