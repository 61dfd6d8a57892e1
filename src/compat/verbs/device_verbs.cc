// Devices: listing, opening, and the attributes a virtual RoCEv2 HCA reports.
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <string.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>

#include "common/address.h"
#include "compat/verbs/handles.h"
#include "engine/device.h"

// verbs.h turns these into inline wrappers; the library exports the real ones.
#undef ibv_query_port

using namespace vrdma;
using namespace vrdma::compat;

namespace vrdma::compat {

int post_send(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad);
int post_recv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad);
int post_srq_recv(ibv_srq* srq, ibv_recv_wr* wr, ibv_recv_wr** bad);
int poll_cq(ibv_cq* cq, int n, ibv_wc* wc);
int req_notify_cq(ibv_cq* cq, int solicited_only);

namespace {

// Extended op: the full ibv_port_attr (the exported function writes only the
// compat part).
int query_port_op(ibv_context*, uint8_t port, ibv_port_attr* attr, size_t len) {
  if (port != 1) return EINVAL;
  ibv_port_attr full;
  fill_port_attr(full);
  memcpy(attr, &full, len < sizeof(full) ? len : sizeof(full));
  return 0;
}

int query_device_ex_op(ibv_context* ctx, const ibv_query_device_ex_input* input,
                       ibv_device_attr_ex* attr, size_t size) {
  if (input && input->comp_mask) return EINVAL;
  if (size < sizeof(ibv_device_attr)) return EINVAL;
  ibv_device_attr_ex full{};
  fill_device_attr_ex(ctx, full);
  memcpy(attr, &full, size < sizeof(full) ? size : sizeof(full));
  return 0;
}

}  // namespace

void fill_gid(ibv_context* ctx, ibv_gid& gid) {
  vrdma::ipv4_to_gid(engine_of(ctx)->device().info().ipv4, gid.raw);
}

void fill_device_attr(ibv_context* ctx, ibv_device_attr& a) {
  memset(&a, 0, sizeof(a));
  snprintf(a.fw_ver, sizeof(a.fw_ver), "vrdma 0.1.0");
  a.node_guid = engine_of(ctx)->device().info().node_guid;
  a.sys_image_guid = a.node_guid;
  a.max_mr_size = 1ull << 40;
  a.page_size_cap = 4096;
  a.vendor_id = 0xFFFFFF;
  a.vendor_part_id = 0;
  a.hw_ver = 0;
  a.max_qp = 65536;
  a.max_qp_wr = 16384;
  // Memory windows of type 1 and 2; a type-2 window is reached through any QP of its PD (the
  // binding QP is not checked), which is neither type 2A nor 2B, so neither flag is set.
  a.device_cap_flags = IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_SRQ_RESIZE * 0 |
                       IBV_DEVICE_PORT_ACTIVE_EVENT | IBV_DEVICE_SYS_IMAGE_GUID | IBV_DEVICE_XRC |
                       IBV_DEVICE_MEM_WINDOW;
  a.max_sge = shm::kMaxSendSge;
  a.max_sge_rd = shm::kMaxSendSge;
  a.max_cq = 65536;
  a.max_cqe = Cq::kMaxCqe;
  a.max_mr = shm::kMrSlots - 1;
  a.max_mw = shm::kMrSlots - 1;  // windows and MRs share the slots
  a.max_pd = 65536;
  a.max_qp_rd_atom = 16;
  a.max_res_rd_atom = 16 * 65536;
  a.max_qp_init_rd_atom = 16;
  a.atomic_cap = IBV_ATOMIC_HCA;
  a.max_ah = 65536;
  a.max_srq = 65536;
  a.max_srq_wr = 16384;
  a.max_srq_sge = shm::kMaxRecvSge;
  a.max_pkeys = 1;
  a.max_mcast_grp = proto::kMaxMcastGroups;
  a.max_mcast_qp_attach = proto::kMaxMcastMembers;
  a.max_total_mcast_qp_attach = proto::kMaxMcastAttaches;
  a.local_ca_ack_delay = 15;
  a.phys_port_cnt = 1;
}

// The extended attributes, each as the device has it: on-demand paging (explicit) and device
// memory (in the process); no TSO, RSS, work queues, packet pacing, raw packets, tag matching,
// CQ moderation or PCI atomics (all zero); completion timestamps from CLOCK_MONOTONIC in nanoseconds (a 1 GHz "core clock",
// every bit valid); one port.
void fill_device_attr_ex(ibv_context* ctx, ibv_device_attr_ex& a) {
  memset(&a, 0, sizeof(a));
  fill_device_attr(ctx, a.orig_attr);
  a.comp_mask = 0;
  a.completion_timestamp_mask = ~uint64_t{0};
  a.hca_core_clock = 1000000;  // kHz: one tick per nanosecond
  a.device_cap_flags_ex = a.orig_attr.device_cap_flags;
  a.max_dm_size = kMaxDmSize;  // per allocation, in the process's memory (dm.cc)
  // ODP: every operation on every transport; implicit ODP too (the engine's implicit_odp.cc).
  a.odp_caps.general_caps = IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT;
  a.odp_caps.per_transport_caps.rc_odp_caps =
      IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE | IBV_ODP_SUPPORT_READ |
      IBV_ODP_SUPPORT_ATOMIC | IBV_ODP_SUPPORT_SRQ_RECV;
  a.odp_caps.per_transport_caps.uc_odp_caps =
      IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE |
      IBV_ODP_SUPPORT_SRQ_RECV;
  a.odp_caps.per_transport_caps.ud_odp_caps =
      IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_SRQ_RECV;
  // XRC: sends, RDMA and atomics from XRC_SEND QPs, receives through XRC SRQs (xrc.cc); an ODP
  // MR is an MR like any other there too.
  a.xrc_odp_caps = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_WRITE | IBV_ODP_SUPPORT_READ |
                   IBV_ODP_SUPPORT_ATOMIC | IBV_ODP_SUPPORT_SRQ_RECV;
  a.phys_port_cnt_ex = a.orig_attr.phys_port_cnt;
}

void fill_port_attr(ibv_port_attr& p) {
  memset(&p, 0, sizeof(p));
  p.state = IBV_PORT_ACTIVE;
  p.max_mtu = IBV_MTU_4096;
  p.active_mtu = IBV_MTU_4096;
  p.gid_tbl_len = 1;
  p.port_cap_flags = 0;
  p.max_msg_sz = 1u << 31;
  p.pkey_tbl_len = 1;
  p.lid = 0;
  p.max_vl_num = 1;
  p.subnet_timeout = 18;
  p.active_width = 2;   // 4X
  p.active_speed = 32;  // EDR
  p.phys_state = 5;     // LinkUp
  p.link_layer = IBV_LINK_LAYER_ETHERNET;
}

}  // namespace vrdma::compat

// ---- device list ------------------------------------------------------------

VRDMA_EXPORT ibv_device** ibv_get_device_list(int* num) {
  auto* list = static_cast<ibv_device**>(calloc(2, sizeof(ibv_device*)));
  if (!list) return fail<ibv_device*>(ENOMEM);
  if (num) *num = 0;
  auto dev = Device::get();
  if (!dev) return list;  // no daemon: no device, as with no HCA
  // One device per process, listed again and again: the handle lives as long
  // as the process, like the contexts opened from it.
  static DeviceHandle* h = static_cast<DeviceHandle*>(calloc(1, sizeof(DeviceHandle)));
  if (!h) {
    free(list);
    return fail<ibv_device*>(ENOMEM);
  }
  h->ibv.node_type = IBV_NODE_CA;
  h->ibv.transport_type = IBV_TRANSPORT_IB;
  snprintf(h->ibv.name, sizeof(h->ibv.name), "%s", dev->info().device_name);
  snprintf(h->ibv.dev_name, sizeof(h->ibv.dev_name), "uverbs0");
  snprintf(h->ibv.dev_path, sizeof(h->ibv.dev_path), "/sys/class/infiniband_verbs/uverbs0");
  snprintf(h->ibv.ibdev_path, sizeof(h->ibv.ibdev_path), "/sys/class/infiniband/%s",
           dev->info().device_name);
  list[0] = &h->ibv;
  if (num) *num = 1;
  return list;
}

VRDMA_EXPORT void ibv_free_device_list(ibv_device** list) {
  if (!list) return;
  free(list);  // the device itself stays valid (see ibv_get_device_list)
}

VRDMA_EXPORT const char* ibv_get_device_name(ibv_device* device) {
  return device->name;
}

VRDMA_EXPORT __be64 ibv_get_device_guid(ibv_device*) {
  auto dev = Device::get();
  return dev ? dev->info().node_guid : 0;
}

VRDMA_EXPORT int ibv_get_device_index(ibv_device*) {
  return 0;
}

VRDMA_EXPORT ibv_context* ibv_open_device(ibv_device* device) {
  auto dev = Device::get();
  if (!dev) return fail<ibv_context>(ENODEV);
  auto* h = static_cast<ContextHandle*>(calloc(1, sizeof(ContextHandle)));
  if (!h) return fail<ibv_context>(ENOMEM);
  auto* engine = new Context(dev);
  if (int e = engine->init()) {
    delete engine;
    free(h);
    return fail<ibv_context>(e);
  }
  h->engine = engine;
  verbs_context& v = h->vctx;
  v.sz = sizeof(verbs_context);
  v.query_port = query_port_op;
  v.query_device_ex = query_device_ex_op;
  install_extended_ops(v);
  ibv_context& c = v.context;
  c.device = device;
  // The device node, where the container has one (it does nothing; programs dup it, stat it
  // or hand it to ibv_import_device, which answers EOPNOTSUPP).
  char node[sizeof(device->dev_name) + 32];
  snprintf(node, sizeof(node), "/dev/infiniband/%s", device->dev_name);
  c.cmd_fd = ::open(node, O_RDWR | O_CLOEXEC);
  c.async_fd = engine->async_fd();
  c.num_comp_vectors = 1;
  c.abi_compat = reinterpret_cast<void*>(UINTPTR_MAX);
  pthread_mutex_init(&c.mutex, nullptr);
  c.ops.post_send = post_send;
  c.ops.post_recv = post_recv;
  c.ops.post_srq_recv = post_srq_recv;
  c.ops.poll_cq = poll_cq;
  c.ops.req_notify_cq = req_notify_cq;
  engine->user = &c;
  return &c;
}

VRDMA_EXPORT int ibv_close_device(ibv_context* ctx) {
  ContextHandle* h = ctx_of(ctx);
  if (ctx->cmd_fd >= 0) ::close(ctx->cmd_fd);
  delete h->engine;
  pthread_mutex_destroy(&ctx->mutex);
  free(h);
  return 0;
}

// ---- queries ------------------------------------------------------------------

VRDMA_EXPORT int ibv_query_device(ibv_context* ctx, ibv_device_attr* attr) {
  fill_device_attr(ctx, *attr);
  return 0;
}

// The exported (compat) query_port: writes only the fields that existed in
// the original struct (48 bytes); newer callers use the extended op.
VRDMA_EXPORT int ibv_query_port(ibv_context*, uint8_t port, _compat_ibv_port_attr* attr) {
  if (port != 1) return EINVAL;
  ibv_port_attr full;
  fill_port_attr(full);
  memcpy(attr, &full, 48);
  return 0;
}

VRDMA_EXPORT int ibv_query_gid(ibv_context* ctx, uint8_t port, int index, ibv_gid* gid) {
  if (port != 1 || index < 0) return -1;
  if (index > 0) {
    memset(gid, 0, sizeof(*gid));
    return index < 1 ? 0 : -1;
  }
  fill_gid(ctx, *gid);
  return 0;
}

namespace {
// The network interface that holds the GID's address (the container's), as sysfs names it
// under gid_attrs/ndevs; 0 when none does.
uint32_t netdev_ifindex(uint32_t ipv4) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return 0;
  uint32_t index = 0;
  for (ifaddrs* i = list; i && !index; i = i->ifa_next)
    if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET &&
        reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr == ipv4)
      index = if_nametoindex(i->ifa_name);
  freeifaddrs(list);
  return index;
}
}  // namespace

VRDMA_EXPORT int _ibv_query_gid_ex(ibv_context* ctx, uint32_t port, uint32_t index,
                                   ibv_gid_entry* entry, uint32_t flags, size_t size) {
  if (flags) return EINVAL;
  if (port != 1) return EINVAL;
  if (index != 0) return ENODATA;
  ibv_gid_entry e{};
  fill_gid(ctx, e.gid);
  e.gid_index = 0;
  e.port_num = 1;
  e.gid_type = IBV_GID_TYPE_ROCE_V2;
  e.ndev_ifindex = netdev_ifindex(engine_of(ctx)->device().info().ipv4);
  memcpy(entry, &e, size < sizeof(e) ? size : sizeof(e));
  return 0;
}

VRDMA_EXPORT ssize_t _ibv_query_gid_table(ibv_context* ctx, ibv_gid_entry* entries, size_t max,
                                          uint32_t flags, size_t size) {
  if (flags) return -EINVAL;
  if (max < 1) return -EINVAL;
  int e = _ibv_query_gid_ex(ctx, 1, 0, entries, 0, size);
  return e ? -e : 1;
}

// enum ibv_gid_type_sysfs from rdma-core's private header: 0 IB/RoCEv1, 1 RoCEv2.
VRDMA_EXPORT int ibv_query_gid_type(ibv_context*, uint8_t port, unsigned index, int* type) {
  if (port != 1 || index != 0) {
    errno = EINVAL;
    return -1;
  }
  *type = 1;
  return 0;
}

VRDMA_EXPORT int ibv_query_pkey(ibv_context*, uint8_t port, int index, __be16* pkey) {
  if (port != 1 || index != 0) return -1;
  *pkey = 0xffff;
  return 0;
}

VRDMA_EXPORT int ibv_get_pkey_index(ibv_context*, uint8_t port, __be16 pkey) {
  if (port != 1) return -EINVAL;
  return pkey == 0xffff ? 0 : -ENOENT;
}

// No sysfs: every attribute file is absent.
VRDMA_EXPORT int ibv_read_sysfs_file(const char*, const char*, char*, size_t) {
  return -1;
}

VRDMA_EXPORT const char* ibv_get_sysfs_path(void) {
  return "/sys";
}

VRDMA_EXPORT int ibv_fork_init(void) {
  return 0;
}

VRDMA_EXPORT ibv_fork_status ibv_is_fork_initialized(void) {
  return IBV_FORK_UNNEEDED;
}

VRDMA_EXPORT int ibv_dontfork_range(void*, size_t) {
  return 0;
}
VRDMA_EXPORT int ibv_dofork_range(void*, size_t) {
  return 0;
}
