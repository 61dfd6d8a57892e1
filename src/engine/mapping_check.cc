#include "engine/mapping_check.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdio>

namespace vrdma {

namespace {

// Walks the mappings that cover [start, end), in address order, while `take` accepts each
// (its line's fields); true when they cover the range without a gap.
template <typename Take>
bool covered(uint64_t start, uint64_t end, Take take) {
  if (start >= end) return false;
  FILE* maps = std::fopen("/proc/self/maps", "re");
  if (!maps) return false;
  uint64_t pos = start;
  char line[512];
  while (pos < end && std::fgets(line, sizeof line, maps)) {
    uint64_t lo = 0, hi = 0, offset = 0, inode = 0;
    unsigned major = 0, minor = 0;
    char perms[8] = {};
    if (std::sscanf(line, "%" SCNx64 "-%" SCNx64 " %7s %" SCNx64 " %x:%x %" SCNu64, &lo, &hi, perms,
                    &offset, &major, &minor, &inode) != 7)
      break;
    if (hi <= pos) continue;
    if (lo > pos) break;  // a hole
    if (!take(perms, major, minor, inode)) break;
    pos = hi;
  }
  std::fclose(maps);
  return pos >= end;
}

}  // namespace

bool range_maps_file(uint64_t start, uint64_t end, int fd) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return false;
  return covered(start, end, [&](const char*, unsigned major, unsigned minor, uint64_t inode) {
    return inode == st.st_ino && major == ::major(st.st_dev) && minor == ::minor(st.st_dev);
  });
}

bool range_readable(uint64_t start, uint64_t end) {
  return covered(start, end,
                 [](const char* perms, unsigned, unsigned, uint64_t) { return perms[0] == 'r'; });
}

}  // namespace vrdma
