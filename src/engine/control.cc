#include "engine/control.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <memory>

namespace vrdma {

namespace {
constexpr int kReplyTimeoutMs = 10000;
}

Control::~Control() {
  if (fd_ >= 0) ::close(fd_);
}

int Control::connect(const std::string& path, proto::HelloRep& hello, bool* refused) {
  int fd = unix_connect(path);
  if (fd < 0) return -fd;
  fd_ = fd;
  proto::HelloReq req{proto::kVersion, static_cast<uint32_t>(proto::ClientKind::kVerbs)};
  auto reply = std::make_unique<Packet>();
  int rc = call(proto::Op::kHello, req, reply.get());
  if (rc) {
    if (refused) *refused = !lost_;
    return rc;
  }
  auto* rep = reply->as<proto::HelloRep>();
  if (!rep) return EPROTO;
  hello = *rep;
  return 0;
}

void Control::mark_lost() {
  if (lost_) return;
  lost_ = true;
  if (on_lost_) on_lost_();
}

int Control::dup_handed(uint32_t fd_id) const {
  std::lock_guard lock(handed_mu_);
  auto it = handed_.find(fd_id);
  return it == handed_.end() ? -1 : ::fcntl(it->second, F_DUPFD_CLOEXEC, 0);
}

void Control::handed(const void* req, size_t len, const int* fds, int nfds) {
  if (len != sizeof(proto::PutFdReq) || nfds != 1) return;
  proto::PutFdReq r;
  memcpy(&r, req, sizeof(r));
  std::lock_guard lock(handed_mu_);
  handed_[r.fd_id] = fds[0];
}

void Control::note_handed(uint32_t fd_id, int fd) {
  std::lock_guard lock(handed_mu_);
  handed_[fd_id] = fd;
}

void Control::dropped(const void* req, size_t len) {
  if (len != sizeof(proto::DropFdReq)) return;
  proto::DropFdReq r;
  memcpy(&r, req, sizeof(r));
  std::lock_guard lock(handed_mu_);
  handed_.erase(r.fd_id);
}

int Control::call(proto::Op op, const void* req, size_t len, Packet* reply, const int* fds,
                  int nfds) {
  // The owner closes a descriptor after it dropped its id: forgotten first.
  if (op == proto::Op::kDropFd) dropped(req, len);
  int status = call_locked(op, req, len, reply, fds, nfds);
  if (op == proto::Op::kPutFd && status == 0) handed(req, len, fds, nfds);
  return status;
}

int Control::post(proto::Op op, const void* req, size_t len) {
  if (op == proto::Op::kDropFd) dropped(req, len);
  {
    std::lock_guard lock(mu_);
    if (posted_ < kMaxPosted) {
      ++posted_;
      if (lost_) return ENODEV;
      uint32_t seq = ++seq_;
      if (seq == 0) seq = ++seq_;
      if (send_packet(fd_, op, seq, 0, req, len) != 0) {
        mark_lost();
        return ENODEV;
      }
      return 0;
    }
  }
  // Enough replies unread: this one is waited for, reading theirs on the way.
  const int e = call_locked(op, req, len, nullptr, nullptr, 0);
  return e == ENODEV || e == ETIMEDOUT ? ENODEV : 0;
}

int Control::call_locked(proto::Op op, const void* req, size_t len, Packet* reply,
                         const int* fds, int nfds) {
  std::lock_guard lock(mu_);
  if (lost_) return ENODEV;
  uint32_t seq = ++seq_;
  if (seq == 0) seq = ++seq_;
  if (send_packet(fd_, op, seq, 0, req, len, std::span<const int>(fds, nfds)) != 0) {
    mark_lost();
    return ENODEV;
  }
  std::unique_ptr<Packet> own;
  if (!reply) {
    own = std::make_unique<Packet>();
    reply = own.get();
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kReplyTimeoutMs);
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                    deadline - std::chrono::steady_clock::now())
                    .count();
    if (left <= 0) {
      mark_lost();
      return ETIMEDOUT;
    }
    pollfd p{fd_, POLLIN, 0};
    int n = ::poll(&p, 1, static_cast<int>(left));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) continue;
    int r = recv_packet(fd_, *reply);
    if (r < 0 || reply->truncated) {
      reply->close_fds();
      mark_lost();
      return ENODEV;
    }
    if (reply->header.seq == 0) {
      if (on_event_) on_event_(*reply);
      reply->close_fds();
      continue;
    }
    if (reply->header.seq != seq) {
      reply->close_fds();
      continue;
    }
    posted_ = 0;  // the replies of requests sent before this one were read before it
    if (!own) return reply->header.status;
    reply->close_fds();
    return reply->header.status;
  }
}

void Control::drain() {
  std::lock_guard lock(mu_);
  if (lost_) return;
  auto pkt = std::make_unique<Packet>();
  for (;;) {
    int r = recv_packet(fd_, *pkt, MSG_DONTWAIT);
    if (r == -EAGAIN || r == -EWOULDBLOCK) return;
    if (r < 0 || pkt->truncated) {
      pkt->close_fds();
      mark_lost();
      return;
    }
    if (pkt->header.seq == 0 && on_event_) on_event_(*pkt);
    pkt->close_fds();
  }
}

int ControlFdSource::fetch_fd(uint32_t owner, uint32_t fd_id, uint32_t via_qpn, int& fd) {
  proto::GetFdReq req{owner, fd_id, via_qpn, 0};
  auto reply = std::make_unique<Packet>();
  int e = control_.call(proto::Op::kGetFd, req, reply.get());
  if (e) {
    reply->close_fds();
    return e;
  }
  if (reply->nfds != 1) {
    reply->close_fds();
    return EPROTO;
  }
  fd = reply->fds[0];
  return 0;
}

int ControlFdSource::grant_mr_range(uint32_t owner, uint32_t via_qpn, uint32_t key,
                                    uint32_t access, uint64_t addr, uint64_t length,
                                    shm::MrGrant& out) {
  proto::GetMrReq req{owner, via_qpn, key, access, addr, length};
  auto reply = std::make_unique<Packet>();
  int e = control_.call(proto::Op::kGetMr, req, reply.get());
  const auto* rep = reply->as<proto::GetMrRep>();
  if (e || !rep || rep->nseg == 0 || rep->nseg > shm::kMaxMrSegments ||
      reply->nfds != static_cast<int>(rep->nseg)) {
    reply->close_fds();
    return e ? e : EPROTO;
  }
  out.slot = rep->slot;
  out.gen = rep->gen;
  out.access = rep->access;
  out.pd = rep->pd;
  out.nseg = rep->nseg;
  out.writable = rep->writable != 0;
  out.implicit = rep->implicit != 0;
  out.iova = rep->iova;
  out.length = rep->length;
  out.va_offset = rep->va_offset;
  out.map_length = rep->map_length;
  for (uint32_t i = 0; i < rep->nseg; ++i) {
    out.seg[i] = shm::MrGrant::Seg{rep->seg[i].fd_id, rep->seg[i].offset, rep->seg[i].length};
    out.fds[i] = reply->fds[i];
  }
  reply->nfds = 0;
  return 0;
}

}  // namespace vrdma
