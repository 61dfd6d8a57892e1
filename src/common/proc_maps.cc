#include "common/proc_maps.h"

#include <cinttypes>
#include <cstdio>
#include <cstring>

namespace vrdma {

bool parse_maps_line(const char* line, Mapping& out) {
  int path_at = 0;
  Mapping m;
  if (std::sscanf(line, "%" SCNx64 "-%" SCNx64 " %4s %" SCNx64 " %x:%x %" SCNu64 " %n", &m.start,
                  &m.end, m.perms, &m.offset, &m.major, &m.minor, &m.inode, &path_at) != 7)
    return false;
  if (path_at > 0) {
    const char* p = line + path_at;
    size_t n = std::strcspn(p, "\n");
    m.path.assign(p, n);
  }
  out = std::move(m);
  return true;
}

bool find_mapping(const char* maps_path, uint64_t addr, Mapping& out) {
  FILE* maps = std::fopen(maps_path, "re");
  if (!maps) return false;
  char line[4096 + 128];
  bool found = false;
  while (!found && std::fgets(line, sizeof line, maps)) {
    Mapping m;
    if (!parse_maps_line(line, m)) break;
    if (m.start <= addr && addr < m.end) {
      out = std::move(m);
      found = true;
    }
  }
  std::fclose(maps);
  return found;
}

std::vector<Mapping> mappings_over(const char* maps_path, uint64_t start, uint64_t end) {
  std::vector<Mapping> out;
  FILE* maps = std::fopen(maps_path, "re");
  if (!maps) return out;
  char line[4096 + 128];
  while (std::fgets(line, sizeof line, maps)) {
    Mapping m;
    if (!parse_maps_line(line, m)) break;
    if (m.start >= end) break;
    if (m.end > start) out.push_back(std::move(m));
  }
  std::fclose(maps);
  return out;
}

}  // namespace vrdma
