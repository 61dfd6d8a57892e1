// The process's own memory and objects, reached as a peer reaches them: what the library's
// direct connections (engine/direct.h) use to execute requests from another host against this
// process's QPs, and to send from and place into its registered memory, through the same
// shm::Peer (and so the same checks, translations and settling after moved pages) as every
// other initiator. Descriptors come from what the process handed to vrdmad (Control::
// dup_handed); MRs are described from the process's own registry, which decides nothing a grant
// from vrdmad would not: the remote rights and protection domain checks are Peer's.
#pragma once

#include "shm/peer.h"

namespace vrdma {

class Control;
class MemoryRegistry;

class SelfSource : public shm::FdSource {
 public:
  SelfSource(Control& control, MemoryRegistry& memory) : control_(control), memory_(memory) {}
  int fetch_fd(uint32_t owner, uint32_t fd_id, uint32_t via_qpn, int& fd) override;
  int grant_mr(uint32_t owner, uint32_t via_qpn, uint32_t key, uint32_t access,
               shm::MrGrant& out) override {
    return grant_mr_range(owner, via_qpn, key, access, 0, 0, out);
  }
  int grant_mr_range(uint32_t owner, uint32_t via_qpn, uint32_t key, uint32_t access,
                     uint64_t addr, uint64_t length, shm::MrGrant& out) override;
  uint8_t* kept_mapping(uint32_t owner, uint32_t fd_id, uint64_t& size) override;

 private:
  Control& control_;
  MemoryRegistry& memory_;
};

}  // namespace vrdma
