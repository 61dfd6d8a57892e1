// Drop-in libefa.so.1: failing stubs for the efadv_* entry points that
// Debian's perftest imports (BIND_NOW, so they must resolve at load time;
// perftest only calls them with -c SRD). The vrdma device is never an EFA
// device, so each call fails with EOPNOTSUPP. Versions come from libefa.map.
//
// The real header is included for its types only; nothing here links against
// libibverbs or the real libefa.

#include <errno.h>
#include <stdint.h>

#include <infiniband/efadv.h>

#define VRDMA_EXPORT __attribute__((visibility("default")))

extern "C" {

// EFA_1.1
VRDMA_EXPORT struct ibv_qp *efadv_create_qp_ex(struct ibv_context * /*ibvctx*/,
                                               struct ibv_qp_init_attr_ex * /*attr_ex*/,
                                               struct efadv_qp_init_attr * /*efa_attr*/,
                                               uint32_t /*inlen*/) {
  errno = EOPNOTSUPP;
  return nullptr;
}

VRDMA_EXPORT int efadv_query_device(struct ibv_context * /*ibvctx*/,
                                    struct efadv_device_attr * /*attr*/, uint32_t /*inlen*/) {
  errno = EOPNOTSUPP;
  return EOPNOTSUPP;
}

}  // extern "C"
