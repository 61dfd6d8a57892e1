// Prometheus text exposition format 0.0.4: families (HELP, TYPE) and their samples. A small
// serializer of our own rather than prometheus-cpp: vrdmad renders a scrape from counters it
// reads on demand, in its own event loop, and needs neither a registry of live metric objects
// nor a second HTTP server with threads of its own.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace vrdma::daemon::metrics {

inline constexpr const char* kContentType = "text/plain; version=0.0.4; charset=utf-8";

enum class Type { kCounter, kGauge };

using Labels = std::vector<std::pair<std::string_view, std::string>>;

class Exposition {
 public:
  // Starts a family. Every family name is given once; samples follow until the next family.
  void family(std::string_view name, Type type, std::string_view help);
  void sample(const Labels& labels, double value);
  void sample(const Labels& labels, uint64_t value);
  const std::string& text() const { return out_; }

  // A label value as the format wants it: backslash, double quote and newline escaped.
  static std::string escape(std::string_view v);

 private:
  void labels_of(const Labels& labels);
  std::string out_;
  std::string name_;
};

}  // namespace vrdma::daemon::metrics
