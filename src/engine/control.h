// The library's connection to vrdmad: synchronous requests from any thread,
// and asynchronous notifications handed to a callback. Whichever thread is
// reading the socket (a caller waiting for its reply, or the progress thread)
// dispatches the notifications it meets.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <unordered_map>

#include "common/protocol.h"
#include "common/unix_socket.h"
#include "shm/peer.h"

namespace vrdma {

class Control {
 public:
  using EventHandler = std::function<void(const Packet&)>;
  using LostHandler = std::function<void()>;

  ~Control();

  // Connects and says hello. Returns 0 or an errno; *refused (when given) tells whether vrdmad
  // answered the Hello with that errno (it gives this process no device).
  int connect(const std::string& path, proto::HelloRep& hello, bool* refused = nullptr);

  void on_event(EventHandler h) { on_event_ = std::move(h); }
  void on_lost(LostHandler h) { on_lost_ = std::move(h); }

  // Sends a request and waits for its reply (bounded). Returns the reply status
  // (0 or an errno). `reply`, if given, receives the reply payload and fds.
  int call(proto::Op op, const void* req, size_t len, Packet* reply = nullptr,
           const int* fds = nullptr, int nfds = 0);

  template <typename Req>
  int call(proto::Op op, const Req& req, Packet* reply = nullptr, const int* fds = nullptr,
           int nfds = 0) {
    return call(op, &req, sizeof(req), reply, fds, nfds);
  }

  // Reads whatever notifications are waiting, without blocking. Called by the
  // progress thread when the socket is readable.
  void drain();

  int fd() const { return fd_; }
  bool lost() const { return lost_; }

  // The descriptors this process handed to vrdmad (PutFd) and still has: a new descriptor for
  // `fd_id` (the caller owns it), or -1. What the process's own direct connections map of
  // itself comes from here (engine/self_source.h).
  int dup_handed(uint32_t fd_id) const;
  // Sends a request whose answer nobody waits for (its reply, when it comes, is read and
  // dropped like any other not waited for): what undoes something and cannot fail in a way the
  // caller could act on (DropFd, FreeKey). Requests are handled in the order sent, so a later
  // call sees its effect. At most kMaxPosted go unanswered: the next waits for its reply (and
  // so reads all of theirs), so that replies never fill the socket, which would make vrdmad
  // drop the process. 0 or ENODEV.
  int post(proto::Op op, const void* req, size_t len);
  template <typename Req>
  int post(proto::Op op, const Req& req) {
    return post(op, &req, sizeof(req));
  }

  // A descriptor vrdmad opened for the process and keeps under `fd_id` (AdoptMemory): known to
  // dup_handed() as if the process had handed it over, until DropFd.
  void note_handed(uint32_t fd_id, int fd);

 private:
  void mark_lost();  // requires mu_
  int call_locked(proto::Op op, const void* req, size_t len, Packet* reply, const int* fds,
                  int nfds);
  // PutFd succeeded: fd_id names `fd` (the caller's, which keeps it until it drops the id).
  void handed(const void* req, size_t len, const int* fds, int nfds);
  void dropped(const void* req, size_t len);  // DropFd: the id is forgotten before the call

  int fd_ = -1;
  uint32_t seq_ = 0;
  static constexpr int kMaxPosted = 32;
  int posted_ = 0;  // requests posted since the last call that waited (requires mu_)
  bool lost_ = false;
  std::mutex mu_;  // one reader and one writer at a time
  EventHandler on_event_;
  LostHandler on_lost_;
  mutable std::mutex handed_mu_;
  std::unordered_map<uint32_t, int> handed_;  // fd id -> the owner's descriptor (borrowed)
};

// Peers' descriptors through GetFd (vrdmad checks that the caller may have them).
class ControlFdSource : public shm::FdSource {
 public:
  explicit ControlFdSource(Control& control) : control_(control) {}
  int fetch_fd(uint32_t owner, uint32_t fd_id, uint32_t via_qpn, int& fd) override;
  int grant_mr(uint32_t owner, uint32_t via_qpn, uint32_t key, uint32_t access,
               shm::MrGrant& out) override {
    return grant_mr_range(owner, via_qpn, key, access, 0, 0, out);
  }
  int grant_mr_range(uint32_t owner, uint32_t via_qpn, uint32_t key, uint32_t access,
                     uint64_t addr, uint64_t length, shm::MrGrant& out) override;

 private:
  Control& control_;
};

}  // namespace vrdma
