// IBVERBS_PRIVATE_34: the interface rdma-core's libibverbs offers its provider drivers
// (the plugins in /usr/lib/<arch>/libibverbs/*-rdmav34.so and Debian's real libmlx5.so.1,
// libmlx4.so.1, libefa.so.1, libmana.so.1). vrdma loads no provider and ships its own
// failing direct-verbs libraries, so nothing here is ever called in a vrdma process; the
// symbols exist so that those files still resolve with vrdma's libibverbs.so.1 in effect
// (a program may name them, and the load test checks every file Debian installed).
//
// Each entry fails as rdma-core's own does when the kernel lacks the command: the ibv_cmd_*
// calls return EOPNOTSUPP (ibv_cmd_poll_cq, like poll_cq, -1 with errno), constructors
// return NULL with errno = EOPNOTSUPP, and the void helpers do nothing. A provider whose
// constructor calls verbs_register_driver_34 registers nothing. Prototypes follow rdma-core
// 44's private driver.h and cmd_ioctl.h, which Debian does not install; the command and
// response structures they name are opaque here.
#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#include "compat/verbs/handles.h"

// Private rdma-core types, used through pointers only.
struct ibv_command_buffer;
struct verbs_device_ops;
struct verbs_context_ops;
struct verbs_sysfs_dev;
struct verbs_xrcd;
struct verbs_mr;
struct verbs_cq;
struct verbs_srq;
struct verbs_qp;
struct verbs_dm;
struct verbs_counters;
struct verbs_flow_action;
struct ibv_query_device_ex_input;
// Command and response structures of the kernel's uverbs ABI (kern-abi.h). Several share
// their tag with a verb (struct ibv_create_qp, ibv_create_qp()), so they are always
// named with `struct`.
struct ibv_get_context;
struct ibv_query_port;
struct ibv_alloc_pd;
struct ibv_open_xrcd;
struct ibv_reg_mr;
struct ibv_rereg_mr;
struct ibv_alloc_mw;
struct ibv_create_cq;
struct ibv_create_cq_ex;
struct ibv_resize_cq;
struct ibv_modify_cq;
struct ibv_create_srq;
struct ibv_create_xsrq;
struct ibv_modify_srq;
struct ibv_query_srq;
struct ibv_create_qp;
struct ibv_create_qp_ex;
struct ibv_open_qp;
struct ibv_query_qp;
struct ibv_modify_qp;
struct ibv_modify_qp_ex;
struct ibv_create_wq;
struct ibv_modify_wq;
struct ib_uverbs_get_context_resp;
struct ib_uverbs_ex_query_device_resp;
struct ib_uverbs_alloc_pd_resp;
struct ib_uverbs_open_xrcd_resp;
struct ib_uverbs_reg_mr_resp;
struct ib_uverbs_rereg_mr_resp;
struct ib_uverbs_alloc_mw_resp;
struct ib_uverbs_create_cq_resp;
struct ib_uverbs_ex_create_cq_resp;
struct ib_uverbs_resize_cq_resp;
struct ib_uverbs_create_srq_resp;
struct ib_uverbs_create_qp_resp;
struct ib_uverbs_ex_create_qp_resp;
struct ib_uverbs_ex_modify_qp_resp;
struct ib_uverbs_create_ah_resp;
struct ib_uverbs_ex_create_wq_resp;
struct ib_uverbs_ex_create_rwq_ind_table_resp;

namespace {
constexpr int kUnsupported = EOPNOTSUPP;

int unsupported() {
  errno = kUnsupported;
  return kUnsupported;
}
}  // namespace

// ---- the library's own machinery, used by every provider -------------------------------

// Read by providers' destroy paths; rdma-core sets it from RDMAV_ALLOW_DISASSOC_DESTROY.
extern "C" {
__attribute__((visibility("default"))) bool verbs_allow_disassociate_destroy = false;
}

VRDMA_EXPORT void verbs_register_driver_34(const verbs_device_ops*) {}
VRDMA_EXPORT void __verbs_log(verbs_context*, uint32_t, const char*, ...) {}
VRDMA_EXPORT void* _verbs_init_and_alloc_context(ibv_device*, int, size_t, verbs_context*,
                                                 uint32_t) {
  errno = kUnsupported;
  return nullptr;
}
VRDMA_EXPORT void verbs_uninit_context(verbs_context*) {}
VRDMA_EXPORT void verbs_set_ops(verbs_context*, const verbs_context_ops*) {}
VRDMA_EXPORT void verbs_init_cq(ibv_cq*, ibv_context*, ibv_comp_channel*, void*) {}
VRDMA_EXPORT ibv_context* verbs_open_device(ibv_device*, void*) {
  errno = kUnsupported;
  return nullptr;
}
VRDMA_EXPORT int ibv_read_ibdev_sysfs_file(char*, size_t, verbs_sysfs_dev*, const char*, ...) {
  errno = kUnsupported;
  return -1;
}
// The number of attributes of a command buffer and the buffers linked to it; with no
// command buffers in this library, the caller's own count.
VRDMA_EXPORT unsigned int __ioctl_final_num_attrs(unsigned int num_attrs, ibv_command_buffer*) {
  return num_attrs;
}
VRDMA_EXPORT int execute_ioctl(ibv_context*, ibv_command_buffer*) {
  return unsupported();
}

// ---- uverbs commands ---------------------------------------------------------------------

VRDMA_EXPORT int ibv_cmd_get_context(verbs_context*, struct ibv_get_context*, size_t,
                                     ib_uverbs_get_context_resp*, size_t) {
  return unsupported();
}
VRDMA_EXPORT int ibv_cmd_query_context(ibv_context*, ibv_command_buffer*) {
  return unsupported();
}
VRDMA_EXPORT int ibv_cmd_query_device_any(ibv_context*, const ibv_query_device_ex_input*,
                                          ibv_device_attr_ex*, size_t,
                                          ib_uverbs_ex_query_device_resp*, size_t*) {
  return unsupported();
}
VRDMA_EXPORT int ibv_cmd_query_port(ibv_context*, uint8_t, ibv_port_attr*, struct ibv_query_port*,
                                    size_t) {
  return unsupported();
}

VRDMA_EXPORT int ibv_cmd_alloc_pd(ibv_context*, ibv_pd*, struct ibv_alloc_pd*, size_t,
                                  ib_uverbs_alloc_pd_resp*, size_t) {
  return unsupported();
}
VRDMA_EXPORT int ibv_cmd_dealloc_pd(ibv_pd*) {
  return unsupported();
}
VRDMA_EXPORT int ibv_cmd_open_xrcd(ibv_context*, verbs_xrcd*, int, ibv_xrcd_init_attr*,
                                   struct ibv_open_xrcd*, size_t, ib_uverbs_open_xrcd_resp*,
                                   size_t) {
  return unsupported();
}
VRDMA_EXPORT int ibv_cmd_close_xrcd(verbs_xrcd*) {
  return unsupported();
}

VRDMA_EXPORT int ibv_cmd_reg_mr(ibv_pd*, void*, size_t, uint64_t, int, verbs_mr*,
                                struct ibv_reg_mr*, size_t, ib_uverbs_reg_mr_resp*, size_t) {
  return unsupported();
}
VRDMA_EXPORT int ibv_cmd_rereg_mr(verbs_mr*, uint32_t, void*, size_t, uint64_t, int, ibv_pd*,
                                  struct ibv_rereg_mr*, size_t, ib_uverbs_rereg_mr_resp*, size_t) {
  return unsupported();
}
VRDMA_EXPORT int ibv_cmd_dereg_mr(verbs_mr*) {
  return unsupported();
}
VRDMA_EXPORT int ibv_cmd_query_mr(ibv_pd*, verbs_mr*, uint32_t) {
  return unsupported();
}
VRDMA_EXPORT int ibv_cmd_advise_mr(ibv_pd*, ibv_advise_mr_advice, uint32_t, ibv_sge*, uint32_t) {
  return unsupported();
}
VRDMA_EXPORT int ibv_cmd_reg_dmabuf_mr(ibv_pd*, uint64_t, size_t, uint64_t, int, int, verbs_mr*) {
  return unsupported();
}
VRDMA_EXPORT int ibv_cmd_alloc_mw(ibv_pd*, ibv_mw_type, ibv_mw*, struct ibv_alloc_mw*, size_t,
                                  ib_uverbs_alloc_mw_resp*, size_t) {
  return unsupported();
}
VRDMA_EXPORT int ibv_cmd_dealloc_mw(ibv_mw*) {
  return unsupported();
}
VRDMA_EXPORT int ibv_cmd_alloc_dm(ibv_context*, const ibv_alloc_dm_attr*, verbs_dm*,
                                  ibv_command_buffer*) {
  return unsupported();
}
VRDMA_EXPORT int ibv_cmd_free_dm(verbs_dm*) {
  return unsupported();
}
VRDMA_EXPORT int ibv_cmd_reg_dm_mr(ibv_pd*, verbs_dm*, uint64_t, size_t, unsigned int, verbs_mr*,
                                   ibv_command_buffer*) {
  return unsupported();
}

VRDMA_EXPORT int ibv_cmd_create_cq(ibv_context*, int, ibv_comp_channel*, int, ibv_cq*,
                                   struct ibv_create_cq*, size_t, ib_uverbs_create_cq_resp*,
                                   size_t) {
  return unsupported();
}
VRDMA_EXPORT int ibv_cmd_create_cq_ex(ibv_context*, const ibv_cq_init_attr_ex*, verbs_cq*,
                                      struct ibv_create_cq_ex*, size_t,
                                      ib_uverbs_ex_create_cq_resp*, size_t, uint32_t) {
  return unsupported();
}
VRDMA_EXPORT int ibv_cmd_poll_cq(ibv_cq*, int, ibv_wc*) {
  errno = kUnsupported;
  return -1;
}
VRDMA_EXPORT int ibv_cmd_req_notify_cq(ibv_cq*, int) {
  return unsupported();
}
VRDMA_EXPORT int ibv_cmd_resize_cq(ibv_cq*, int, struct ibv_resize_cq*, size_t,
                                   ib_uverbs_resize_cq_resp*, size_t) {
  return unsupported();
}
VRDMA_EXPORT int ibv_cmd_destroy_cq(ibv_cq*) {
  return unsupported();
}
VRDMA_EXPORT int ibv_cmd_modify_cq(ibv_cq*, ibv_modify_cq_attr*, struct ibv_modify_cq*, size_t) {
  return unsupported();
}

VRDMA_EXPORT int ibv_cmd_create_srq(ibv_pd*, ibv_srq*, ibv_srq_init_attr*, struct ibv_create_srq*,
                                    size_t, ib_uverbs_create_srq_resp*, size_t) {
  return unsupported();
}
VRDMA_EXPORT int ibv_cmd_create_srq_ex(ibv_context*, verbs_srq*, ibv_srq_init_attr_ex*,
                                       struct ibv_create_xsrq*, size_t, ib_uverbs_create_srq_resp*,
                                       size_t) {
  return unsupported();
}
VRDMA_EXPORT int ibv_cmd_modify_srq(ibv_srq*, ibv_srq_attr*, int, struct ibv_modify_srq*, size_t) {
  return unsupported();
}
VRDMA_EXPORT int ibv_cmd_query_srq(ibv_srq*, ibv_srq_attr*, struct ibv_query_srq*, size_t) {
  return unsupported();
}
VRDMA_EXPORT int ibv_cmd_destroy_srq(ibv_srq*) {
  return unsupported();
}

VRDMA_EXPORT int ibv_cmd_create_qp(ibv_pd*, ibv_qp*, ibv_qp_init_attr*, struct ibv_create_qp*,
                                   size_t, ib_uverbs_create_qp_resp*, size_t) {
  return unsupported();
}
VRDMA_EXPORT int ibv_cmd_create_qp_ex(ibv_context*, verbs_qp*, ibv_qp_init_attr_ex*,
                                      struct ibv_create_qp*, size_t, ib_uverbs_create_qp_resp*,
                                      size_t) {
  return unsupported();
}
VRDMA_EXPORT int ibv_cmd_create_qp_ex2(ibv_context*, verbs_qp*, ibv_qp_init_attr_ex*,
                                       struct ibv_create_qp_ex*, size_t,
                                       ib_uverbs_ex_create_qp_resp*, size_t) {
  return unsupported();
}
VRDMA_EXPORT int ibv_cmd_open_qp(ibv_context*, verbs_qp*, int, ibv_qp_open_attr*,
                                 struct ibv_open_qp*, size_t, ib_uverbs_create_qp_resp*, size_t) {
  return unsupported();
}
VRDMA_EXPORT int ibv_cmd_query_qp(ibv_qp*, ibv_qp_attr*, int, ibv_qp_init_attr*,
                                  struct ibv_query_qp*, size_t) {
  return unsupported();
}
VRDMA_EXPORT int ibv_cmd_modify_qp(ibv_qp*, ibv_qp_attr*, int, struct ibv_modify_qp*, size_t) {
  return unsupported();
}
VRDMA_EXPORT int ibv_cmd_modify_qp_ex(ibv_qp*, ibv_qp_attr*, int, struct ibv_modify_qp_ex*, size_t,
                                      ib_uverbs_ex_modify_qp_resp*, size_t) {
  return unsupported();
}
VRDMA_EXPORT int ibv_cmd_destroy_qp(ibv_qp*) {
  return unsupported();
}
VRDMA_EXPORT int ibv_cmd_post_send(ibv_qp*, ibv_send_wr* wr, ibv_send_wr** bad_wr) {
  *bad_wr = wr;
  return unsupported();
}
VRDMA_EXPORT int ibv_cmd_post_recv(ibv_qp*, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
  *bad_wr = wr;
  return unsupported();
}
VRDMA_EXPORT int ibv_cmd_post_srq_recv(ibv_srq*, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
  *bad_wr = wr;
  return unsupported();
}

VRDMA_EXPORT int ibv_cmd_create_ah(ibv_pd*, ibv_ah*, ibv_ah_attr*, ib_uverbs_create_ah_resp*,
                                   size_t) {
  return unsupported();
}
VRDMA_EXPORT int ibv_cmd_destroy_ah(ibv_ah*) {
  return unsupported();
}
VRDMA_EXPORT int ibv_cmd_attach_mcast(ibv_qp*, const ibv_gid*, uint16_t) {
  return unsupported();
}
VRDMA_EXPORT int ibv_cmd_detach_mcast(ibv_qp*, const ibv_gid*, uint16_t) {
  return unsupported();
}

VRDMA_EXPORT int ibv_cmd_create_flow(ibv_qp*, ibv_flow*, ibv_flow_attr*, void*, size_t) {
  return unsupported();
}
VRDMA_EXPORT int ibv_cmd_destroy_flow(ibv_flow*) {
  return unsupported();
}
VRDMA_EXPORT int ibv_cmd_create_flow_action_esp(ibv_context*, ibv_flow_action_esp_attr*,
                                                verbs_flow_action*, ibv_command_buffer*) {
  return unsupported();
}
VRDMA_EXPORT int ibv_cmd_modify_flow_action_esp(verbs_flow_action*, ibv_flow_action_esp_attr*,
                                                ibv_command_buffer*) {
  return unsupported();
}
VRDMA_EXPORT int ibv_cmd_destroy_flow_action(verbs_flow_action*) {
  return unsupported();
}

VRDMA_EXPORT int ibv_cmd_create_wq(ibv_context*, ibv_wq_init_attr*, ibv_wq*, struct ibv_create_wq*,
                                   size_t, ib_uverbs_ex_create_wq_resp*, size_t) {
  return unsupported();
}
VRDMA_EXPORT int ibv_cmd_modify_wq(ibv_wq*, ibv_wq_attr*, struct ibv_modify_wq*, size_t) {
  return unsupported();
}
VRDMA_EXPORT int ibv_cmd_destroy_wq(ibv_wq*) {
  return unsupported();
}
VRDMA_EXPORT int ibv_cmd_create_rwq_ind_table(ibv_context*, ibv_rwq_ind_table_init_attr*,
                                              ibv_rwq_ind_table*,
                                              ib_uverbs_ex_create_rwq_ind_table_resp*, size_t) {
  return unsupported();
}
VRDMA_EXPORT int ibv_cmd_destroy_rwq_ind_table(ibv_rwq_ind_table*) {
  return unsupported();
}

VRDMA_EXPORT int ibv_cmd_create_counters(ibv_context*, ibv_counters_init_attr*, verbs_counters*,
                                         ibv_command_buffer*) {
  return unsupported();
}
VRDMA_EXPORT int ibv_cmd_destroy_counters(verbs_counters*) {
  return unsupported();
}
VRDMA_EXPORT int ibv_cmd_read_counters(verbs_counters*, uint64_t*, uint32_t, uint32_t,
                                       ibv_command_buffer*) {
  return unsupported();
}
