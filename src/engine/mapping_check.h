// Whether a range of the process's address space is still mapped from a given file, or readable.
//
// A registration moves its pages into a shared file; the application may unmap them (or map
// something else there) before it deregisters, as it may with any RDMA device, where an MR
// keeps its pages whatever happens to the mapping. Deregistration moves the pages back only if
// they are still the file's, and never touches what the application put there since.
#pragma once

#include <cstdint>

namespace vrdma {

// True if every page of [start, end) is mapped from the file open at `fd` (by device and inode,
// as /proc/self/maps lists them). False when any page is unmapped or mapped from elsewhere, or
// when the answer cannot be read.
bool range_maps_file(uint64_t start, uint64_t end, int fd);

// True if every page of [start, end) is mapped readable (as /proc/self/maps lists them). False
// when any page is unmapped or not readable, or when the answer cannot be read.
bool range_readable(uint64_t start, uint64_t end);

}  // namespace vrdma
