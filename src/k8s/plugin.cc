#include "k8s/plugin.h"

#include <grpcpp/grpcpp.h>
#include <poll.h>
#include <signal.h>
#include <sys/inotify.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <iostream>
#include <stdexcept>

#include "common/log.h"
#include "common/unique_fd.h"

namespace vrdma::k8s {

namespace {

using Clock = std::chrono::steady_clock;

void log(const std::string& text) {
  LOG_INFO("%s", text.c_str());
}

// Reads what inotify reports on the plugin directory. True when kubelet.sock was created;
// *watching becomes false when the directory itself went away.
bool read_watch_events(int fd, bool* watching) {
  bool kubelet_created = false;
  alignas(inotify_event) char buf[4096];
  ssize_t len;
  while ((len = ::read(fd, buf, sizeof(buf))) > 0) {
    for (char* p = buf; p < buf + len;) {
      auto* ev = reinterpret_cast<inotify_event*>(p);
      std::string name = ev->len ? ev->name : "";
      if (name == kKubeletSocket && (ev->mask & (IN_CREATE | IN_MOVED_TO))) kubelet_created = true;
      if (ev->mask & (IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED)) *watching = false;
      p += sizeof(inotify_event) + ev->len;
    }
  }
  return kubelet_created;
}

constexpr uint32_t kWatchMask =
    IN_CREATE | IN_DELETE | IN_MOVED_TO | IN_MOVED_FROM | IN_DELETE_SELF | IN_MOVE_SELF;

}  // namespace

Plugin::Plugin(PluginOptions options, platform::ContainerEdits edits, Kubelet& kubelet,
               HealthProbe& health)
    : options_(std::move(options)),
      kubelet_(kubelet),
      health_(health),
      service_(std::move(edits), options_.allocation, options_.pre_start) {}

Plugin::~Plugin() {
  stop_server();
}

std::string Plugin::socket_path() const {
  return options_.plugin_dir + "/" + options_.socket_name;
}

std::string Plugin::kubelet_path() const {
  return options_.plugin_dir + "/" + kKubeletSocket;
}

void Plugin::start_server() {
  stop_server();
  const std::string path = socket_path();
  ::unlink(path.c_str());
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix://" + path, grpc::InsecureServerCredentials());
  builder.RegisterService(&service_);
  server_ = builder.BuildAndStart();
  if (!server_) throw std::runtime_error("cannot serve gRPC on " + path);
  struct stat st {};
  if (::stat(path.c_str(), &st) < 0)
    throw std::runtime_error("socket " + path + " is missing after the server started");
  socket_dev_ = st.st_dev;
  socket_ino_ = st.st_ino;
  log("serving DevicePlugin on " + path + " (" + std::to_string(service_.ids().size()) +
      " devices)");
}

void Plugin::stop_server() {
  if (!server_) return;
  service_.end_streams();
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  server_->Wait();
  server_.reset();
  if (socket_is_ours()) ::unlink(socket_path().c_str());
  socket_ino_ = 0;
}

bool Plugin::socket_is_ours() const {
  struct stat st {};
  return socket_ino_ != 0 && ::stat(socket_path().c_str(), &st) == 0 && st.st_dev == socket_dev_ &&
         st.st_ino == socket_ino_;
}

bool Plugin::try_register() {
  v1beta1::RegisterRequest req;
  req.set_version(kApiVersion);
  req.set_endpoint(options_.socket_name);
  req.set_resource_name(options_.allocation.resource_name);
  req.mutable_options()->set_pre_start_required(service_.pre_start_required());
  req.mutable_options()->set_get_preferred_allocation_available(true);
  std::string error = kubelet_.register_plugin(req);
  if (!error.empty()) {
    log(error);
    return false;
  }
  log("registered " + options_.allocation.resource_name + " (endpoint " + options_.socket_name +
      ") with the kubelet at " + kubelet_path());
  return true;
}

void Plugin::check_health() {
  std::string why;
  bool healthy = health_.healthy(&why);
  if (!last_health_known_ || healthy != last_health_)
    log(healthy ? "vrdmad answers: devices healthy" : "devices unhealthy: " + why);
  last_health_known_ = true;
  last_health_ = healthy;
  service_.set_healthy(healthy);
}

void Plugin::register_soon() {
  want_register_ = true;
  next_register_ = Clock::now();
  retry_ms_ = kFirstRetryMs;
}

void Plugin::maybe_register() {
  if (!want_register_ || Clock::now() < next_register_) return;
  struct stat st {};
  if (::stat(kubelet_path().c_str(), &st) == 0 && try_register()) {
    want_register_ = false;
  } else {
    next_register_ = Clock::now() + std::chrono::milliseconds(retry_ms_);
    retry_ms_ = std::min(retry_ms_ * 2, options_.register_retry_ms);
  }
}

int Plugin::run() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  UniqueFd sig(::signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK));
  if (!sig) throw std::runtime_error(std::string("signalfd: ") + std::strerror(errno));
  UniqueFd watch(::inotify_init1(IN_CLOEXEC | IN_NONBLOCK));
  if (!watch) throw std::runtime_error(std::string("inotify: ") + std::strerror(errno));
  bool watching = ::inotify_add_watch(watch.get(), options_.plugin_dir.c_str(), kWatchMask) >= 0;
  if (!watching)
    throw std::runtime_error("cannot watch " + options_.plugin_dir + ": " + std::strerror(errno));

  check_health();
  start_server();
  register_soon();
  auto next_health = Clock::now() + std::chrono::milliseconds(options_.health_interval_ms);
  for (;;) {
    auto wake = want_register_ ? std::min(next_health, next_register_) : next_health;
    int timeout = static_cast<int>(std::max<int64_t>(
        0, std::chrono::duration_cast<std::chrono::milliseconds>(wake - Clock::now()).count()));
    pollfd fds[2] = {{sig.get(), POLLIN, 0}, {watch.get(), POLLIN, 0}};
    int n = ::poll(fds, 2, std::min(timeout, 1000));
    if (n < 0 && errno != EINTR) throw std::runtime_error(std::string("poll: ") + strerror(errno));
    if (n > 0 && (fds[0].revents & POLLIN)) {
      signalfd_siginfo info{};
      (void)!::read(sig.get(), &info, sizeof(info));
      log(std::string("stopping on ") + strsignal(static_cast<int>(info.ssi_signo)));
      break;
    }
    if (n > 0 && (fds[1].revents & POLLIN) && read_watch_events(watch.get(), &watching)) {
      log("kubelet.sock was created: registering again");
      register_soon();
    }
    if (!watching) {  // the directory itself went away: watch it again once it is back
      watching = ::inotify_add_watch(watch.get(), options_.plugin_dir.c_str(), kWatchMask) >= 0;
      if (watching) want_register_ = true;
    }
    // A restarting kubelet deletes every socket in the directory, ours included.
    if (watching && !socket_is_ours()) {
      log(socket_path() + " is gone: serving again");
      start_server();
      register_soon();
    }
    if (Clock::now() >= next_health) {
      check_health();
      next_health = Clock::now() + std::chrono::milliseconds(options_.health_interval_ms);
    }
    maybe_register();
  }
  service_.stop();
  stop_server();
  log("stopped");
  return 0;
}

}  // namespace vrdma::k8s
