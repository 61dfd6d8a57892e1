// Failing stubs for the rdma_* connection-manager API of the drop-in
// librdmacm.so.1 (prototypes from <rdma/rdma_cma.h> and <rdma/rdma_verbs.h>).
//
// Placeholder until rdma_cm is implemented: every call fails with
// errno = ENOSYS (-1 for int-returning functions, NULL for pointer-returning
// ones); void functions do nothing. rdma_event_str lives in cm_event_str.cc.
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

VRDMA_EXPORT struct rdma_event_channel *rdma_create_event_channel(void) {
  return fail_ptr<struct rdma_event_channel>();
}

VRDMA_EXPORT void rdma_destroy_event_channel(struct rdma_event_channel * /*channel*/) {}

VRDMA_EXPORT int rdma_create_id(struct rdma_event_channel * /*channel*/,
                                struct rdma_cm_id ** /*id*/, void * /*context*/,
                                enum rdma_port_space /*ps*/) {
  return fail_int();
}

VRDMA_EXPORT int rdma_destroy_id(struct rdma_cm_id * /*id*/) { return fail_int(); }

VRDMA_EXPORT int rdma_bind_addr(struct rdma_cm_id * /*id*/, struct sockaddr * /*addr*/) {
  return fail_int();
}

VRDMA_EXPORT int rdma_resolve_addr(struct rdma_cm_id * /*id*/, struct sockaddr * /*src_addr*/,
                                   struct sockaddr * /*dst_addr*/, int /*timeout_ms*/) {
  return fail_int();
}

VRDMA_EXPORT int rdma_resolve_route(struct rdma_cm_id * /*id*/, int /*timeout_ms*/) {
  return fail_int();
}

VRDMA_EXPORT int rdma_create_qp(struct rdma_cm_id * /*id*/, struct ibv_pd * /*pd*/,
                                struct ibv_qp_init_attr * /*qp_init_attr*/) {
  return fail_int();
}

VRDMA_EXPORT int rdma_create_qp_ex(struct rdma_cm_id * /*id*/,
                                   struct ibv_qp_init_attr_ex * /*qp_init_attr*/) {
  return fail_int();
}

VRDMA_EXPORT void rdma_destroy_qp(struct rdma_cm_id * /*id*/) {}

VRDMA_EXPORT int rdma_connect(struct rdma_cm_id * /*id*/,
                              struct rdma_conn_param * /*conn_param*/) {
  return fail_int();
}

VRDMA_EXPORT int rdma_listen(struct rdma_cm_id * /*id*/, int /*backlog*/) { return fail_int(); }

VRDMA_EXPORT int rdma_accept(struct rdma_cm_id * /*id*/,
                             struct rdma_conn_param * /*conn_param*/) {
  return fail_int();
}

VRDMA_EXPORT int rdma_reject(struct rdma_cm_id * /*id*/, const void * /*private_data*/,
                             uint8_t /*private_data_len*/) {
  return fail_int();
}

VRDMA_EXPORT int rdma_notify(struct rdma_cm_id * /*id*/, enum ibv_event_type /*event*/) {
  return fail_int();
}

VRDMA_EXPORT int rdma_disconnect(struct rdma_cm_id * /*id*/) { return fail_int(); }

VRDMA_EXPORT int rdma_get_cm_event(struct rdma_event_channel * /*channel*/,
                                   struct rdma_cm_event ** /*event*/) {
  return fail_int();
}

VRDMA_EXPORT int rdma_ack_cm_event(struct rdma_cm_event * /*event*/) { return fail_int(); }

// Ports are returned in network byte order; 0 means "unknown".
VRDMA_EXPORT __be16 rdma_get_src_port(struct rdma_cm_id * /*id*/) {
  errno = ENOSYS;
  return 0;
}

VRDMA_EXPORT __be16 rdma_get_dst_port(struct rdma_cm_id * /*id*/) {
  errno = ENOSYS;
  return 0;
}

VRDMA_EXPORT struct ibv_context **rdma_get_devices(int *num_devices) {
  if (num_devices) *num_devices = 0;
  return fail_ptr<struct ibv_context *>();
}

VRDMA_EXPORT void rdma_free_devices(struct ibv_context ** /*list*/) {}

VRDMA_EXPORT int rdma_set_option(struct rdma_cm_id * /*id*/, int /*level*/, int /*optname*/,
                                 void * /*optval*/, size_t /*optlen*/) {
  return fail_int();
}

VRDMA_EXPORT int rdma_migrate_id(struct rdma_cm_id * /*id*/,
                                 struct rdma_event_channel * /*channel*/) {
  return fail_int();
}

VRDMA_EXPORT int rdma_join_multicast(struct rdma_cm_id * /*id*/, struct sockaddr * /*addr*/,
                                     void * /*context*/) {
  return fail_int();
}

VRDMA_EXPORT int rdma_leave_multicast(struct rdma_cm_id * /*id*/, struct sockaddr * /*addr*/) {
  return fail_int();
}

VRDMA_EXPORT int rdma_getaddrinfo(const char * /*node*/, const char * /*service*/,
                                  const struct rdma_addrinfo * /*hints*/,
                                  struct rdma_addrinfo ** /*res*/) {
  return fail_int();
}

// Same contract as rdma-core: walks the ai_next list and free()s every
// malloc'ed member and node. NULL is a no-op.
VRDMA_EXPORT void rdma_freeaddrinfo(struct rdma_addrinfo *res) {
  while (res) {
    struct rdma_addrinfo *rai = res;
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

VRDMA_EXPORT int rdma_create_ep(struct rdma_cm_id ** /*id*/, struct rdma_addrinfo * /*res*/,
                                struct ibv_pd * /*pd*/,
                                struct ibv_qp_init_attr * /*qp_init_attr*/) {
  return fail_int();
}

VRDMA_EXPORT void rdma_destroy_ep(struct rdma_cm_id * /*id*/) {}

VRDMA_EXPORT int rdma_create_srq(struct rdma_cm_id * /*id*/, struct ibv_pd * /*pd*/,
                                 struct ibv_srq_init_attr * /*attr*/) {
  return fail_int();
}

VRDMA_EXPORT int rdma_create_srq_ex(struct rdma_cm_id * /*id*/,
                                    struct ibv_srq_init_attr_ex * /*attr*/) {
  return fail_int();
}

VRDMA_EXPORT void rdma_destroy_srq(struct rdma_cm_id * /*id*/) {}

VRDMA_EXPORT int rdma_get_request(struct rdma_cm_id * /*listen*/, struct rdma_cm_id ** /*id*/) {
  return fail_int();
}

// ---- RDMACM_1.1 --------------------------------------------------------

VRDMA_EXPORT int rdma_join_multicast_ex(struct rdma_cm_id * /*id*/,
                                        struct rdma_cm_join_mc_attr_ex * /*mc_join_attr*/,
                                        void * /*context*/) {
  return fail_int();
}

// ---- RDMACM_1.2 --------------------------------------------------------

VRDMA_EXPORT int rdma_establish(struct rdma_cm_id * /*id*/) { return fail_int(); }

VRDMA_EXPORT int rdma_init_qp_attr(struct rdma_cm_id * /*id*/, struct ibv_qp_attr * /*qp_attr*/,
                                   int * /*qp_attr_mask*/) {
  return fail_int();
}

// ---- RDMACM_1.3 --------------------------------------------------------

VRDMA_EXPORT int rdma_set_local_ece(struct rdma_cm_id * /*id*/, struct ibv_ece * /*ece*/) {
  return fail_int();
}

VRDMA_EXPORT int rdma_get_remote_ece(struct rdma_cm_id * /*id*/, struct ibv_ece * /*ece*/) {
  return fail_int();
}

VRDMA_EXPORT int rdma_reject_ece(struct rdma_cm_id * /*id*/, const void * /*private_data*/,
                                 uint8_t /*private_data_len*/) {
  return fail_int();
}

}  // extern "C"
