// Failing stubs for the rsocket API (r* socket calls, <rdma/rsocket.h>) of
// the drop-in librdmacm.so.1. rdmacm-utils binaries import several of these
// (BIND_NOW), so they must exist; every call fails with errno = ENOSYS.
// Version nodes come from librdmacm.map (all RDMACM_1.0).

#include <errno.h>

#include <rdma/rsocket.h>

#include "export.h"

namespace {

template <typename T = int>
T fail() {
  errno = ENOSYS;
  return static_cast<T>(-1);
}

}  // namespace

extern "C" {

VRDMA_EXPORT int rsocket(int /*domain*/, int /*type*/, int /*protocol*/) { return fail(); }

VRDMA_EXPORT int rbind(int /*socket*/, const struct sockaddr * /*addr*/,
                       socklen_t /*addrlen*/) {
  return fail();
}

VRDMA_EXPORT int rlisten(int /*socket*/, int /*backlog*/) { return fail(); }

VRDMA_EXPORT int raccept(int /*socket*/, struct sockaddr * /*addr*/, socklen_t * /*addrlen*/) {
  return fail();
}

VRDMA_EXPORT int rconnect(int /*socket*/, const struct sockaddr * /*addr*/,
                          socklen_t /*addrlen*/) {
  return fail();
}

VRDMA_EXPORT int rshutdown(int /*socket*/, int /*how*/) { return fail(); }

VRDMA_EXPORT int rclose(int /*socket*/) { return fail(); }

VRDMA_EXPORT ssize_t rrecv(int /*socket*/, void * /*buf*/, size_t /*len*/, int /*flags*/) {
  return fail<ssize_t>();
}

VRDMA_EXPORT ssize_t rrecvfrom(int /*socket*/, void * /*buf*/, size_t /*len*/, int /*flags*/,
                               struct sockaddr * /*src_addr*/, socklen_t * /*addrlen*/) {
  return fail<ssize_t>();
}

VRDMA_EXPORT ssize_t rrecvmsg(int /*socket*/, struct msghdr * /*msg*/, int /*flags*/) {
  return fail<ssize_t>();
}

VRDMA_EXPORT ssize_t rsend(int /*socket*/, const void * /*buf*/, size_t /*len*/, int /*flags*/) {
  return fail<ssize_t>();
}

VRDMA_EXPORT ssize_t rsendto(int /*socket*/, const void * /*buf*/, size_t /*len*/, int /*flags*/,
                             const struct sockaddr * /*dest_addr*/, socklen_t /*addrlen*/) {
  return fail<ssize_t>();
}

VRDMA_EXPORT ssize_t rsendmsg(int /*socket*/, const struct msghdr * /*msg*/, int /*flags*/) {
  return fail<ssize_t>();
}

VRDMA_EXPORT ssize_t rread(int /*socket*/, void * /*buf*/, size_t /*count*/) {
  return fail<ssize_t>();
}

VRDMA_EXPORT ssize_t rreadv(int /*socket*/, const struct iovec * /*iov*/, int /*iovcnt*/) {
  return fail<ssize_t>();
}

VRDMA_EXPORT ssize_t rwrite(int /*socket*/, const void * /*buf*/, size_t /*count*/) {
  return fail<ssize_t>();
}

VRDMA_EXPORT ssize_t rwritev(int /*socket*/, const struct iovec * /*iov*/, int /*iovcnt*/) {
  return fail<ssize_t>();
}

VRDMA_EXPORT int rpoll(struct pollfd * /*fds*/, nfds_t /*nfds*/, int /*timeout*/) {
  return fail();
}

VRDMA_EXPORT int rselect(int /*nfds*/, fd_set * /*readfds*/, fd_set * /*writefds*/,
                         fd_set * /*exceptfds*/, struct timeval * /*timeout*/) {
  return fail();
}

VRDMA_EXPORT int rgetpeername(int /*socket*/, struct sockaddr * /*addr*/,
                              socklen_t * /*addrlen*/) {
  return fail();
}

VRDMA_EXPORT int rgetsockname(int /*socket*/, struct sockaddr * /*addr*/,
                              socklen_t * /*addrlen*/) {
  return fail();
}

VRDMA_EXPORT int rsetsockopt(int /*socket*/, int /*level*/, int /*optname*/,
                             const void * /*optval*/, socklen_t /*optlen*/) {
  return fail();
}

VRDMA_EXPORT int rgetsockopt(int /*socket*/, int /*level*/, int /*optname*/, void * /*optval*/,
                             socklen_t * /*optlen*/) {
  return fail();
}

VRDMA_EXPORT int rfcntl(int /*socket*/, int /*cmd*/, ...) { return fail(); }

VRDMA_EXPORT off_t riomap(int /*socket*/, void * /*buf*/, size_t /*len*/, int /*prot*/,
                          int /*flags*/, off_t /*offset*/) {
  return fail<off_t>();
}

VRDMA_EXPORT int riounmap(int /*socket*/, void * /*buf*/, size_t /*len*/) { return fail(); }

// Like rdma-core, an error is reported as (size_t)-1.
VRDMA_EXPORT size_t riowrite(int /*socket*/, const void * /*buf*/, size_t /*count*/,
                             off_t /*offset*/, int /*flags*/) {
  return fail<size_t>();
}

}  // extern "C"
