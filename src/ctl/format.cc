#include "ctl/format.h"

#include <algorithm>
#include <cstdio>

namespace vrdma::ctl {

void Table::print(std::ostream& out, const std::string& indent) const {
  std::vector<size_t> width;
  for (const auto& row : rows_) {
    if (width.size() < row.size()) width.resize(row.size(), 0);
    for (size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  }
  for (const auto& row : rows_) {
    std::string line = indent;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line += std::string(width[i] - row[i].size() + 2, ' ');
    }
    out << line << "\n";
  }
}

std::string human_bytes(uint64_t bytes) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 5) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f %s", v, units[u]);
  return buf;
}

std::string human_duration(uint64_t secs) {
  char buf[32];
  if (secs < 60)
    std::snprintf(buf, sizeof(buf), "%llus", static_cast<unsigned long long>(secs));
  else if (secs < 3600)
    std::snprintf(buf, sizeof(buf), "%llum%02llus", static_cast<unsigned long long>(secs / 60),
                  static_cast<unsigned long long>(secs % 60));
  else if (secs < 86400)
    std::snprintf(buf, sizeof(buf), "%lluh%02llum", static_cast<unsigned long long>(secs / 3600),
                  static_cast<unsigned long long>(secs / 60 % 60));
  else
    std::snprintf(buf, sizeof(buf), "%llud%02lluh", static_cast<unsigned long long>(secs / 86400),
                  static_cast<unsigned long long>(secs / 3600 % 24));
  return buf;
}

std::string plural(uint64_t n, const std::string& word, const std::string& words) {
  return std::to_string(n) + " " + (n == 1 ? word : words.empty() ? word + "s" : words);
}

}  // namespace vrdma::ctl
