// Asymmetric fences: a store-then-load ordering that one side needs on every message and the
// other side only rarely. The placement of a message must be visible before its sender reads
// the owner's KeyTable::moves, and the owner's increment of moves before it copies pages
// (settle.h). A full fence on every message costs more than the copy of a small one. Instead the
// owner, which moves pages only when it registers or deregisters, makes every running thread of
// every registered process execute a barrier (membarrier(2), MEMBARRIER_CMD_GLOBAL_EXPEDITED),
// and the senders then need only keep the compiler from reordering.
#pragma once

namespace vrdma::shm {

// Registers this process for the barriers other processes issue (once; thread-safe). True when
// it is registered: a barrier an owner issues reaches its threads.
bool receives_heavy_fences();

// Whether this process can issue the barrier (the kernel offers it and the seccomp profile lets
// it through).
bool can_issue_heavy_fence();

// The barrier: every running thread of every registered process executes a full fence before
// this returns. False when it failed.
bool heavy_fence();

}  // namespace vrdma::shm
