#include "engine/objects.h"

#include <sched.h>

#include <errno.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>

namespace vrdma {

// ---- Context ------------------------------------------------------------

Context::Context(std::shared_ptr<Device> dev) : dev_(std::move(dev)) {}

Context::~Context() {
  dev_->remove_context(this);
  if (async_fd_ >= 0) ::close(async_fd_);
}

int Context::init() {
  async_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_SEMAPHORE);
  if (async_fd_ < 0) return errno;
  dev_->add_context(this);
  return 0;
}

void Context::push_event(ibv_event_type type, void* u) {
  {
    std::lock_guard lock(mu_);
    events_.push_back(AsyncEvent{type, u});
  }
  uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(async_fd_, &one, sizeof(one));
}

int Context::get_event(AsyncEvent& out) {
  uint64_t v;
  for (;;) {
    ssize_t n = ::read(async_fd_, &v, sizeof(v));
    if (n == sizeof(v)) break;
    if (n < 0 && errno == EINTR) continue;
    return n < 0 ? errno : EIO;
  }
  std::lock_guard lock(mu_);
  if (events_.empty()) return EAGAIN;
  out = events_.front();
  events_.pop_front();
  return 0;
}

// ---- Channel ------------------------------------------------------------

Channel::~Channel() {
  if (fd_id_) {
    proto::DropFdReq req{fd_id_};
    ctx_.device().control().call(proto::Op::kDropFd, req);
  }
  if (fd_ >= 0) ::close(fd_);
}

int Channel::init() {
  fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_SEMAPHORE);
  if (fd_ < 0) return errno;
  fd_id_ = ctx_.device().new_fd_id();
  proto::PutFdReq req{fd_id_, static_cast<uint32_t>(proto::FdKind::kEvent), 0};
  int e = ctx_.device().control().call(proto::Op::kPutFd, req, nullptr, &fd_, 1);
  if (e) fd_id_ = 0;
  return e;
}

void Channel::attach(Cq* cq) {
  std::lock_guard lock(mu_);
  cqs_.push_back(cq);
}

void Channel::detach(Cq* cq) {
  std::lock_guard lock(mu_);
  cqs_.erase(std::remove(cqs_.begin(), cqs_.end(), cq), cqs_.end());
}

int Channel::cq_count() {
  std::lock_guard lock(mu_);
  return static_cast<int>(cqs_.size());
}

int Channel::get_event(Cq*& out) {
  uint64_t v;
  for (;;) {
    ssize_t n = ::read(fd_, &v, sizeof(v));
    if (n == sizeof(v)) break;
    if (n < 0 && errno == EINTR) continue;
    return n < 0 ? errno : EIO;
  }
  std::lock_guard lock(mu_);
  for (Cq* cq : cqs_) {
    auto* shared = ctx_.device().arena().at<shm::CqShared>(cq->offset());
    uint32_t e = shared->events.load(std::memory_order_relaxed);
    while (e && !shared->events.compare_exchange_weak(e, e - 1)) {
    }
    if (e) {
      cq->event_delivered();
      out = cq;
      return 0;
    }
  }
  return EAGAIN;
}

// ---- Pd -----------------------------------------------------------------

namespace {
std::atomic<uint32_t> g_next_pd{1};
}

Pd::Pd(Context& ctx) : ctx_(ctx), id_(g_next_pd.fetch_add(1)) {}

// ---- Cq -----------------------------------------------------------------

Cq::~Cq() {
  if (channel_) channel_->detach(this);
  if (offset_) ctx_.device().arena().free(offset_);
}

int Cq::init(int cqe) {
  if (cqe < 1 || cqe > (1 << 22)) return EINVAL;
  uint32_t cap = shm::pow2_at_least(static_cast<uint32_t>(cqe));
  Arena& arena = ctx_.device().arena();
  offset_ = arena.alloc(shm::cq_bytes(cap));
  if (!offset_) return ENOMEM;
  auto* shared = arena.at<shm::CqShared>(offset_);
  shm::cq_init(shared, cap, channel_ ? channel_->fd_id() : 0);
  view_ = shm::CqView{shared, cap - 1};
  if (channel_) channel_->attach(this);
  return 0;
}

int Cq::poll(int n, ibv_wc* wc) {
  if (n <= 0) return 0;
  // Spinning on an empty queue reads one cache line and takes no lock.
  auto take = [&] {
    if (!shm::cq_ready(view_)) return 0;
    std::lock_guard lock(poll_lock_);
    return shm::cq_poll(view_, n, wc);
  };
  if (int got = take()) return got;
  if (ctx_.device().has_blocked()) {
    ctx_.device().progress_blocked();
    if (int got = take()) return got;
  }
  if (view_.cq->overflow.load(std::memory_order_relaxed) && !overflow_reported_.exchange(true))
    ctx_.push_event(IBV_EVENT_CQ_ERR, user);
  // Completions of routed work come from this host's router, which needs a core to make
  // them: an application spinning on an empty CQ lends it its turn.
  if (ctx_.device().yields_to_router()) sched_yield();
  return 0;
}

int Cq::arm(bool solicited_only) {
  shm::cq_arm(view_.cq, solicited_only);
  return 0;
}

void Cq::push(const ibv_wc& wc, bool solicited) {
  if (!shm::cq_push(view_, wc)) {
    if (!overflow_reported_.exchange(true)) ctx_.push_event(IBV_EVENT_CQ_ERR, user);
    return;
  }
  if (channel_ && shm::cq_should_notify(view_.cq, solicited)) {
    uint64_t one = 1;
    [[maybe_unused]] ssize_t r = ::write(channel_->fd(), &one, sizeof(one));
  }
}

void Cq::event_delivered() {
  std::lock_guard lock(ev_mu_);
  ++delivered_;
}

void Cq::ack(unsigned n) {
  std::lock_guard lock(ev_mu_);
  acked_ += n;
  ev_cv_.notify_all();
}

void Cq::wait_acked() {
  std::unique_lock lock(ev_mu_);
  ev_cv_.wait(lock, [&] { return acked_ >= delivered_; });
}

// ---- Srq ----------------------------------------------------------------

Srq::~Srq() {
  if (offset_) pd_.context().device().arena().free(offset_);
}

int Srq::init(const ibv_srq_attr& attr) {
  if (attr.max_wr == 0 || attr.max_wr > 16384 || attr.max_sge == 0 ||
      attr.max_sge > shm::kMaxRecvSge)
    return EINVAL;
  max_wr_ = shm::pow2_at_least(attr.max_wr);
  Arena& arena = pd_.context().device().arena();
  offset_ = arena.alloc(shm::rq_bytes(max_wr_, attr.max_sge));
  if (!offset_) return ENOMEM;
  auto* rq = arena.at<shm::RecvQueue>(offset_);
  shm::rq_init(rq, max_wr_, attr.max_sge, true);
  rq->limit.store(attr.srq_limit);
  view_ = shm::RqView{rq, max_wr_ - 1, attr.max_sge, rq->entry_size};
  return 0;
}

int Srq::post(ibv_recv_wr* wr, ibv_recv_wr** bad) {
  std::lock_guard lock(lock_);
  for (; wr; wr = wr->next) {
    if (wr->num_sge < 0 || static_cast<uint32_t>(wr->num_sge) > view_.max_sge) {
      *bad = wr;
      return EINVAL;
    }
    if (!shm::rq_push(view_, wr->wr_id, wr->sg_list, static_cast<uint32_t>(wr->num_sge))) {
      *bad = wr;
      return ENOMEM;
    }
  }
  return 0;
}

int Srq::modify(const ibv_srq_attr& attr, int mask) {
  if (mask & IBV_SRQ_MAX_WR) return EINVAL;  // resizing is not supported
  if (mask & IBV_SRQ_LIMIT) {
    if (attr.srq_limit > max_wr_) return EINVAL;
    view_.rq->limit.store(attr.srq_limit);
  }
  return 0;
}

void Srq::query(ibv_srq_attr& attr) const {
  attr.max_wr = max_wr_;
  attr.max_sge = view_.max_sge;
  attr.srq_limit = view_.rq->limit.load();
}

}  // namespace vrdma
