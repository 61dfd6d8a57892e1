// Text output helpers: aligned tables and human-readable quantities.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace vrdma::ctl {

// Columns separated by two spaces, each as wide as its widest cell; the last
// column is not padded.
class Table {
 public:
  explicit Table(std::vector<std::string> header) : rows_{std::move(header)} {}
  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  void print(std::ostream& out, const std::string& indent = "") const;

 private:
  std::vector<std::vector<std::string>> rows_;
};

std::string human_bytes(uint64_t bytes);    // "512 B", "4.0 KiB", "1.5 GiB"
std::string human_duration(uint64_t secs);  // "42s", "5m03s", "2h05m", "3d04h"
// "1 client", "2 clients"; `words` defaults to word + "s".
std::string plural(uint64_t n, const std::string& word, const std::string& words = "");

}  // namespace vrdma::ctl
