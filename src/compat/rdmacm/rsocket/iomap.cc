// riomap, riounmap, riowrite: direct placement into a buffer the peer mapped.
//
// riomap with PROT_WRITE registers the buffer for remote write and announces it to the peer in
// the byte stream (a kIomap record in the ring, at most RDMA_IOMAPSIZE of the peer's at once),
// so the peer knows it before it reads anything sent after the riomap. riowrite is a plain
// RDMA WRITE into the peer's mapping: ordered with the stream, invisible to the peer's reads.
// PROT_NONE mappings are local registrations, kept until riounmap.
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>

#include "../export.h"
#include "socket.h"

namespace vrdma::rsock {

namespace {

const PeerMap* find_peer_map(const Socket& s, uint64_t offset) {
  for (const PeerMap& m : s.peer_maps)
    if (m.length && offset >= m.offset && offset - m.offset < m.length) return &m;
  return nullptr;
}

int free_index(const Socket& s) {
  for (uint32_t i = 0; i < s.peer_iomap; ++i) {
    bool used = false;
    for (const LocalMap& m : s.maps) used |= m.index == int(i);
    if (!used) return int(i);
  }
  return -1;
}

bool can_write(Socket& s) {
  if (s.err || s.wr_shut || s.peer_closed) return true;
  return sq_free(s) > kCtrlSends && (s.opt.inline_size > 0 || sbuf_free(s) > 0);
}

}  // namespace

}  // namespace vrdma::rsock

using namespace vrdma::rsock;

extern "C" {

VRDMA_EXPORT off_t riomap(int socket, void* buf, size_t len, int prot, int /*flags*/,
                          off_t offset) {
  Socket* s = lookup(socket);
  if (!s) return fail(EBADF);
  if (!buf || !len || (prot & ~PROT_WRITE) || offset < -1) return fail(EINVAL);
  std::lock_guard lock(s->mu);
  if (s->state != State::kConnected) return fail(ENOTCONN);
  if (offset == -1) offset = static_cast<off_t>(reinterpret_cast<uintptr_t>(buf));
  int index = -1;
  int access = IBV_ACCESS_LOCAL_WRITE;
  if (prot & PROT_WRITE) {
    index = free_index(*s);
    if (index < 0) return fail(ENOMEM);  // the peer's RDMA_IOMAPSIZE is used up
    access |= IBV_ACCESS_REMOTE_WRITE;
  }
  ibv_mr* mr = ibv_reg_mr(s->id->pd, buf, len, access);
  if (!mr) return fail(errno ? errno : ENOMEM);
  s->maps.push_back(LocalMap{mr, offset, index});
  if (index >= 0) {
    s->iomap_out.push_back(IomapEntry{uint64_t(offset), reinterpret_cast<uintptr_t>(buf), len,
                                      mr->rkey, uint32_t(index)});
    flush_iomaps(*s);  // the rest goes before the next data
  }
  return offset;
}

VRDMA_EXPORT int riounmap(int socket, void* buf, size_t len) {
  Socket* s = lookup(socket);
  if (!s) return fail(EBADF);
  std::lock_guard lock(s->mu);
  for (auto it = s->maps.begin(); it != s->maps.end(); ++it) {
    if (it->mr->addr != buf || it->mr->length != len) continue;
    if (it->index >= 0 && s->state == State::kConnected && !s->err) {
      s->iomap_out.push_back(IomapEntry{0, 0, 0, 0, uint32_t(it->index)});
      flush_iomaps(*s);
    }
    ibv_dereg_mr(it->mr);
    s->maps.erase(it);
    return 0;
  }
  return fail(EINVAL);
}

VRDMA_EXPORT size_t riowrite(int socket, const void* buf, size_t count, off_t offset, int flags) {
  Socket* s = lookup(socket);
  if (!s) return fail(EBADF);
  if ((count && !buf) || offset < 0) return fail(EINVAL);
  std::unique_lock lk(s->mu);
  if (s->state != State::kConnected) return fail(ENOTCONN);
  bool nonblock = (s->fl & O_NONBLOCK) || (flags & MSG_DONTWAIT);
  flush_iomaps(*s);
  const auto* p = static_cast<const uint8_t*>(buf);
  size_t done = 0;
  while (done < count) {
    int e = s->err ? s->err : (s->wr_shut || s->peer_closed) ? EPIPE : 0;
    const PeerMap* m = e ? nullptr : find_peer_map(*s, uint64_t(offset) + done);
    if (!e && !m) e = EINVAL;  // nothing of the peer's is mapped there
    if (e) {
      if (done) break;
      return fail(e);
    }
    uint64_t at = uint64_t(offset) + done;
    uint64_t n = count - done;
    if (n > m->offset + m->length - at) n = m->offset + m->length - at;
    if (n > kMaxPiece) n = kMaxPiece;
    if (n > s->opt.inline_size) {
      uint32_t sb = sbuf_free(*s);
      if (n > sb) n = sb > s->opt.inline_size ? sb : s->opt.inline_size;
    }
    if (n && sq_free(*s) > kCtrlSends) {
      if (int pe = post_write(*s, Op::kData, p + done, uint32_t(n), m->addr + (at - m->offset),
                              m->rkey, false)) {
        if (done) break;
        return fail(pe);
      }
      done += n;
      continue;
    }
    if (done && nonblock) break;
    if (int w = wait_until(*s, lk, nonblock, can_write)) {
      if (done) break;
      return fail(w);
    }
  }
  return done;
}

}  // extern "C"
