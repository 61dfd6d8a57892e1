#include "daemon/registry/object_view.h"

#include <errno.h>
#include <sys/mman.h>

#include <utility>

#include "shm/layout.h"
#include "shm/shared_file.h"
#include "shm/sigbus_guard.h"

namespace vrdma::daemon {

ObjectView::ObjectView(ObjectView&& o) noexcept
    : base_(std::exchange(o.base_, nullptr)), size_(std::exchange(o.size_, 0)) {}

ObjectView& ObjectView::operator=(ObjectView&& o) noexcept {
  if (this != &o) {
    unmap();
    base_ = std::exchange(o.base_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

int ObjectView::map(int fd, uint32_t owner) {
  unmap();
  shm::install_sigbus_guard();
  void* p = nullptr;
  uint64_t size = 0;
  if (int e = shm::map_sealed(fd, PROT_READ | PROT_WRITE, shm::kMaxObjectSize, p, size))
    return e == EPERM ? EPERM : EINVAL;
  const auto* h = static_cast<const shm::ObjectHeader*>(p);
  shm::ObjectHeader copy{};
  bool ok = size >= sizeof(shm::QpObject) && shm::guarded_call([&] {
              copy.magic = h->magic;
              copy.version = h->version;
              copy.kind = h->kind;
              copy.owner_client = h->owner_client;
              copy.size = h->size;
            });
  if (!ok || copy.magic != shm::kObjectMagic || copy.version != shm::kArenaVersion ||
      copy.kind != static_cast<uint32_t>(shm::ObjectKind::kQp) || copy.size != size ||
      copy.owner_client != owner) {
    ::munmap(p, size);
    return EINVAL;
  }
  base_ = static_cast<unsigned char*>(p);
  size_ = size;
  return 0;
}

void ObjectView::unmap() {
  if (base_) ::munmap(base_, size_);
  base_ = nullptr;
  size_ = 0;
}

bool ObjectView::mark_gone() {
  if (!base_) return false;
  auto* o = reinterpret_cast<shm::QpObject*>(base_);
  return shm::guarded_call([&] {
    o->attrs.state.store(IBV_QPS_ERR, std::memory_order_release);
    o->attrs.gone.store(1, std::memory_order_release);
  });
}

bool ObjectView::set_owner(uint32_t owner) {
  if (!base_) return false;
  auto* o = reinterpret_cast<shm::QpObject*>(base_);
  return shm::guarded_call([&] { o->hdr.owner_client = owner; });
}

bool ObjectView::read_rx(uint64_t* ops, uint64_t* bytes) const {
  if (!base_) return false;
  const auto* o = reinterpret_cast<const shm::QpObject*>(base_);
  uint64_t a = 0, b = 0;
  if (!shm::guarded_call([&] {
        a = o->rx_ops.load(std::memory_order_relaxed);
        b = o->rx_bytes.load(std::memory_order_relaxed);
      }))
    return false;
  *ops = a;
  *bytes = b;
  return true;
}

bool ObjectView::read_rx_requests(uint64_t (&requests)[4]) const {
  static_assert(shm::kOpClasses == 4);
  if (!base_) return false;
  const auto* o = reinterpret_cast<const shm::QpObject*>(base_);
  uint64_t r[4] = {};
  if (!shm::guarded_call([&] {
        for (int i = 0; i < 4; ++i) r[i] = o->rx_requests[i].load(std::memory_order_relaxed);
      }))
    return false;
  for (int i = 0; i < 4; ++i) requests[i] = r[i];
  return true;
}

}  // namespace vrdma::daemon
