// A CLI client of vrdmad's control socket: Hello as a kCli client, then
// requests, each with a bounded wait for its reply.
#pragma once

#include <cstdint>
#include <string>

#include "common/protocol.h"

namespace vrdma::ctl {

inline constexpr int kDaemonTimeoutMs = 2000;

class DaemonClient {
 public:
  // Connects and says Hello. Throws Error with a message that tells a stopped
  // daemon from a refused or slow one.
  explicit DaemonClient(std::string socket, int timeout_ms = kDaemonTimeoutMs);
  ~DaemonClient();
  DaemonClient(const DaemonClient&) = delete;
  DaemonClient& operator=(const DaemonClient&) = delete;

  const proto::HelloRep& hello() const { return hello_; }

  // Op::kStatus: the daemon's JSON text.
  std::string status();
  // Op::kReload: what re-reading vrdmad's configuration changed, one line per key. Throws Error
  // with vrdmad's reason when it refused (a bad file: its line and key; EPERM).
  std::string reload();
  // Op::kQos: applies `rule` (none: "") and returns the rules in force, one a line.
  std::string qos(const std::string& rule);

 private:
  // Sends op with payload and returns the reply payload (same op and seq).
  std::string call(proto::Op op, const void* payload, size_t len);

  std::string socket_;
  int timeout_ms_;
  int fd_ = -1;
  uint32_t seq_ = 0;
  proto::HelloRep hello_{};
};

}  // namespace vrdma::ctl
