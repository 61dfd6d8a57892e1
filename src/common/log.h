// Logging (vrdmad and the tools): one line per event on stderr,
// "<UTC timestamp> <LEVEL> <program>[pid]: text".
#pragma once

#include <atomic>
#include <cstdint>
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

// How often one log statement may write: a burst of kBurst lines in each window of kWindowNs,
// then nothing until the next window, whose first line says how many were held back. Every
// statement has its own (LOG_ERROR, LOG_WARN, LOG_INFO below), so that a client or peer that
// provokes one line a million times writes a few lines a second, and the others go on.
class LogLimit {
 public:
  static constexpr uint32_t kBurst = 20;
  static constexpr int64_t kWindowNs = 10'000'000'000;
  constexpr LogLimit() = default;
  // Whether a line may be written at `now_ns`; if so, *suppressed is how many were held back
  // since the last one written.
  bool admit(int64_t now_ns, uint64_t* suppressed);

 private:
  std::atomic<int64_t> window_{-1};  // its start (ns; -1: none yet)
  std::atomic<uint32_t> used_{0};
  std::atomic<uint64_t> held_{0};
};

// log(), through `limit`: a line held back is counted; the next one written says how many.
void log_limited(LogLimit& limit, LogLevel level, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));

}  // namespace vrdma

// Debug lines, which an operator asks for, are not limited.
#define VRDMAD_LOG(level, ...)                                               \
  do {                                                                       \
    if (static_cast<int>(level) <= static_cast<int>(::vrdma::log_level())) { \
      if ((level) == ::vrdma::LogLevel::kDebug) {                            \
        ::vrdma::log(level, __VA_ARGS__);                                    \
      } else {                                                               \
        static ::vrdma::LogLimit vrdma_log_limit_;                           \
        ::vrdma::log_limited(vrdma_log_limit_, level, __VA_ARGS__);          \
      }                                                                      \
    }                                                                        \
  } while (0)
#define LOG_ERROR(...) VRDMAD_LOG(::vrdma::LogLevel::kError, __VA_ARGS__)
#define LOG_WARN(...) VRDMAD_LOG(::vrdma::LogLevel::kWarn, __VA_ARGS__)
#define LOG_INFO(...) VRDMAD_LOG(::vrdma::LogLevel::kInfo, __VA_ARGS__)
#define LOG_DEBUG(...) VRDMAD_LOG(::vrdma::LogLevel::kDebug, __VA_ARGS__)
