// Thread domains and parent domains: ibv_alloc_td/ibv_dealloc_td and ibv_alloc_parent_domain.
// A parent domain stands for its PD everywhere a PD goes (QPs, SRQs, MRs, windows, AHs) and
// may be named by an extended CQ. Its allocator, if the application gave one
// (IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS), provides the one buffer of a QP the process keeps
// for itself: its send queue (the requests waiting their turn, with their inline data),
// asked for with resource_type kResourceQpSendQueue (1) when the QP is created and given back
// when it is destroyed; IBV_ALLOCATOR_USE_DEFAULT leaves it to the library. Receive queues,
// completion queues and everything peers reach live in shared memory vrdmad hands out, which
// no allocator of the application can provide. A thread domain changes nothing: the library's
// locks are per QP already.
#include <errno.h>
#include <stdlib.h>

#include "compat/verbs/handles.h"

using namespace vrdma;
using namespace vrdma::compat;

namespace vrdma::compat {

namespace {

void* queue_alloc(void* owner, size_t size, size_t alignment) {
  auto* h = static_cast<PdHandle*>(owner);
  void* p = h->alloc(&h->ibv, h->pd_context, size, alignment, kResourceQpSendQueue);
  if (p == IBV_ALLOCATOR_USE_DEFAULT) return use_default_allocator();
  // Memory the QP cannot use as it is given (misaligned) is refused.
  if (p && reinterpret_cast<uintptr_t>(p) % alignment != 0) {
    if (h->free) h->free(&h->ibv, h->pd_context, p, kResourceQpSendQueue);
    return nullptr;
  }
  return p;
}

void queue_free(void* owner, void* p) {
  auto* h = static_cast<PdHandle*>(owner);
  if (h->free) h->free(&h->ibv, h->pd_context, p, kResourceQpSendQueue);
}

ibv_td* alloc_td(ibv_context* ctx, ibv_td_init_attr* attr) {
  if (!attr || attr->comp_mask != 0) return fail<ibv_td>(EINVAL);
  auto* td = static_cast<ibv_td*>(calloc(1, sizeof(ibv_td)));
  if (!td) return fail<ibv_td>(ENOMEM);
  td->context = ctx;
  return td;
}

int dealloc_td(ibv_td* td) {
  free(td);
  return 0;
}

ibv_pd* alloc_parent_domain(ibv_context* ctx, ibv_parent_domain_init_attr* attr) {
  if (!attr || !attr->pd || attr->pd->context != ctx) return fail<ibv_pd>(EINVAL);
  if (attr->comp_mask &
      ~uint32_t(IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS | IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT))
    return fail<ibv_pd>(EINVAL);
  if (attr->td && attr->td->context != ctx) return fail<ibv_pd>(EINVAL);
  PdHandle* base = handle_of<PdHandle>(attr->pd);
  if (base->parent_of) return fail<ibv_pd>(EINVAL);  // a parent domain of a parent domain
  const bool allocators = attr->comp_mask & IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS;
  if (allocators && (!attr->alloc || !attr->free)) return fail<ibv_pd>(EINVAL);
  auto* h = static_cast<PdHandle*>(calloc(1, sizeof(PdHandle)));
  if (!h) return fail<ibv_pd>(ENOMEM);
  h->engine = base->engine;
  h->parent_of = base;
  h->td = attr->td;
  if (allocators) {
    h->alloc = attr->alloc;
    h->free = attr->free;
  }
  if (attr->comp_mask & IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT) h->pd_context = attr->pd_context;
  h->ibv.context = ctx;
  h->ibv.handle = base->ibv.handle;
  return &h->ibv;
}

}  // namespace

QueueAllocator queue_allocator(ibv_pd* pd) {
  PdHandle* h = handle_of<PdHandle>(pd);
  if (!h->parent_of || !h->alloc) return {};
  return QueueAllocator{queue_alloc, queue_free, h};
}

bool is_parent_domain(ibv_context* ctx, ibv_pd* pd) {
  return pd && pd->context == ctx && handle_of<PdHandle>(pd)->parent_of;
}

void install_domain_ops(verbs_context& v) {
  v.alloc_td = alloc_td;
  v.dealloc_td = dealloc_td;
  v.alloc_parent_domain = alloc_parent_domain;
}

}  // namespace vrdma::compat
