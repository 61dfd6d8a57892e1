// Touching memory another process can truncate: a shared file that shrinks under a mapping
// raises SIGBUS on access. Accesses made through guarded() turn that into a failed access
// instead of a dead process. Used wherever one process reads or writes another's memory.
#pragma once

namespace vrdma::shm {

// Installs the process-wide SIGBUS handler the guard relies on. Idempotent and thread-safe. A
// SIGBUS outside a guarded access goes to the handler that was there before (or kills the
// process, as it would have).
void install_sigbus_guard();

// Runs fn(ctx); false if it raised SIGBUS. fn must not allocate, take locks or throw: a fault
// leaves it with siglongjmp.
bool guarded(void (*fn)(void*), void* ctx);

// guarded() for a capture-less or capturing callable: guarded_call([&] { ... }).
template <typename F>
bool guarded_call(F&& f) {
  return guarded([](void* c) { (*static_cast<F*>(c))(); }, &f);
}

}  // namespace vrdma::shm
