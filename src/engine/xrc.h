// XRC: domains, and XRC SRQs. An XRC SRQ is reached by number: behind it stands a receive-only
// QP of type kQptXrcSrq (never modified, always ready) whose QPN is the SRQ number, whose
// receives are the SRQ's and whose completions go to the SRQ's CQ. vrdmad lets an XRC_SEND QP
// reach it only through the XRC_RECV QP it is connected to, of the same domain.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <memory>

#include "common/protocol.h"
#include "engine/objects.h"
#include "engine/qp.h"

namespace vrdma {

// The type vrdmad knows an XRC SRQ's receive side by (proto::QpType::kXrcSrq).
inline constexpr ibv_qp_type kQptXrcSrq = static_cast<ibv_qp_type>(0xfe);
static_assert(uint32_t(kQptXrcSrq) == uint32_t(proto::QpType::kXrcSrq));

class Xrcd {
 public:
  explicit Xrcd(Context& ctx) : ctx_(ctx), pd_(ctx), cq_(ctx, nullptr) {}
  ~Xrcd();
  Xrcd(const Xrcd&) = delete;
  Xrcd& operator=(const Xrcd&) = delete;

  // ibv_open_xrcd: the domain of the file `fd` (O_CREAT, O_EXCL as there), or with fd -1 a new
  // domain nobody else shares. 0 or a positive errno.
  int open(int fd, int oflags);
  uint32_t id() const { return id_; }
  // ibv_open_qp's check, by vrdmad: XRC_RECV QP `qpn` is of this domain and of this tenant.
  // 0, EINVAL (no such QP in the domain) or another positive errno.
  // `object_fd` (-1: none): the QP object, when the QP is another process's (xrc_shared_qp.h).
  int may_open_qp(uint32_t qpn, int* object_fd = nullptr);
  // What an XRC_RECV QP, which has neither, is made with: a protection domain and a CQ of the
  // domain's own, which nothing completes into.
  Pd& pd() { return pd_; }
  Cq& cq() { return cq_; }
  Context& context() { return ctx_; }
  void* user = nullptr;

 private:
  Context& ctx_;
  Pd pd_;
  Cq cq_;
  uint32_t id_ = 0;
};

class XrcSrq : public Srq {
 public:
  XrcSrq(Pd& pd, std::shared_ptr<Xrcd> xrcd, Cq& cq) : Srq(pd), xrcd_(std::move(xrcd)), cq_(cq) {}
  ~XrcSrq() override;
  // The SRQ, then its receive side, numbered by vrdmad and put into the domain.
  int init_xrc(const ibv_srq_attr& attr);
  uint32_t number() const { return target_ ? target_->qpn() : 0; }
  Xrcd& xrcd() { return *xrcd_; }

 private:
  std::shared_ptr<Xrcd> xrcd_;
  Cq& cq_;
  std::unique_ptr<Qp> target_;
};

}  // namespace vrdma
