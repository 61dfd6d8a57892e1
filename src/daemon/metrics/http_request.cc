#include "daemon/metrics/http_request.h"

namespace vrdma::daemon::metrics {

namespace {

bool is_token_char(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_' || c == '!' || c == '#' || c == '$' || c == '%' || c == '&' || c == '\'' ||
         c == '*' || c == '+' || c == '.' || c == '^' || c == '`' || c == '|' || c == '~';
}

// One header line: a token, a colon, then visible characters, spaces or tabs.
bool header_ok(std::string_view line) {
  size_t colon = line.find(':');
  if (colon == 0 || colon == std::string_view::npos) return false;
  for (size_t i = 0; i < colon; ++i)
    if (!is_token_char(line[i])) return false;
  for (size_t i = colon + 1; i < line.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(line[i]);
    if (c < 0x20 && c != '\t') return false;
    if (c == 0x7f) return false;
  }
  return true;
}

}  // namespace

HttpRequest::State HttpRequest::feed(std::string_view bytes) {
  if (state_ != State::kIncomplete) return state_;
  // Only as much as can still belong to a head of kMaxHead bytes (plus its final CRLFCRLF).
  size_t room = kMaxHead + 4 - head_.size();
  head_.append(bytes.substr(0, room));
  size_t end = head_.find("\r\n\r\n");
  size_t end_lf = head_.find("\n\n");
  if (end == std::string::npos && end_lf == std::string::npos) {
    if (head_.size() > kMaxHead) state_ = State::kTooLarge;
    return state_;
  }
  size_t stop =
      end != std::string::npos && (end_lf == std::string::npos || end < end_lf) ? end : end_lf;
  if (stop > kMaxHead) return state_ = State::kTooLarge;
  head_.resize(stop);
  return state_ = parse_head();
}

HttpRequest::State HttpRequest::parse_head() {
  std::string_view h = head_;
  size_t eol = h.find('\n');
  std::string_view line = h.substr(0, eol);
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  // METHOD SP TARGET SP HTTP/1.x
  size_t sp1 = line.find(' ');
  if (sp1 == std::string_view::npos || sp1 == 0) return State::kBad;
  size_t sp2 = line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || sp2 == sp1 + 1) return State::kBad;
  std::string_view method = line.substr(0, sp1);
  std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  std::string_view version = line.substr(sp2 + 1);
  for (char c : method)
    if (!is_token_char(c)) return State::kBad;
  if (target.front() != '/') return State::kBad;
  for (char c : target) {
    unsigned char u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u >= 0x7f) return State::kBad;
  }
  if (version.substr(0, 5) != "HTTP/") return State::kBad;
  if (version != "HTTP/1.1" && version != "HTTP/1.0") return State::kBadVersion;
  // The header lines: well formed, nothing more is looked at.
  while (eol != std::string_view::npos) {
    h.remove_prefix(eol + 1);
    eol = h.find('\n');
    std::string_view l = h.substr(0, eol);
    if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
    if (l.empty()) break;
    if (!header_ok(l)) return State::kBad;
  }
  method_ = method;
  path_ = target.substr(0, target.find('?'));
  if (method_ != "GET" && method_ != "HEAD") return State::kNotAllowed;
  return State::kOk;
}

int HttpRequest::status_code(State s) {
  switch (s) {
    case State::kOk:
      return 200;
    case State::kTooLarge:
      return 431;
    case State::kNotAllowed:
      return 405;
    case State::kBadVersion:
      return 505;
    case State::kIncomplete:
    case State::kBad:
      break;
  }
  return 400;
}

const char* HttpRequest::reason(int code) {
  switch (code) {
    case 200:
      return "OK";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 431:
      return "Request Header Fields Too Large";
    case 503:
      return "Service Unavailable";
    case 505:
      return "HTTP Version Not Supported";
    default:
      return "Bad Request";
  }
}

}  // namespace vrdma::daemon::metrics
