// Device memory: ibv_alloc_dm, ibv_memcpy_to_dm/from_dm, ibv_free_dm and ibv_reg_dm_mr. A
// virtual device has no memory of its own: an allocation is page-aligned anonymous memory of
// the process, at most kMaxDmSize bytes (the device's max_dm_size). Copies take offsets and
// lengths that are multiples of 4 within the allocation, as device memory does. ibv_reg_dm_mr
// registers a range of it as any MR (zero-based: the MR's addresses start at 0), usable as a
// local SGE and as a remote target.
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <atomic>

#include "compat/verbs/handles.h"

using namespace vrdma;
using namespace vrdma::compat;

namespace vrdma::compat {

struct DmHandle {
  ibv_dm ibv;
  uint8_t* base;
  size_t length;              // what was asked for
  size_t mapped;              // whole pages
  std::atomic<uint32_t> mrs;  // MRs registered over it
};

namespace {

constexpr uint64_t kPage = 4096;
constexpr uint32_t kDmAlign = 4;

DmHandle* dm_of(ibv_dm* dm) {
  return reinterpret_cast<DmHandle*>(dm);
}

bool range_ok(const DmHandle* d, uint64_t offset, size_t length) {
  return offset % kDmAlign == 0 && length % kDmAlign == 0 && offset <= d->length &&
         length <= d->length - offset;
}

int memcpy_to_dm(ibv_dm* dm, uint64_t offset, const void* host, size_t length) {
  DmHandle* d = dm_of(dm);
  if (!range_ok(d, offset, length) || (length && !host)) return EINVAL;
  memcpy(d->base + offset, host, length);
  return 0;
}

int memcpy_from_dm(void* host, ibv_dm* dm, uint64_t offset, size_t length) {
  DmHandle* d = dm_of(dm);
  if (!range_ok(d, offset, length) || (length && !host)) return EINVAL;
  memcpy(host, d->base + offset, length);
  return 0;
}

ibv_dm* alloc_dm(ibv_context* ctx, ibv_alloc_dm_attr* attr) {
  if (!attr || attr->comp_mask != 0) return fail<ibv_dm>(EINVAL);
  if (attr->length == 0 || attr->length > kMaxDmSize) return fail<ibv_dm>(ENOMEM);
  if (attr->log_align_req > 12) return fail<ibv_dm>(EINVAL);  // pages are what it has
  size_t mapped = (attr->length + kPage - 1) & ~(kPage - 1);
  void* p = ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return fail<ibv_dm>(ENOMEM);
  auto* d = new (std::nothrow) DmHandle{};
  if (!d) {
    ::munmap(p, mapped);
    return fail<ibv_dm>(ENOMEM);
  }
  d->ibv.context = ctx;
  d->ibv.memcpy_to_dm = memcpy_to_dm;
  d->ibv.memcpy_from_dm = memcpy_from_dm;
  d->ibv.comp_mask = 0;
  d->ibv.handle = 0;
  d->base = static_cast<uint8_t*>(p);
  d->length = attr->length;
  d->mapped = mapped;
  return &d->ibv;
}

// Refused (EBUSY) while an MR is registered over it.
int free_dm(ibv_dm* dm) {
  DmHandle* d = dm_of(dm);
  if (d->mrs.load() != 0) return EBUSY;
  ::munmap(d->base, d->mapped);
  delete d;
  return 0;
}

ibv_mr* reg_dm_mr(ibv_pd* pd, ibv_dm* dm, uint64_t offset, size_t length, unsigned access) {
  DmHandle* d = dm_of(dm);
  if (!pd || !dm || pd->context != dm->context) return fail<ibv_mr>(EINVAL);
  // Device memory is addressed from 0 (its MRs are zero-based), as rdma-core requires.
  if (!(access & IBV_ACCESS_ZERO_BASED)) return fail<ibv_mr>(EINVAL);
  if (offset > d->length || length > d->length - offset) return fail<ibv_mr>(EINVAL);
  unsigned base_access = access & ~static_cast<unsigned>(IBV_ACCESS_ZERO_BASED);
  if ((base_access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
      !(base_access & IBV_ACCESS_LOCAL_WRITE))
    return fail<ibv_mr>(EINVAL);
  Pd* p = engine_of(pd);
  auto* h = static_cast<MrHandle*>(calloc(1, sizeof(MrHandle)));
  if (!h) return fail<ibv_mr>(ENOMEM);
  // A zero-length MR reaches nothing; the engine registers at least one byte.
  LocalMr mr;
  if (int e = p->context().device().memory().reg(p->id(), d->base + offset, length ? length : 1, 0,
                                                 base_access, mr)) {
    free(h);
    return fail<ibv_mr>(e);
  }
  d->mrs.fetch_add(1);
  h->pd = handle_of<PdHandle>(pd);
  h->dm = &d->mrs;
  h->ibv.context = pd->context;
  h->ibv.pd = pd;
  h->ibv.addr = nullptr;  // zero-based
  h->ibv.length = length;
  h->ibv.handle = mr.key;
  h->ibv.lkey = mr.key;
  h->ibv.rkey = mr.key;
  return &h->ibv;
}

}  // namespace

void install_dm_ops(verbs_context& v) {
  v.alloc_dm = alloc_dm;
  v.free_dm = free_dm;
  v.reg_dm_mr = reg_dm_mr;
}

}  // namespace vrdma::compat
