// Failing stubs for the parts of the rdma_* connection-manager API that vrdma does not
// implement yet: SRQs on ids, ECE (prototypes from <rdma/rdma_cma.h> and
// <rdma/rdma_verbs.h>). Every call fails with errno = ENOSYS (-1 for int-returning
// functions, NULL for pointer-returning ones); void functions do nothing.
// Version nodes come from librdmacm.map.

#include <errno.h>
#include <stdlib.h>

#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

#include "export.h"

namespace {

int fail_int() {
  errno = ENOSYS;
  return -1;
}

template <typename T>
T *fail_ptr() {
  errno = ENOSYS;
  return nullptr;
}

}  // namespace

extern "C" {

// ---- RDMACM_1.0 --------------------------------------------------------

VRDMA_EXPORT int rdma_create_srq(struct rdma_cm_id * /*id*/, struct ibv_pd * /*pd*/,
                                 struct ibv_srq_init_attr * /*attr*/) {
  return fail_int();
}

VRDMA_EXPORT int rdma_create_srq_ex(struct rdma_cm_id * /*id*/,
                                    struct ibv_srq_init_attr_ex * /*attr*/) {
  return fail_int();
}

VRDMA_EXPORT void rdma_destroy_srq(struct rdma_cm_id * /*id*/) {}

// ---- RDMACM_1.1 --------------------------------------------------------


// ---- RDMACM_1.2 --------------------------------------------------------

// ---- RDMACM_1.3 --------------------------------------------------------

// Enhanced connection establishment: the device has no ECE options (ibv_query_ece answers
// EOPNOTSUPP), so there is nothing to exchange.
VRDMA_EXPORT int rdma_set_local_ece(struct rdma_cm_id * /*id*/, struct ibv_ece * /*ece*/) {
  errno = EOPNOTSUPP;
  return -1;
}

VRDMA_EXPORT int rdma_get_remote_ece(struct rdma_cm_id * /*id*/, struct ibv_ece * /*ece*/) {
  errno = EOPNOTSUPP;
  return -1;
}

VRDMA_EXPORT int rdma_reject_ece(struct rdma_cm_id * /*id*/, const void * /*private_data*/,
                                 uint8_t /*private_data_len*/) {
  return fail_int();
}

}  // extern "C"
