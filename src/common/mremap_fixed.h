// mremap with MREMAP_FIXED through the system call itself, not libc's mremap symbol.
//
// Libraries that intercept libc's memory calls may not pass mremap's fifth argument on: UCX
// 1.13's memory hooks (UCM) replace mremap with a four-argument function, so a fixed move
// called through libc lands at whatever the fifth register held. Pages moved into place
// (registrations, peers' memory) must land where they were asked to.
#pragma once

#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstddef>

namespace vrdma {

// Moves [old_addr, old_addr + old_len) to `at` with length new_len (MREMAP_MAYMOVE |
// MREMAP_FIXED), replacing what was mapped there. MAP_FAILED and errno on failure.
inline void* mremap_fixed(void* old_addr, size_t old_len, size_t new_len, void* at) {
  long r = ::syscall(SYS_mremap, old_addr, old_len, new_len, MREMAP_MAYMOVE | MREMAP_FIXED, at);
  return r == -1 ? MAP_FAILED : reinterpret_cast<void*>(r);
}

}  // namespace vrdma
