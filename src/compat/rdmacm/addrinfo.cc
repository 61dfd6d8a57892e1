// rdma_getaddrinfo / rdma_freeaddrinfo for IPv4: numeric addresses and host names (through
// getaddrinfo), service names or numbers as ports, or the hints' addresses alone. Errors are
// getaddrinfo's codes.
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

namespace {

// One IPv4 address (node may be NULL: the wildcard) and port. 0 or an EAI_* code.
int lookup(const char* node, const char* service, bool passive, sockaddr_in* out) {
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  if (passive) hints.ai_flags |= AI_PASSIVE;
  int rc = getaddrinfo(node, service, &hints, &res);
  if (rc) return rc;
  memcpy(out, res->ai_addr, sizeof(*out));
  freeaddrinfo(res);
  return 0;
}

sockaddr* copy_addr(const void* sa, size_t len) {
  void* p = calloc(1, len);
  if (p) memcpy(p, sa, len);
  return static_cast<sockaddr*>(p);
}

// A hint's address: IPv4, the only family vrdma's rdma_cm serves.
bool ipv4_hint(const sockaddr* sa, socklen_t len) {
  return len >= sizeof(sockaddr_in) && sa->sa_family == AF_INET;
}

}  // namespace

extern "C" {

VRDMA_EXPORT int rdma_getaddrinfo(const char* node, const char* service,
                                  const struct rdma_addrinfo* hints,
                                  struct rdma_addrinfo** res) {
  // Without node and service, the addresses come from the hints alone (as rdma-core: libfabric
  // asks so with the address it was given).
  bool hint_src = hints && hints->ai_src_addr && hints->ai_src_len;
  bool hint_dst = hints && hints->ai_dst_addr && hints->ai_dst_len;
  if (!res || (!node && !service && !hint_src && !hint_dst)) return EAI_NONAME;
  *res = nullptr;
  if (hints && hints->ai_family && hints->ai_family != AF_INET) return EAI_FAMILY;
  if ((hint_src && !ipv4_hint(hints->ai_src_addr, hints->ai_src_len)) ||
      (hint_dst && !ipv4_hint(hints->ai_dst_addr, hints->ai_dst_len)))
    return EAI_FAMILY;
  auto* rai = static_cast<rdma_addrinfo*>(calloc(1, sizeof(rdma_addrinfo)));
  if (!rai) return EAI_MEMORY;
  rai->ai_flags = hints ? hints->ai_flags : 0;
  rai->ai_family = AF_INET;
  rai->ai_port_space = hints && hints->ai_port_space ? hints->ai_port_space : RDMA_PS_TCP;
  rai->ai_qp_type = hints && hints->ai_qp_type
                        ? hints->ai_qp_type
                        : (rai->ai_port_space == RDMA_PS_UDP ? IBV_QPT_UD : IBV_QPT_RC);
  bool passive = rai->ai_flags & RAI_PASSIVE;
  if (node || service) {
    sockaddr_in sin{};
    int rc = lookup(node, service, passive, &sin);
    if (rc) {
      free(rai);
      return rc;
    }
    if (passive) {
      rai->ai_src_addr = copy_addr(&sin, sizeof(sin));
      rai->ai_src_len = sizeof(sin);
    } else {
      rai->ai_dst_addr = copy_addr(&sin, sizeof(sin));
      rai->ai_dst_len = sizeof(sin);
    }
    if ((passive && !rai->ai_src_addr) || (!passive && !rai->ai_dst_addr)) {
      rdma_freeaddrinfo(rai);
      return EAI_MEMORY;
    }
  }
  // What the lookup did not give, the hints do.
  if (!rai->ai_src_addr && hint_src) {
    rai->ai_src_addr = copy_addr(hints->ai_src_addr, sizeof(sockaddr_in));
    rai->ai_src_len = sizeof(sockaddr_in);
  }
  if (!rai->ai_dst_addr && hint_dst && !passive) {
    rai->ai_dst_addr = copy_addr(hints->ai_dst_addr, sizeof(sockaddr_in));
    rai->ai_dst_len = sizeof(sockaddr_in);
  }
  if ((hint_src && !rai->ai_src_addr) || (hint_dst && !passive && !rai->ai_dst_addr)) {
    rdma_freeaddrinfo(rai);
    return EAI_MEMORY;
  }
  *res = rai;
  return 0;
}

// Same contract as rdma-core: walks the ai_next list and free()s every
// malloc'ed member and node. NULL is a no-op.
VRDMA_EXPORT void rdma_freeaddrinfo(struct rdma_addrinfo* res) {
  while (res) {
    struct rdma_addrinfo* rai = res;
    res = res->ai_next;
    free(rai->ai_connect);
    free(rai->ai_route);
    free(rai->ai_src_canonname);
    free(rai->ai_dst_canonname);
    free(rai->ai_src_addr);
    free(rai->ai_dst_addr);
    free(rai);
  }
}

}  // extern "C"
