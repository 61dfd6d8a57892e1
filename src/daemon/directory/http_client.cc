#include "daemon/directory/http_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <string_view>

namespace vrdma::daemon {

namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kMaxHeadBytes = 64 * 1024;
constexpr size_t kMaxLineBytes = 16 * 1024 * 1024;  // a single watch message

int ms_left(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return static_cast<int>(std::max<int64_t>(0, left.count()));
}

// Waits for `events` on fd until the deadline. 0 or -ETIMEDOUT / -errno.
int wait_for(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    int n = ::poll(&p, 1, ms_left(deadline));
    if (n > 0) return 0;
    if (n == 0) return -ETIMEDOUT;
    if (errno != EINTR) return -errno;
  }
}

int connect_to(const HttpEndpoint& to, Clock::time_point deadline, UniqueFd* out) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(to.port);
  if (::inet_pton(AF_INET, to.host.c_str(), &sa.sin_addr) != 1) return -EINVAL;
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd) return -errno;
  int one = 1;
  ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) < 0) {
    if (errno != EINPROGRESS) return -errno;
    if (int rc = wait_for(fd.get(), POLLOUT, deadline); rc < 0) return rc;
    int err = 0;
    socklen_t len = sizeof(err);
    if (::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len) < 0) return -errno;
    if (err) return -err;
  }
  *out = std::move(fd);
  return 0;
}

int send_all(int fd, std::string_view data, Clock::time_point deadline) {
  while (!data.empty()) {
    ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      if (int rc = wait_for(fd, POLLOUT, deadline); rc < 0) return rc;
    } else {
      return n < 0 ? -errno : -EPIPE;
    }
  }
  return 0;
}

// Appends what arrives before the deadline. >0 bytes read, 0 at the end of the stream, -errno.
int read_some(int fd, std::string* raw, Clock::time_point deadline) {
  char buf[16384];
  for (;;) {
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n >= 0) {
      raw->append(buf, static_cast<size_t>(n));
      return static_cast<int>(n);
    }
    if (errno != EAGAIN && errno != EINTR) return -errno;
    if (int rc = wait_for(fd, POLLIN, deadline); rc < 0) return rc;
  }
}

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return (x | 0x20) == (y | 0x20);
         });
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// Reads the status line and headers; what follows them stays in *raw. 0 or -errno.
int read_head(int fd, std::string* raw, Clock::time_point deadline, int* status,
              HttpBodyDecoder* decoder) {
  size_t end;
  while ((end = raw->find("\r\n\r\n")) == std::string::npos) {
    if (raw->size() > kMaxHeadBytes) return -EPROTO;
    int n = read_some(fd, raw, deadline);
    if (n < 0) return n;
    if (n == 0) return -EPROTO;  // closed before the headers ended
  }
  std::string_view head(raw->data(), end);
  size_t eol = head.find("\r\n");
  std::string_view status_line = head.substr(0, eol);
  if (status_line.size() < 12 || status_line.substr(0, 7) != "HTTP/1.") return -EPROTO;
  std::string_view code = status_line.substr(9, 3);
  if (std::from_chars(code.data(), code.data() + 3, *status).ec != std::errc()) return -EPROTO;

  bool chunked = false;
  std::optional<uint64_t> length;
  while (eol != std::string_view::npos) {
    head.remove_prefix(eol + 2);
    eol = head.find("\r\n");
    std::string_view line = head.substr(0, eol);
    size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    std::string_view name = trim(line.substr(0, colon));
    std::string_view value = trim(line.substr(colon + 1));
    if (iequals(name, "transfer-encoding")) {
      chunked = value.find("chunked") != std::string_view::npos;
    } else if (iequals(name, "content-length")) {
      uint64_t n = 0;
      auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
      if (ec != std::errc() || p != value.data() + value.size()) return -EPROTO;
      length = n;
    }
  }
  raw->erase(0, end + 4);
  if (chunked) {
    decoder->reset(HttpBodyDecoder::Framing::kChunked);
  } else if (length) {
    decoder->reset(HttpBodyDecoder::Framing::kLength, *length);
  } else if (*status == 204 || *status == 304) {
    decoder->reset(HttpBodyDecoder::Framing::kLength, 0);
  } else {
    decoder->reset(HttpBodyDecoder::Framing::kUntilClose);
  }
  return 0;
}

std::string request_text(const HttpEndpoint& to, const std::string& path, const std::string& body) {
  return "POST " + path + " HTTP/1.1\r\nHost: " + to.text() +
         "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\nConnection: close\r\n\r\n" + body;
}

// Connects, sends the request, reads the head.
int start_request(const HttpEndpoint& to, const std::string& path, const std::string& body,
                  Clock::time_point deadline, UniqueFd* fd, std::string* raw, int* status,
                  HttpBodyDecoder* decoder) {
  if (int rc = connect_to(to, deadline, fd); rc < 0) return rc;
  if (int rc = send_all(fd->get(), request_text(to, path, body), deadline); rc < 0) return rc;
  return read_head(fd->get(), raw, deadline, status, decoder);
}

}  // namespace

void HttpBodyDecoder::reset(Framing framing, uint64_t length) {
  framing_ = framing;
  left_ = length;
  switch (framing) {
    case Framing::kLength:
      state_ = length ? State::kData : State::kDone;
      break;
    case Framing::kChunked:
      state_ = State::kSize;
      break;
    case Framing::kUntilClose:
      state_ = State::kData;
      break;
  }
}

bool HttpBodyDecoder::feed(std::string& in, std::string* out) {
  size_t pos = 0;
  bool ok = true;
  while (ok && state_ != State::kDone) {
    if (state_ == State::kData) {
      if (framing_ == Framing::kUntilClose) {
        out->append(in, pos);
        pos = in.size();
        break;
      }
      size_t n = static_cast<size_t>(std::min<uint64_t>(left_, in.size() - pos));
      out->append(in, pos, n);
      pos += n;
      left_ -= n;
      if (left_ > 0) break;
      state_ = framing_ == Framing::kChunked ? State::kDataEnd : State::kDone;
      continue;
    }
    size_t eol = in.find("\r\n", pos);
    if (eol == std::string::npos) {
      ok = in.size() - pos <= kMaxHeadBytes;
      break;
    }
    std::string_view line(in.data() + pos, eol - pos);
    pos = eol + 2;
    if (state_ == State::kSize) {
      line = trim(line.substr(0, line.find(';')));
      uint64_t size = 0;
      auto [p, ec] = std::from_chars(line.data(), line.data() + line.size(), size, 16);
      ok = ec == std::errc() && p == line.data() + line.size() && size <= kMaxLineBytes;
      left_ = size;
      state_ = size ? State::kData : State::kTrailers;
    } else if (state_ == State::kDataEnd) {
      ok = line.empty();
      state_ = State::kSize;
    } else if (line.empty()) {  // kTrailers: skipped up to the empty line
      state_ = State::kDone;
    }
  }
  in.erase(0, pos);
  return ok;
}

int http_post(const HttpEndpoint& to, const std::string& path, const std::string& body,
              int timeout_ms, HttpResponse* out) {
  auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  UniqueFd fd;
  std::string raw;
  HttpBodyDecoder decoder;
  out->body.clear();
  if (int rc = start_request(to, path, body, deadline, &fd, &raw, &out->status, &decoder); rc < 0)
    return rc;
  for (;;) {
    if (!decoder.feed(raw, &out->body)) return -EPROTO;
    if (decoder.done()) return 0;
    if (out->body.size() > kMaxLineBytes) return -EPROTO;
    int n = read_some(fd.get(), &raw, deadline);
    if (n < 0) return n;
    if (n == 0) return decoder.framing() == HttpBodyDecoder::Framing::kUntilClose ? 0 : -EPROTO;
  }
}

int HttpStream::open(const HttpEndpoint& to, const std::string& path, const std::string& body,
                     int timeout_ms) {
  close();
  auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  int rc = start_request(to, path, body, deadline, &fd_, &raw_, &status_, &decoder_);
  if (rc == 0 && status_ != 200) rc = -EPROTO;
  if (rc < 0) fd_.reset();
  return rc;
}

int HttpStream::receive() {
  if (!fd_) return -ENOTCONN;
  char buf[16384];
  int rc = 0;
  for (;;) {
    ssize_t n = ::recv(fd_.get(), buf, sizeof(buf), MSG_DONTWAIT);
    if (n > 0) {
      raw_.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n == 0)
      rc = -ECONNRESET;
    else if (errno == EINTR)
      continue;
    else if (errno != EAGAIN)
      rc = -errno;
    break;
  }
  if (!decoder_.feed(raw_, &body_)) return -EPROTO;
  if (decoder_.done()) return -ECONNRESET;
  if (body_.size() > kMaxLineBytes && body_.find('\n') == std::string::npos) return -EPROTO;
  return rc;
}

std::optional<std::string> HttpStream::next_line() {
  size_t eol = body_.find('\n');
  if (eol == std::string::npos) return std::nullopt;
  std::string line = body_.substr(0, eol);
  body_.erase(0, eol + 1);
  if (!line.empty() && line.back() == '\r') line.pop_back();
  return line;
}

void HttpStream::close() {
  fd_.reset();
  status_ = 0;
  raw_.clear();
  body_.clear();
}

}  // namespace vrdma::daemon
