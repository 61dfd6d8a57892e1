// The request head of an HTTP/1.x scrape, parsed defensively: bytes go in as they arrive, the
// head may be at most kMaxHead bytes, only GET and HEAD are served, nothing after the head
// (no body) is read. Pure: no socket, so that tests feed it anything.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace vrdma::daemon::metrics {

class HttpRequest {
 public:
  static constexpr size_t kMaxHead = 8192;

  enum class State {
    kIncomplete,  // the head has not ended yet
    kOk,          // method() and path() are set
    kBad,         // 400: not an HTTP/1.x request line, or a malformed header line
    kTooLarge,    // 431: the head is longer than kMaxHead
    kNotAllowed,  // 405: a method other than GET or HEAD
    kBadVersion,  // 505: not HTTP/1.0 or HTTP/1.1
  };

  // Takes the next bytes. Once the state is no longer kIncomplete, further bytes are ignored.
  State feed(std::string_view bytes);
  State state() const { return state_; }
  const std::string& method() const { return method_; }
  // The path without its query string.
  const std::string& path() const { return path_; }

  static int status_code(State s);
  static const char* reason(int code);

 private:
  State parse_head();
  std::string head_;
  std::string method_, path_;
  State state_ = State::kIncomplete;
};

}  // namespace vrdma::daemon::metrics
