// An XRC_RECV QP held by a process that did not make it (ibv_open_qp in another process of the
// domain, or the process it was handed over to when its maker let it go). Such a QP has no
// queues: what its handles share is its state, access flags and connection, which live in the
// QP's object (the page XRC_SEND senders read, shm::QpAttrs), mapped from the descriptor vrdmad
// gives with OpenXrcQp; its number, domain and connection are vrdmad's record.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>

#include "common/unix_socket.h"
#include "shm/layout.h"

namespace vrdma {

class Context;

// OpenXrcQp's answer: 0 and `*object_fd` the QP object's descriptor when the QP is held
// through vrdmad (-1: the caller's own QP), or EPROTO. The caller owns the descriptor.
int take_shared_qp_object(Packet& reply, int* object_fd);

// The last handle of XRC_RECV QP `qpn` in this process goes: true when another process holds
// the QP on (the caller leaves it alone), false when the caller was the last (it frees it; then
// `*object_fd_id` is its id of the QP object, 0 if none).
bool release_recv_qp(Context& ctx, uint32_t qpn, uint32_t* object_fd_id = nullptr);

class SharedRecvQp {
 public:
  SharedRecvQp(Context& ctx, uint32_t qpn) : ctx_(ctx), qpn_(qpn) {}
  ~SharedRecvQp();
  SharedRecvQp(const SharedRecvQp&) = delete;
  SharedRecvQp& operator=(const SharedRecvQp&) = delete;

  // Maps the QP object `fd` (taken over) and checks that it is QP `qpn`'s. 0 or an errno.
  int attach(int fd);
  int modify(const ibv_qp_attr& attr, int mask);
  void query(ibv_qp_attr& attr, ibv_qp_init_attr& init) const;
  ibv_qp_state state() const;
  uint32_t qpn() const { return qpn_; }
  // This handle goes: vrdmad counts it out; when it was the QP's last, the QP is freed.
  void close();
  // vrdmad says the QP's connection is lost (its XRC_SEND peer went): error state and
  // IBV_EVENT_QP_FATAL for `user`. Called by the device's progress thread.
  void fatal();

  void* user = nullptr;  // the ibv_qp its events name

 private:
  shm::QpAttrs& attrs() const { return obj_->attrs; }

  Context& ctx_;
  uint32_t qpn_;
  shm::QpObject* obj_ = nullptr;
  uint64_t size_ = 0;
  ibv_qp_attr attr_{};  // what this handle's modifies set beyond the shared state, for query
  bool closed_ = false;
};

}  // namespace vrdma
