// libFuzzer entry for the metrics endpoint's request parser (HttpRequest): the input is what a
// client sends, fed whole and cut into pieces of sizes taken from the input itself. Checks what
// the parser promises:
//   - the same bytes give the same answer however they are cut;
//   - once decided, the answer never changes, whatever comes after;
//   - an accepted request is GET or HEAD with a path that starts with '/' and holds no space,
//     control character or query string, and its head fitted in kMaxHead bytes.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "daemon/metrics/http_request.h"

namespace {

using vrdma::daemon::metrics::HttpRequest;

void check(bool ok) {
  if (!ok) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t step = data[0];
  std::string_view in(reinterpret_cast<const char*>(data + 1), size - 1);

  HttpRequest whole;
  const HttpRequest::State a = whole.feed(in);

  HttpRequest cut;
  HttpRequest::State b = HttpRequest::State::kIncomplete;
  size_t piece = step % 17 + 1;
  for (size_t pos = 0; pos < in.size(); pos += piece) {
    HttpRequest::State before = cut.state();
    b = cut.feed(in.substr(pos, piece));
    if (before != HttpRequest::State::kIncomplete) check(b == before);
  }
  check(a == b);
  if (a != HttpRequest::State::kIncomplete) check(whole.feed("\r\n\r\n") == a);

  if (a == HttpRequest::State::kOk) {
    check(whole.method() == "GET" || whole.method() == "HEAD");
    check(!whole.path().empty() && whole.path()[0] == '/');
    for (char c : whole.path()) {
      unsigned char u = static_cast<unsigned char>(c);
      check(u > 0x20 && u < 0x7f && c != '?');
    }
    check(whole.path() == cut.path() && whole.method() == cut.method());
  }
  return 0;
}
