#include "common/log.h"

#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdarg>
#include <cstdio>

namespace vrdma {

namespace {
std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};
std::atomic<const char*> g_program{"vrdmad"};

const char* level_name(LogLevel level) {
  switch (level) {
    case LogLevel::kError:
      return "ERROR";
    case LogLevel::kWarn:
      return "WARN";
    case LogLevel::kInfo:
      return "INFO";
    case LogLevel::kDebug:
      return "DEBUG";
  }
  return "?";
}
}  // namespace

void set_log_program(const char* name) {
  g_program.store(name);
}

void set_log_level(LogLevel level) {
  g_level.store(static_cast<int>(level));
}
LogLevel log_level() {
  return static_cast<LogLevel>(g_level.load(std::memory_order_relaxed));
}

std::optional<LogLevel> parse_log_level(std::string_view name) {
  if (name == "error") return LogLevel::kError;
  if (name == "warn") return LogLevel::kWarn;
  if (name == "info") return LogLevel::kInfo;
  if (name == "debug") return LogLevel::kDebug;
  return std::nullopt;
}

void log(LogLevel level, const char* fmt, ...) {
  char line[1024];
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  tm t{};
  ::gmtime_r(&ts.tv_sec, &t);
  int n = std::snprintf(
      line, sizeof(line), "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %-5s %s[%d]: ", t.tm_year + 1900,
      t.tm_mon + 1, t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec, ts.tv_nsec / 1000000,
      level_name(level), g_program.load(), static_cast<int>(::getpid()));
  if (n < 0) return;
  size_t used = static_cast<size_t>(n) < sizeof(line) ? static_cast<size_t>(n) : sizeof(line) - 1;
  va_list ap;
  va_start(ap, fmt);
  int m = std::vsnprintf(line + used, sizeof(line) - used, fmt, ap);
  va_end(ap);
  if (m > 0)
    used += static_cast<size_t>(m) < sizeof(line) - used ? static_cast<size_t>(m)
                                                         : sizeof(line) - used - 1;
  // Keep one event on one line even if a client-controlled string held a newline.
  for (size_t i = 0; i < used; ++i)
    if (line[i] == '\n' || line[i] == '\r') line[i] = ' ';
  if (used >= sizeof(line) - 1) used = sizeof(line) - 2;
  line[used++] = '\n';
  ssize_t rc = ::write(STDERR_FILENO, line, used);
  (void)rc;
}

}  // namespace vrdma
