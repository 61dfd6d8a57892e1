#include "engine/self_source.h"

#include <errno.h>

#include "engine/control.h"
#include "engine/memory.h"

namespace vrdma {

int SelfSource::fetch_fd(uint32_t /*owner*/, uint32_t fd_id, uint32_t /*via_qpn*/, int& fd) {
  fd = control_.dup_handed(fd_id);
  return fd < 0 ? ENOENT : 0;
}

int SelfSource::grant_mr_range(uint32_t /*owner*/, uint32_t /*via_qpn*/, uint32_t key,
                               uint32_t access, uint64_t addr, uint64_t length,
                               shm::MrGrant& out) {
  return memory_.grant(key, access, addr, length, out);
}

uint8_t* SelfSource::kept_mapping(uint32_t /*owner*/, uint32_t fd_id, uint64_t& size) {
  return memory_.own_mapping(fd_id, size);
}

}  // namespace vrdma
