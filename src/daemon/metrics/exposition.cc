#include "daemon/metrics/exposition.h"

#include <cmath>
#include <cstdio>

namespace vrdma::daemon::metrics {

std::string Exposition::escape(std::string_view v) {
  std::string s;
  s.reserve(v.size());
  for (char c : v) {
    if (c == '\\')
      s += "\\\\";
    else if (c == '"')
      s += "\\\"";
    else if (c == '\n')
      s += "\\n";
    else
      s += c;
  }
  return s;
}

void Exposition::family(std::string_view name, Type type, std::string_view help) {
  name_ = name;
  out_ += "# HELP ";
  out_ += name;
  out_ += ' ';
  for (char c : help) {  // HELP escapes backslash and newline only
    if (c == '\\')
      out_ += "\\\\";
    else if (c == '\n')
      out_ += "\\n";
    else
      out_ += c;
  }
  out_ += "\n# TYPE ";
  out_ += name;
  out_ += type == Type::kCounter ? " counter\n" : " gauge\n";
}

void Exposition::labels_of(const Labels& labels) {
  out_ += name_;
  if (labels.empty()) return;
  out_ += '{';
  bool first = true;
  for (const auto& [k, v] : labels) {
    if (!first) out_ += ',';
    first = false;
    out_ += k;
    out_ += "=\"";
    out_ += escape(v);
    out_ += '"';
  }
  out_ += '}';
}

void Exposition::sample(const Labels& labels, uint64_t value) {
  labels_of(labels);
  out_ += ' ';
  out_ += std::to_string(value);
  out_ += '\n';
}

void Exposition::sample(const Labels& labels, double value) {
  labels_of(labels);
  char buf[64];
  if (std::isnan(value))
    std::snprintf(buf, sizeof(buf), " NaN\n");
  else if (std::isinf(value))
    std::snprintf(buf, sizeof(buf), value > 0 ? " +Inf\n" : " -Inf\n");
  else
    std::snprintf(buf, sizeof(buf), " %.9g\n", value);
  out_ += buf;
}

}  // namespace vrdma::daemon::metrics
