#include "common/cpu_list.h"

#include <sched.h>

#include <algorithm>
#include <charconv>

namespace vrdma {

namespace {

bool parse_cpu(std::string_view s, uint32_t* cpu) {
  if (s.empty() || s.size() > 4) return false;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *cpu);
  return ec == std::errc() && end == s.data() + s.size();
}

}  // namespace

std::optional<std::vector<uint32_t>> parse_cpu_list(std::string_view text, std::string* error) {
  const std::string quoted = "'" + std::string(text) + "'";
  if (text.empty()) {
    *error = "an empty CPU list (expected e.g. 0-3,6)";
    return std::nullopt;
  }
  std::vector<uint32_t> cpus;
  while (true) {
    const size_t comma = text.find(',');
    const std::string_view item = text.substr(0, comma);
    const size_t dash = item.find('-');
    uint32_t lo = 0, hi = 0;
    const bool ok = dash == std::string_view::npos
                        ? parse_cpu(item, &lo) && (hi = lo, true)
                        : parse_cpu(item.substr(0, dash), &lo) &&
                              parse_cpu(item.substr(dash + 1), &hi);
    if (!ok) {
      *error = "expected CPU numbers and ranges such as 0-3,6 in " + quoted + ", not '" +
               std::string(item) + "'";
      return std::nullopt;
    }
    if (lo > hi) {
      *error = "the range '" + std::string(item) + "' in " + quoted + " runs backwards";
      return std::nullopt;
    }
    if (hi >= kMaxCpus) {
      *error = "CPU " + std::to_string(hi) + " in " + quoted + ": CPUs are numbered below " +
               std::to_string(kMaxCpus);
      return std::nullopt;
    }
    for (uint32_t c = lo; c <= hi; ++c) cpus.push_back(c);
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  return cpus;
}

std::string cpu_list_text(const std::vector<uint32_t>& cpus) {
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(cpus[i]);
    if (j > i) out += '-' + std::to_string(cpus[j]);
    i = j + 1;
  }
  return out;
}

std::vector<uint32_t> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<uint32_t> out;
  if (::sched_getaffinity(0, sizeof(set), &set) != 0) return out;
  for (uint32_t c = 0; c < kMaxCpus && c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) out.push_back(c);
  return out;
}

}  // namespace vrdma
