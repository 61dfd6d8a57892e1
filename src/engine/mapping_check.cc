#include "engine/mapping_check.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdio>

namespace vrdma {

bool range_maps_file(uint64_t start, uint64_t end, int fd) {
  struct stat st;
  if (start >= end || ::fstat(fd, &st) != 0) return false;
  FILE* maps = std::fopen("/proc/self/maps", "re");
  if (!maps) return false;
  // Lines are sorted by address: walk them until [start, end) is covered without a gap.
  uint64_t pos = start;
  char line[512];
  while (pos < end && std::fgets(line, sizeof line, maps)) {
    uint64_t lo = 0, hi = 0, offset = 0, inode = 0;
    unsigned major = 0, minor = 0;
    if (std::sscanf(line, "%" SCNx64 "-%" SCNx64 " %*s %" SCNx64 " %x:%x %" SCNu64, &lo, &hi,
                    &offset, &major, &minor, &inode) != 6)
      break;
    if (hi <= pos) continue;
    if (lo > pos) break;  // a hole
    if (inode != st.st_ino || major != ::major(st.st_dev) || minor != ::minor(st.st_dev)) break;
    pos = hi;
  }
  std::fclose(maps);
  return pos >= end;
}

}  // namespace vrdma
