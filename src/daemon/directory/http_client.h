// A small HTTP/1.1 client over plain TCP, enough for etcd's JSON gateway: POST a body and read
// the whole response (Content-Length, chunked, or until the server closes), or keep a chunked
// response open and read it line by line as it arrives (a watch). IPv4 literals only, no TLS.
// Every call has a deadline; nothing blocks past it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "common/unique_fd.h"

namespace vrdma::daemon {

struct HttpEndpoint {
  std::string host;  // dotted IPv4
  uint16_t port = 0;
  std::string text() const { return host + ":" + std::to_string(port); }
};

struct HttpResponse {
  int status = 0;  // 200, 404, ...
  std::string body;
};

// Decodes a response body framed by Content-Length, chunked transfer coding (trailers are
// skipped), or the end of the connection.
class HttpBodyDecoder {
 public:
  enum class Framing { kLength, kChunked, kUntilClose };
  void reset(Framing framing, uint64_t length = 0);
  // Consumes what it can of `in` (removing it) and appends the decoded bytes to *out.
  // false: the framing is malformed.
  bool feed(std::string& in, std::string* out);
  bool done() const { return state_ == State::kDone; }
  Framing framing() const { return framing_; }

 private:
  enum class State { kSize, kData, kDataEnd, kTrailers, kDone };
  Framing framing_ = Framing::kUntilClose;
  State state_ = State::kData;
  uint64_t left_ = 0;  // bytes of the current chunk (or the whole body) still to come
};

// One POST with "Connection: close". 0, or -errno: -ETIMEDOUT when timeout_ms passed,
// -ECONNREFUSED and the like from the socket, -EPROTO for a reply that is not HTTP.
int http_post(const HttpEndpoint& to, const std::string& path, const std::string& body,
              int timeout_ms, HttpResponse* out);

// A POST whose response body keeps coming: poll fd() for input, then receive(), then take the
// complete lines with next_line().
class HttpStream {
 public:
  // Connects, sends the request and reads the status line and headers within timeout_ms.
  // 0 or -errno as http_post; a status other than 200 is -EPROTO (status() tells which).
  int open(const HttpEndpoint& to, const std::string& path, const std::string& body,
           int timeout_ms);
  bool is_open() const { return static_cast<bool>(fd_); }
  int fd() const { return fd_.get(); }
  int status() const { return status_; }
  // Reads whatever has arrived, without blocking. 0, or -errno; -ECONNRESET once the server
  // has closed the connection or ended the body.
  int receive();
  // The next complete line of the body, without its '\n'.
  std::optional<std::string> next_line();
  void close();

 private:
  UniqueFd fd_;
  int status_ = 0;
  std::string raw_;   // received, not yet decoded
  std::string body_;  // decoded, not yet returned as lines
  HttpBodyDecoder decoder_;
};

}  // namespace vrdma::daemon
