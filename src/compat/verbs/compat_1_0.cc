// The IBVERBS_1.0 ABI: the verbs as libibverbs 1.0 (2006) laid out their structures.
// rdma-core keeps them as compatibility versions (ibv_open_device@IBVERBS_1.0 next to
// ibv_open_device@@IBVERBS_1.1) for programs linked against that library; programs linked
// since bind the 1.1 versions. vrdma does not provide the old ABI: the old device list is
// empty (NULL, errno = ENOSYS), so an old program finds no device, and every other call
// fails the way its 1.1 namesake does (NULL or -1 with errno = ENOSYS, or ENOSYS returned).
//
// Each function is bound to its old version by .symver; the version script leaves
// IBVERBS_1.0 without a `local:` pattern so that these stay exported (see libibverbs.map).
#include <errno.h>
#include <stdint.h>

#include "compat/verbs/handles.h"

// The 1.0 structures, used through pointers only.
struct ibv_device_1_0;
struct ibv_context_1_0;
struct ibv_pd_1_0;
struct ibv_mr_1_0;
struct ibv_cq_1_0;
struct ibv_srq_1_0;
struct ibv_qp_1_0;
struct ibv_qp_init_attr_1_0;
struct ibv_ah_1_0;

namespace {
constexpr int kAbiMissing = ENOSYS;

template <typename T>
T* missing_object() {
  errno = kAbiMissing;
  return nullptr;
}
int missing_errno() {
  errno = kAbiMissing;
  return kAbiMissing;
}
int missing_minus_one() {
  errno = kAbiMissing;
  return -1;
}
}  // namespace

VRDMA_EXPORT ibv_device_1_0** vrdma_ibv_get_device_list_1_0(int* num) {
  if (num != nullptr) *num = 0;
  return missing_object<ibv_device_1_0*>();
}
__asm__(".symver vrdma_ibv_get_device_list_1_0, ibv_get_device_list@IBVERBS_1.0");

VRDMA_EXPORT void vrdma_ibv_free_device_list_1_0(ibv_device_1_0**) {}
__asm__(".symver vrdma_ibv_free_device_list_1_0, ibv_free_device_list@IBVERBS_1.0");

VRDMA_EXPORT const char* vrdma_ibv_get_device_name_1_0(ibv_device_1_0*) {
  return missing_object<const char>();
}
__asm__(".symver vrdma_ibv_get_device_name_1_0, ibv_get_device_name@IBVERBS_1.0");

VRDMA_EXPORT __be64 vrdma_ibv_get_device_guid_1_0(ibv_device_1_0*) {
  errno = kAbiMissing;
  return 0;
}
__asm__(".symver vrdma_ibv_get_device_guid_1_0, ibv_get_device_guid@IBVERBS_1.0");

VRDMA_EXPORT ibv_context_1_0* vrdma_ibv_open_device_1_0(ibv_device_1_0*) {
  return missing_object<ibv_context_1_0>();
}
__asm__(".symver vrdma_ibv_open_device_1_0, ibv_open_device@IBVERBS_1.0");

VRDMA_EXPORT int vrdma_ibv_close_device_1_0(ibv_context_1_0*) {
  return missing_errno();
}
__asm__(".symver vrdma_ibv_close_device_1_0, ibv_close_device@IBVERBS_1.0");

VRDMA_EXPORT int vrdma_ibv_get_async_event_1_0(ibv_context_1_0*, ibv_async_event*) {
  return missing_minus_one();
}
__asm__(".symver vrdma_ibv_get_async_event_1_0, ibv_get_async_event@IBVERBS_1.0");

VRDMA_EXPORT void vrdma_ibv_ack_async_event_1_0(ibv_async_event*) {}
__asm__(".symver vrdma_ibv_ack_async_event_1_0, ibv_ack_async_event@IBVERBS_1.0");

VRDMA_EXPORT int vrdma_ibv_query_device_1_0(ibv_context_1_0*, ibv_device_attr*) {
  return missing_errno();
}
__asm__(".symver vrdma_ibv_query_device_1_0, ibv_query_device@IBVERBS_1.0");

VRDMA_EXPORT int vrdma_ibv_query_port_1_0(ibv_context_1_0*, uint8_t, ibv_port_attr*) {
  return missing_errno();
}
__asm__(".symver vrdma_ibv_query_port_1_0, ibv_query_port@IBVERBS_1.0");

VRDMA_EXPORT int vrdma_ibv_query_gid_1_0(ibv_context_1_0*, uint8_t, int, ibv_gid*) {
  return missing_minus_one();
}
__asm__(".symver vrdma_ibv_query_gid_1_0, ibv_query_gid@IBVERBS_1.0");

VRDMA_EXPORT int vrdma_ibv_query_pkey_1_0(ibv_context_1_0*, uint8_t, int, __be16*) {
  return missing_minus_one();
}
__asm__(".symver vrdma_ibv_query_pkey_1_0, ibv_query_pkey@IBVERBS_1.0");

VRDMA_EXPORT ibv_pd_1_0* vrdma_ibv_alloc_pd_1_0(ibv_context_1_0*) {
  return missing_object<ibv_pd_1_0>();
}
__asm__(".symver vrdma_ibv_alloc_pd_1_0, ibv_alloc_pd@IBVERBS_1.0");

VRDMA_EXPORT int vrdma_ibv_dealloc_pd_1_0(ibv_pd_1_0*) {
  return missing_errno();
}
__asm__(".symver vrdma_ibv_dealloc_pd_1_0, ibv_dealloc_pd@IBVERBS_1.0");

VRDMA_EXPORT ibv_mr_1_0* vrdma_ibv_reg_mr_1_0(ibv_pd_1_0*, void*, size_t, int) {
  return missing_object<ibv_mr_1_0>();
}
__asm__(".symver vrdma_ibv_reg_mr_1_0, ibv_reg_mr@IBVERBS_1.0");

VRDMA_EXPORT int vrdma_ibv_dereg_mr_1_0(ibv_mr_1_0*) {
  return missing_errno();
}
__asm__(".symver vrdma_ibv_dereg_mr_1_0, ibv_dereg_mr@IBVERBS_1.0");

VRDMA_EXPORT ibv_cq_1_0* vrdma_ibv_create_cq_1_0(ibv_context_1_0*, int, void*, ibv_comp_channel*,
                                                 int) {
  return missing_object<ibv_cq_1_0>();
}
__asm__(".symver vrdma_ibv_create_cq_1_0, ibv_create_cq@IBVERBS_1.0");

VRDMA_EXPORT int vrdma_ibv_resize_cq_1_0(ibv_cq_1_0*, int) {
  return missing_errno();
}
__asm__(".symver vrdma_ibv_resize_cq_1_0, ibv_resize_cq@IBVERBS_1.0");

VRDMA_EXPORT int vrdma_ibv_destroy_cq_1_0(ibv_cq_1_0*) {
  return missing_errno();
}
__asm__(".symver vrdma_ibv_destroy_cq_1_0, ibv_destroy_cq@IBVERBS_1.0");

VRDMA_EXPORT int vrdma_ibv_get_cq_event_1_0(ibv_comp_channel*, ibv_cq_1_0**, void**) {
  return missing_minus_one();
}
__asm__(".symver vrdma_ibv_get_cq_event_1_0, ibv_get_cq_event@IBVERBS_1.0");

VRDMA_EXPORT void vrdma_ibv_ack_cq_events_1_0(ibv_cq_1_0*, unsigned int) {}
__asm__(".symver vrdma_ibv_ack_cq_events_1_0, ibv_ack_cq_events@IBVERBS_1.0");

VRDMA_EXPORT ibv_srq_1_0* vrdma_ibv_create_srq_1_0(ibv_pd_1_0*, ibv_srq_init_attr*) {
  return missing_object<ibv_srq_1_0>();
}
__asm__(".symver vrdma_ibv_create_srq_1_0, ibv_create_srq@IBVERBS_1.0");

VRDMA_EXPORT int vrdma_ibv_modify_srq_1_0(ibv_srq_1_0*, ibv_srq_attr*, int) {
  return missing_errno();
}
__asm__(".symver vrdma_ibv_modify_srq_1_0, ibv_modify_srq@IBVERBS_1.0");

VRDMA_EXPORT int vrdma_ibv_query_srq_1_0(ibv_srq_1_0*, ibv_srq_attr*) {
  return missing_errno();
}
__asm__(".symver vrdma_ibv_query_srq_1_0, ibv_query_srq@IBVERBS_1.0");

VRDMA_EXPORT int vrdma_ibv_destroy_srq_1_0(ibv_srq_1_0*) {
  return missing_errno();
}
__asm__(".symver vrdma_ibv_destroy_srq_1_0, ibv_destroy_srq@IBVERBS_1.0");

VRDMA_EXPORT ibv_qp_1_0* vrdma_ibv_create_qp_1_0(ibv_pd_1_0*, ibv_qp_init_attr_1_0*) {
  return missing_object<ibv_qp_1_0>();
}
__asm__(".symver vrdma_ibv_create_qp_1_0, ibv_create_qp@IBVERBS_1.0");

VRDMA_EXPORT int vrdma_ibv_query_qp_1_0(ibv_qp_1_0*, ibv_qp_attr*, int, ibv_qp_init_attr_1_0*) {
  return missing_errno();
}
__asm__(".symver vrdma_ibv_query_qp_1_0, ibv_query_qp@IBVERBS_1.0");

VRDMA_EXPORT int vrdma_ibv_modify_qp_1_0(ibv_qp_1_0*, ibv_qp_attr*, int) {
  return missing_errno();
}
__asm__(".symver vrdma_ibv_modify_qp_1_0, ibv_modify_qp@IBVERBS_1.0");

VRDMA_EXPORT int vrdma_ibv_destroy_qp_1_0(ibv_qp_1_0*) {
  return missing_errno();
}
__asm__(".symver vrdma_ibv_destroy_qp_1_0, ibv_destroy_qp@IBVERBS_1.0");

VRDMA_EXPORT ibv_ah_1_0* vrdma_ibv_create_ah_1_0(ibv_pd_1_0*, ibv_ah_attr*) {
  return missing_object<ibv_ah_1_0>();
}
__asm__(".symver vrdma_ibv_create_ah_1_0, ibv_create_ah@IBVERBS_1.0");

VRDMA_EXPORT int vrdma_ibv_destroy_ah_1_0(ibv_ah_1_0*) {
  return missing_errno();
}
__asm__(".symver vrdma_ibv_destroy_ah_1_0, ibv_destroy_ah@IBVERBS_1.0");

VRDMA_EXPORT int vrdma_ibv_attach_mcast_1_0(ibv_qp_1_0*, ibv_gid*, uint16_t) {
  return missing_errno();
}
__asm__(".symver vrdma_ibv_attach_mcast_1_0, ibv_attach_mcast@IBVERBS_1.0");

VRDMA_EXPORT int vrdma_ibv_detach_mcast_1_0(ibv_qp_1_0*, ibv_gid*, uint16_t) {
  return missing_errno();
}
__asm__(".symver vrdma_ibv_detach_mcast_1_0, ibv_detach_mcast@IBVERBS_1.0");

// ibv_register_driver@IBVERBS_1.1 is rdma-core's compatibility entry for providers built
// before the verbs_register_driver interface; only the old name remains. It registers
// nothing here either.
VRDMA_EXPORT void vrdma_ibv_register_driver_1_1(const char*, void*) {}
__asm__(".symver vrdma_ibv_register_driver_1_1, ibv_register_driver@IBVERBS_1.1");
