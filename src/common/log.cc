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

namespace {

void vlog(LogLevel level, uint64_t suppressed, const char* fmt, va_list ap) {
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
  auto append = [&](int m) {
    if (m > 0)
      used += static_cast<size_t>(m) < sizeof(line) - used ? static_cast<size_t>(m)
                                                           : sizeof(line) - used - 1;
  };
  append(std::vsnprintf(line + used, sizeof(line) - used, fmt, ap));
  if (suppressed)
    append(std::snprintf(line + used, sizeof(line) - used,
                         " (%llu more like this held back before it)",
                         static_cast<unsigned long long>(suppressed)));
  // Keep one event on one line even if a client-controlled string held a newline.
  for (size_t i = 0; i < used; ++i)
    if (line[i] == '\n' || line[i] == '\r') line[i] = ' ';
  if (used >= sizeof(line) - 1) used = sizeof(line) - 2;
  line[used++] = '\n';
  ssize_t rc = ::write(STDERR_FILENO, line, used);
  (void)rc;
}

int64_t monotonic_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

}  // namespace

void log(LogLevel level, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vlog(level, 0, fmt, ap);
  va_end(ap);
}

bool LogLimit::admit(int64_t now_ns, uint64_t* suppressed) {
  int64_t w = window_.load(std::memory_order_relaxed);
  if (w < 0 || now_ns < w || now_ns - w >= kWindowNs) {
    // A new window (one thread opens it; the others count in it).
    if (window_.compare_exchange_strong(w, now_ns, std::memory_order_relaxed))
      used_.store(0, std::memory_order_relaxed);
  }
  if (used_.fetch_add(1, std::memory_order_relaxed) < kBurst) {
    *suppressed = held_.exchange(0, std::memory_order_relaxed);
    return true;
  }
  held_.fetch_add(1, std::memory_order_relaxed);
  return false;
}

void log_limited(LogLimit& limit, LogLevel level, const char* fmt, ...) {
  uint64_t suppressed = 0;
  if (!limit.admit(monotonic_ns(), &suppressed)) return;
  va_list ap;
  va_start(ap, fmt);
  vlog(level, suppressed, fmt, ap);
  va_end(ap);
}

}  // namespace vrdma
