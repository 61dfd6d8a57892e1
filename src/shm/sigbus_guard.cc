#include "shm/sigbus_guard.h"

#include <setjmp.h>
#include <signal.h>

#include <mutex>

namespace vrdma::shm {

namespace {

thread_local sigjmp_buf* t_guard = nullptr;
struct sigaction g_previous_bus {};

void on_sigbus(int sig, siginfo_t* info, void* ctx) {
  if (sigjmp_buf* jb = t_guard) siglongjmp(*jb, 1);
  // Not ours: behave as if we were never installed.
  if (g_previous_bus.sa_flags & SA_SIGINFO) {
    if (g_previous_bus.sa_sigaction) return g_previous_bus.sa_sigaction(sig, info, ctx);
  } else if (g_previous_bus.sa_handler != SIG_DFL && g_previous_bus.sa_handler != SIG_IGN &&
             g_previous_bus.sa_handler != nullptr) {
    return g_previous_bus.sa_handler(sig);
  }
  signal(sig, SIG_DFL);
  raise(sig);
}

}  // namespace

void install_sigbus_guard() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa {};
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGBUS, &sa, &g_previous_bus);
  });
}

bool guarded(void (*fn)(void*), void* ctx) {
  sigjmp_buf jb;
  sigjmp_buf* volatile previous = t_guard;
  if (sigsetjmp(jb, 1) != 0) {
    t_guard = previous;
    return false;
  }
  t_guard = &jb;
  fn(ctx);
  t_guard = previous;
  return true;
}

}  // namespace vrdma::shm
