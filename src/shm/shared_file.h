// Descriptors another process handed over, checked before anyone maps them. A file that can
// shrink under a mapping turns every later access into SIGBUS; a file that can grow was sized
// by someone else. So a shared file must be a memfd (shmem, not hugetlbfs) sealed against
// shrinking and growing, and it is mapped whole at the size fstat reports, never at a size a
// client announced. Once those seals are checked the size can never change, so a mapping made
// from it stays valid for as long as it exists: the data paths that use it cannot fault.
#pragma once

#include <cstdint>

namespace vrdma::shm {

// Creates a memfd of `size` bytes sealed against shrinking and growing (and against further
// seals unless `more_seals` is true). 0 and the descriptor, or a positive errno.
int create_sealed(const char* name, uint64_t size, bool more_seals, int& fd);

// Whether fd is a shmem file sealed against shrinking and growing, of at most `max_size` bytes
// (and at least one page). 0 and its size, or a positive errno: EBADF (not a regular file),
// EPERM (not sealed), EINVAL (hugetlbfs, empty), EFBIG (too large).
int check_sealed(int fd, uint64_t max_size, uint64_t& size);

// A System V shared memory segment's file (opened by vrdmad through /proc/PID/map_files of a
// process that maps it shared and writable): its size was fixed when it was created and no
// call of the System V interface changes it. Only a process holding a descriptor of it could
// (ftruncate), and only vrdmad hands such descriptors out. 0 and its size, or a positive
// errno as check_sealed() gives.
int check_sysv_segment(int fd, uint64_t max_size, uint64_t& size);

// The files registered memory may live in: check_sealed(), or check_sysv_segment() (a
// registration over a System V segment leaves its pages where they are, shared as the
// program shared them).
int check_memory_file(int fd, uint64_t max_size, uint64_t& size);

// Whether the file refuses new writable mappings (F_SEAL_FUTURE_WRITE or F_SEAL_WRITE).
bool write_sealed(int fd);

// check_sealed(), then maps the whole file shared with `prot`. 0 and the mapping, or a positive
// errno (EACCES when the descriptor or a seal does not allow `prot`).
int map_sealed(int fd, int prot, uint64_t max_size, void*& base, uint64_t& size);

// Opens a second descriptor of the same file, read-only (through /proc/self/fd). -1 and errno
// on failure. The kernel refuses to map it writable; a process that may reopen the file itself
// for writing is stopped only by a write seal on the file.
int reopen_read_only(int fd);

}  // namespace vrdma::shm
