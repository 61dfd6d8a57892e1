// Errors of the vrdma CLI. Commands throw; main prints "vrdma <command>: <what>"
// and maps the exception to the exit code.
#pragma once

#include <cstring>
#include <stdexcept>
#include <string>

namespace vrdma::ctl {

inline constexpr int kExitOk = 0;
inline constexpr int kExitError = 1;
inline constexpr int kExitUsage = 2;

// A failure of the command: exit code 1.
struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Wrong arguments that the parser could not catch: exit code 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// "text: strerror(err)".
inline std::string errno_text(const std::string& text, int err) {
  return text + ": " + std::strerror(err);
}

}  // namespace vrdma::ctl
