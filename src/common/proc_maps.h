// One process's mappings as /proc/PID/maps lists them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace vrdma {

struct Mapping {
  uint64_t start = 0, end = 0;  // [start, end), page-aligned
  char perms[5] = {};           // "rw-s", "r-xp", ...
  uint64_t offset = 0;          // in the mapped file, of `start`
  unsigned major = 0, minor = 0;
  uint64_t inode = 0;
  std::string path;  // the file's name as the kernel gives it ("" for anonymous memory)

  bool shared() const { return perms[3] == 's'; }
  bool writable() const { return perms[1] == 'w'; }
  // A shared, writable mapping of a System V segment (the kernel names its file "/SYSV" and the
  // key): what a registration leaves in place (AdoptMemory).
  bool sysv_segment() const { return shared() && writable() && path.rfind("/SYSV", 0) == 0; }
  // Anonymous huge pages (MAP_HUGETLB): the kernel names their file "/anon_hugepage".
  bool huge_pages() const { return path.rfind("/anon_hugepage", 0) == 0; }
};

// Parses one line of a maps file. False when it is not one.
bool parse_maps_line(const char* line, Mapping& out);

// The mapping of `maps_path` (e.g. "/proc/self/maps") that contains `addr`. False when none
// does or the file cannot be read.
bool find_mapping(const char* maps_path, uint64_t addr, Mapping& out);

// The mappings of `maps_path` that overlap [start, end), in address order (empty when the file
// cannot be read).
std::vector<Mapping> mappings_over(const char* maps_path, uint64_t start, uint64_t end);

}  // namespace vrdma
