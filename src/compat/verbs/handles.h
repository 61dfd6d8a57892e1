// The handles libibverbs gives out, each an ABI struct from <infiniband/verbs.h>
// followed by the engine object behind it. The compatibility library only
// translates between the two.
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <cstddef>

#include "engine/objects.h"
#include "engine/qp.h"
#include "engine/xrc.h"

#define VRDMA_EXPORT extern "C" __attribute__((visibility("default")))

namespace vrdma::compat {

struct DeviceHandle {
  ibv_device ibv;
};

struct ContextHandle {
  verbs_context vctx;  // its last member is the ibv_context handed out
  Context* engine;
};

struct ChannelHandle {
  ibv_comp_channel ibv;
  Channel* engine;
};

struct PdHandle {
  ibv_pd ibv;
  Pd* engine;
  // A parent domain (parent_domain.cc): the PD it stands for (whose engine object it shares),
  // its thread domain, and the application's allocator, if it gave one.
  PdHandle* parent_of;
  ibv_td* td;
  void* (*alloc)(ibv_pd* pd, void* pd_context, size_t size, size_t alignment,
                 uint64_t resource_type);
  void (*free)(ibv_pd* pd, void* pd_context, void* ptr, uint64_t resource_type);
  void* pd_context;
};

// What a parent domain's allocator is asked for: the resource_type of each call.
// A QP's send queue in the process: the requests waiting their turn, with their inline data.
inline constexpr uint64_t kResourceQpSendQueue = 1;
// The send-queue allocator of a QP created on `pd` (none unless a parent domain with one).
QueueAllocator queue_allocator(ibv_pd* pd);
// Whether `pd` is a parent domain of `ctx`.
bool is_parent_domain(ibv_context* ctx, ibv_pd* pd);

struct MrHandle {
  ibv_mr ibv;
  PdHandle* pd;
  std::atomic<uint32_t>* dm;  // an MR over device memory: the count of its DM's MRs
};

// Device memory (dm.cc): the most one allocation holds (the device's max_dm_size).
inline constexpr size_t kMaxDmSize = 1u << 20;

struct CqHandle {
  ibv_cq_ex ibv;  // ibv_cq_ex_to_cq is a cast: every CQ is an ibv_cq_ex
  Cq* engine;
  // Extended polling (ibv_start_poll ... ibv_end_poll): the completion being read and when it
  // was taken from the queue (CLOCK_MONOTONIC and CLOCK_REALTIME, ns).
  ibv_wc current;
  uint64_t taken_ns;
  uint64_t taken_wallclock_ns;
};

struct SrqHandle {
  ibv_srq ibv;
  Srq* engine;
};

struct WrBatch;

struct QpHandle {
  ibv_qp_ex ibv;  // every QP is an ibv_qp_ex; ibv.qp_base is the ibv_qp
  Qp* engine;
  WrBatch* batch;  // the ibv_wr_* interface: QPs made by ibv_create_qp_ex with send_ops_flags
};

template <typename H, typename T>
inline H* handle_of(T* p) {
  return reinterpret_cast<H*>(p);
}

inline ContextHandle* ctx_of(ibv_context* c) {
  return reinterpret_cast<ContextHandle*>(reinterpret_cast<char*>(c) -
                                          offsetof(verbs_context, context));
}
inline Context* engine_of(ibv_context* c) { return ctx_of(c)->engine; }
inline Pd* engine_of(ibv_pd* p) { return handle_of<PdHandle>(p)->engine; }
inline Cq* engine_of(ibv_cq* c) { return handle_of<CqHandle>(c)->engine; }
inline Srq* engine_of(ibv_srq* s) { return handle_of<SrqHandle>(s)->engine; }
inline Qp* engine_of(ibv_qp* q) { return handle_of<QpHandle>(q)->engine; }
inline Channel* engine_of(ibv_comp_channel* c) { return handle_of<ChannelHandle>(c)->engine; }

// Sets errno and returns nullptr, for the pointer-returning verbs.
template <typename T = void>
inline T* fail(int err) {
  errno = err;
  return nullptr;
}

// The device's fixed description (also used by query_device_ex).
void fill_device_attr(ibv_context* ctx, ibv_device_attr& attr);
void fill_device_attr_ex(ibv_context* ctx, ibv_device_attr_ex& attr);
void fill_port_attr(ibv_port_attr& attr);
void fill_gid(ibv_context* ctx, ibv_gid& gid);

// The verbs_context operations of the extended verbs (create_cq_ex, create_qp_ex, ...).
void install_extended_ops(verbs_context& v);
// XRC (xrc.cc): the domain, XRC SRQ operations of the verbs_context; XRC_RECV QPs.
void install_xrc_ops(verbs_context& v);
ibv_qp* create_xrc_recv_qp(ibv_context* ctx, ibv_qp_init_attr_ex* attr);
// ibv_destroy_qp of an XRC_RECV QP's handle (its creator's or one ibv_open_qp gave): the QP
// goes with its last handle.
int destroy_xrc_recv_qp(ibv_qp* qp);
// Handles of XRC_RECV QPs held through vrdmad, another process's or handed over (xrc_shared.cc):
// `object_fd` is the QP object OpenXrcQp gave (taken over).
bool is_shared_recv_qp(ibv_qp* qp);
ibv_qp* open_shared_recv_qp(ibv_context* ctx, std::shared_ptr<Xrcd> xrcd, uint32_t qpn,
                            int object_fd, void* qp_context);
int modify_shared_recv_qp(ibv_qp* qp, const ibv_qp_attr& attr, int mask);
void query_shared_recv_qp(ibv_qp* qp, ibv_qp_attr& attr, ibv_qp_init_attr& init);
int destroy_shared_recv_qp(ibv_qp* qp);
// The context operations of memory windows (mw.cc), device memory (dm.cc), parent and thread
// domains (parent_domain.cc) and ODP advice.
void install_window_ops(ibv_context& c);
void install_memory_ops(verbs_context& v);
// Fills the extended-polling members of a CQ handle for the wc_flags asked for.
int init_cq_ex(CqHandle* h, uint64_t wc_flags);
// Frees what the ibv_wr_* interface of a QP holds (nothing for other QPs).
void free_wr_batch(QpHandle* h);

}  // namespace vrdma::compat
