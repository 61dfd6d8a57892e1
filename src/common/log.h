// Logging (vrdmad and the tools): one line per event on stderr,
// "<UTC timestamp> <LEVEL> <program>[pid]: text".
#pragma once

#include <optional>
#include <string_view>

namespace vrdma {

enum class LogLevel { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };

// The program name in every line ("vrdmad" unless set); `name` must outlive the process.
void set_log_program(const char* name);
void set_log_level(LogLevel level);
LogLevel log_level();
std::optional<LogLevel> parse_log_level(std::string_view name);

// printf-style; the line is written with a single write(2) so that lines from
// concurrent writers never interleave.
void log(LogLevel level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

}  // namespace vrdma

#define VRDMAD_LOG(level, ...)                                             \
  do {                                                                     \
    if (static_cast<int>(level) <= static_cast<int>(::vrdma::log_level())) \
      ::vrdma::log(level, __VA_ARGS__);                                    \
  } while (0)
#define LOG_ERROR(...) VRDMAD_LOG(::vrdma::LogLevel::kError, __VA_ARGS__)
#define LOG_WARN(...) VRDMAD_LOG(::vrdma::LogLevel::kWarn, __VA_ARGS__)
#define LOG_INFO(...) VRDMAD_LOG(::vrdma::LogLevel::kInfo, __VA_ARGS__)
#define LOG_DEBUG(...) VRDMAD_LOG(::vrdma::LogLevel::kDebug, __VA_ARGS__)
