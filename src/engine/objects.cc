#include "engine/objects.h"

#include <sched.h>

#include <errno.h>
#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>

#include "common/clock.h"
#include "engine/direct.h"
#include "engine/implicit_odp.h"
#include "engine/poll_backoff.h"
#include "engine/xrc.h"

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
  if (fd_ >= 0) ::close(fd_);
}

int Channel::init() {
  fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  return fd_ < 0 ? errno : 0;
}

void Channel::watch(int efd, Cq* cq) {
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLET;
  ev.data.ptr = cq;
  ::epoll_ctl(fd_, EPOLL_CTL_ADD, efd, &ev);
}

void Channel::unwatch(int efd) { ::epoll_ctl(fd_, EPOLL_CTL_DEL, efd, nullptr); }

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
  for (;;) {
    int flags = ::fcntl(fd_, F_GETFL);
    bool nonblocking = flags >= 0 && (flags & O_NONBLOCK);
    // One event at a time: the others stay ready, so the descriptor stays readable for an
    // application that polls it before calling again.
    epoll_event ev{};
    int n = ::epoll_wait(fd_, &ev, 1, nonblocking ? 0 : -1);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    if (n == 0) return EAGAIN;
    auto* cq = static_cast<Cq*>(ev.data.ptr);
    std::lock_guard lock(mu_);
    // A wake-up of a CQ that is gone, or that was not armed (a sender's extra write): not an
    // event.
    if (std::find(cqs_.begin(), cqs_.end(), cq) == cqs_.end() || !cq->take_event()) continue;
    cq->event_delivered();
    out = cq;
    return 0;
  }
}

// ---- Pd -----------------------------------------------------------------

namespace {
std::atomic<uint32_t> g_next_pd{1};
// A RoCE completion's SL field: the received packet's L3 header type.
constexpr uint8_t kRoceL3HeaderIpv4 = 2;
}  // namespace

Pd::Pd(Context& ctx) : ctx_(ctx), id_(g_next_pd.fetch_add(1)) {}

// ---- Cq -----------------------------------------------------------------

Cq::~Cq() {
  if (channel_) {
    if (event_fd_ >= 0) channel_->unwatch(event_fd_);
    channel_->detach(this);
  }
  if (event_fd_id_) {
    proto::DropFdReq req{event_fd_id_};
    ctx_.device().control().call(proto::Op::kDropFd, req);
  }
  if (event_fd_ >= 0) ::close(event_fd_);
  if (direct_epfd_ >= 0) ::close(direct_epfd_);
  if (offset_) ctx_.device().arena().free(offset_);
}

int Cq::init(int cqe) {
  if (cqe < 1 || cqe > kMaxCqe) return EINVAL;
  cqe_ = promised_ = shm::pow2_at_least(static_cast<uint32_t>(cqe));
  uint32_t cap = std::max(cqe_, kMinRing);
  Arena& arena = ctx_.device().arena();
  if (channel_) {
    // The router's completions wake the channel through this eventfd (vrdmad's only).
    event_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (event_fd_ < 0) return errno;
    event_fd_id_ = ctx_.device().new_fd_id();
    proto::PutFdReq req{event_fd_id_, static_cast<uint32_t>(proto::FdKind::kEvent), 0, 0, 0};
    if (int e = ctx_.device().control().call(proto::Op::kPutFd, req, nullptr, &event_fd_, 1)) {
      event_fd_id_ = 0;
      return e;
    }
  }
  offset_ = arena.alloc(shm::cq_bytes(cap));
  if (!offset_) return ENOMEM;
  auto* shared = arena.at<shm::CqShared>(offset_);
  shm::cq_init(shared, cap, event_fd_id_, cqe_);
  view_ = shm::CqView{shared, cap - 1};
  if (channel_) {
    channel_->attach(this);
    channel_->watch(event_fd_, this);
  }
  return 0;
}

void Cq::attach(RecvSource* src) {
  std::lock_guard lock(poll_lock_);
  sources_.push_back(src);
  if (armed_.load(std::memory_order_relaxed))
    shm::arm_word(src->ring.ring->armed, armed_.load(std::memory_order_relaxed) == 2);
}

void Cq::detach(RecvSource* src) {
  std::lock_guard lock(poll_lock_);
  sources_.erase(std::remove(sources_.begin(), sources_.end(), src), sources_.end());
}

void Cq::attach(const shm::SendQueue* sq) {
  std::lock_guard lock(poll_lock_);
  sqs_.push_back(sq);
}

void Cq::detach(const shm::SendQueue* sq) {
  std::lock_guard lock(poll_lock_);
  sqs_.erase(std::remove(sqs_.begin(), sqs_.end(), sq), sqs_.end());
}

bool Cq::streaming(const shm::SendQueue** deepest) {
  std::lock_guard lock(poll_lock_);
  *deepest = nullptr;
  uint64_t most = 0;
  for (const shm::SendQueue* sq : sqs_) {
    if (!poll_backoff::router_streams(*sq)) continue;
    const uint64_t queued =
        sq->tail.load(std::memory_order_relaxed) - sq->done.load(std::memory_order_relaxed);
    if (queued > most) {
      most = queued;
      *deepest = sq;
    }
  }
  // Or the last message received said its sender has more queued behind it.
  return *deepest || more_coming_.live(now_ns());
}

void Cq::settle(RecvSource& src) {
  std::lock_guard lock(poll_lock_);
  ibv_wc wc[32];
  // Bounded: a ring's worth of reports at most per round, as many rounds as the ring has room.
  for (uint32_t round = 0; round <= src.ring.mask / 32 + 1; ++round) {
    int n = take_recv(src, 32, wc);
    if (n == 0) break;
    for (int i = 0; i < n; ++i) push(wc[i], false);
  }
}

// Receive completions of one QP, each checked against the receives the QP (or its SRQ) has
// outstanding: a report that names anything else is dropped and counted. At most one ring's
// worth of reports is looked at per call, whatever a sender keeps pushing.
int Cq::take_recv(RecvSource& src, int max, ibv_wc* out) {
  int n = 0;
  shm::RecvReport r;
  for (uint32_t looked = 0; n < max && looked <= src.ring.mask; ++looked) {
    if (!shm::ring_take(src.ring, src.head, r)) break;
    uint64_t wr_id;
    uint32_t room;
    bool ud = src.type == IBV_QPT_UD;
    bool ok = r.status <= shm::kRecvProtErr && r.opcode <= shm::kRecvWriteImm &&
              !(ud && r.opcode != shm::kRecvSend) &&
              (r.flags & ~(shm::kRecvImm | shm::kRecvGrh | shm::kRecvInv | shm::kRecvMore)) == 0 &&
              !(r.flags & shm::kRecvGrh && !ud) &&
              !(r.flags & shm::kRecvInv && (ud || r.flags & shm::kRecvImm));
    // Only a receive that is outstanding at that index completes, once; a length it cannot
    // hold makes it a length error.
    if (ok) ok = src.recvs->complete(r.index, wr_id, room);
    if (ok && src.srq) src.srq->check_limit();
    if (ok && r.status == shm::kRecvOk && r.opcode == shm::kRecvSend && r.byte_len > room)
      r.status = shm::kRecvLenErr;
    // SEND_WITH_INV: the window dies before its completion is seen; a key that names no type-2
    // window of this process makes the receive fail.
    if (ok && r.status == shm::kRecvOk && (r.flags & shm::kRecvInv) &&
        ctx_.device().memory().invalidate_window(r.imm_data, 0) != 0)
      r.status = shm::kRecvProtErr;
    if (!ok) {
      if (src.counters) src.counters->dropped.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    more_coming_.heard((r.flags & shm::kRecvMore) != 0);
    ibv_wc& wc = out[n++];
    wc = ibv_wc{};
    wc.wr_id = wr_id;
    wc.status = r.status == shm::kRecvOk      ? IBV_WC_SUCCESS
                : r.status == shm::kRecvLenErr ? IBV_WC_LOC_LEN_ERR
                                               : IBV_WC_LOC_PROT_ERR;
    if (src.counters)
      shm::bump(r.status == shm::kRecvOk       ? src.counters->recv_ok
                : r.status == shm::kRecvLenErr ? src.counters->recv_len_err
                                               : src.counters->recv_prot_err);
    wc.opcode = r.opcode == shm::kRecvWriteImm ? IBV_WC_RECV_RDMA_WITH_IMM : IBV_WC_RECV;
    // An XRC SRQ's receive: the XRC_RECV QP it came through, as hardware reports it.
    wc.qp_num = src.type == kQptXrcSrq ? (r.dst_qp & 0xFFFFFF) : src.qpn;
    // UD and XRC SRQs: whoever sent it; RC and UC: the connected QP.
    const bool any_source = ud || src.type == kQptXrcSrq;
    wc.src_qp = any_source ? (r.src_qp & 0xFFFFFF) : src.peer_qpn.load(std::memory_order_relaxed);
    if (wc.status == IBV_WC_SUCCESS) {
      wc.byte_len = r.byte_len;
      if (r.flags & shm::kRecvImm) {
        wc.wc_flags |= IBV_WC_WITH_IMM;
        wc.imm_data = r.imm_data;
      }
      if (r.flags & shm::kRecvInv) {
        wc.wc_flags |= IBV_WC_WITH_INV;
        wc.invalidated_rkey = r.imm_data;
      }
      if (r.flags & shm::kRecvGrh) {
        // As a RoCE v2 device reports a datagram: its GRH area holds an IPv4 header, and the
        // SL field of a RoCE completion carries the L3 header type (0 GRH, 1 IPv6, 2 IPv4),
        // which tells a reader where the destination address sits in those 40 bytes.
        wc.wc_flags |= IBV_WC_GRH;
        wc.sl = kRoceL3HeaderIpv4;
      }
    }
  }
  return n;
}

void Cq::remove_qp(uint32_t qpn) {
  std::lock_guard lock(poll_lock_);
  shm::cq_remove_qp(view_, head_, qpn);
}

int Cq::resize(int cqe) {
  if (cqe < 1 || cqe > kMaxCqe) return EINVAL;
  uint32_t want = shm::pow2_at_least(static_cast<uint32_t>(cqe));
  if (want > view_.mask + 1) return ENOMEM;
  std::lock_guard lock(poll_lock_);
  uint64_t waiting = view_.cq->tail.load(std::memory_order_acquire) - head_;
  if (waiting > static_cast<uint64_t>(cqe)) return EINVAL;
  // Growing opens more of the ring; shrinking keeps it open (the CQ then holds more than it
  // promises, never less): closing cells a producer may be filling cannot be done safely.
  if (want > cqe_) {
    shm::cq_open(view_, head_, cqe_, want - cqe_);
    cqe_ = want;
  }
  promised_ = want;
  return 0;
}

int Cq::poll(int n, ibv_wc* wc) {
  if (n <= 0) return 0;
  auto take = [&] {
    std::lock_guard lock(poll_lock_);
    int got = shm::cq_poll(view_, head_, n, wc, cqe_);
    size_t count = sources_.size();
    for (size_t i = 0; i < count && got < n; ++i) {
      RecvSource* src = sources_[(next_source_ + i) % count];
      got += take_recv(*src, n - got, wc + got);
    }
    if (count) next_source_ = (next_source_ + 1) % count;
    return got;
  };
  int got = take();
  if (!got && has_direct_.load(std::memory_order_relaxed)) {
    drive_direct();
    got = take();
  }
  if (!got && ctx_.device().has_blocked()) {
    ctx_.device().progress_blocked();
    got = take();
  }
  if (got) {
    poll_backoff::found();
    return got;
  }
  if (view_.cq->overflow.load(std::memory_order_relaxed) && !overflow_reported_.exchange(true))
    ctx_.push_event(IBV_EVENT_CQ_ERR, user);
  // Completions of routed work come from this host's router, which needs a core to make
  // them: an application spinning on an empty CQ lends it its turn, and leaves the core to it
  // for a while when the router is at work on this CQ's requests (poll_backoff.h).
  // Completions of direct work come from the other side's processes and this host's kernel
  // (the socket's bytes): a thread that has waited a while on a stream of its own requests
  // (kDeepQueue or more outstanding) lends its core to them between polls, as it does to the
  // router. Latency-bound work (a request or two in flight) keeps spinning.
  if (has_direct_.load(std::memory_order_relaxed) && poll_backoff::waited_long() &&
      direct_streams()) {
    sched_yield();
    return 0;
  }
  if (ctx_.device().yields_to_router()) {
    const shm::SendQueue* sq = nullptr;
    if (poll_backoff::waited_long() && streaming(&sq))
      poll_backoff::nap(sq);
    else
      sched_yield();
  }
  return 0;
}

void Cq::attach_direct(std::shared_ptr<DirectLink> c) {
  std::lock_guard lock(direct_lock_);
  // Several QPs of the CQ may use one connection: counted.
  for (auto& [conn, n] : direct_)
    if (conn == c) return void(++n);
  if (direct_epfd_ < 0) direct_epfd_ = ::epoll_create1(EPOLL_CLOEXEC);
  if (direct_epfd_ >= 0) {
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.ptr = c.get();
    // Not watched (no descriptor to spare): its polls read it every time, as without the set.
    if (::epoll_ctl(direct_epfd_, EPOLL_CTL_ADD, c->fd(), &ev) < 0) c->read_every_poll();
  }
  direct_.emplace_back(std::move(c), 1);
  has_direct_.store(true, std::memory_order_relaxed);
}

void Cq::detach_direct(const DirectLink* c) {
  std::lock_guard lock(direct_lock_);
  for (auto it = direct_.begin(); it != direct_.end(); ++it)
    if (it->first.get() == c) {
      if (--it->second == 0) {
        if (direct_epfd_ >= 0) ::epoll_ctl(direct_epfd_, EPOLL_CTL_DEL, c->fd(), nullptr);
        direct_.erase(it);
      }
      break;
    }
  has_direct_.store(!direct_.empty(), std::memory_order_relaxed);
}

bool Cq::direct_streams() {
  std::lock_guard lock(direct_lock_);
  for (auto& [c, n] : direct_)
    if (c->in_flight() >= poll_backoff::kDeepQueue) return true;
  return false;
}

void Cq::flush_deferred_direct(int64_t now, bool all) {
  if (!has_direct_.load(std::memory_order_relaxed)) return;
  thread_local std::vector<std::shared_ptr<DirectLink>> conns;
  {
    std::lock_guard lock(direct_lock_);
    for (auto& [c, n] : direct_)
      if (all ? c->has_held() : c->has_deferred()) conns.push_back(c);
  }
  for (auto& c : conns) {
    if (all)
      c->flush_held(now);
    else
      c->flush_deferred(now);
  }
  conns.clear();
}

void Cq::drive_direct() {
  // Driven outside the lock: a connection taking in a new QP attaches it to its CQs.
  thread_local std::vector<std::shared_ptr<DirectLink>> conns;
  {
    std::lock_guard lock(direct_lock_);
    const size_t n = direct_.size();
    if (!n) return;
    // Each poll starts with the next connection: the connections of a program progress
    // together.
    if (++next_direct_ >= n) next_direct_ = 0;
    for (size_t i = 0; i < n; ++i) conns.push_back(direct_[(next_direct_ + i) % n].first);
  }
  // Which sockets have bytes (or news of their end): only those are read.
  epoll_event ready[64];
  int nready = direct_epfd_ >= 0 ? ::epoll_wait(direct_epfd_, ready, 64, 0) : -1;
  const int64_t now = now_ns();
  for (auto& c : conns) {
    bool readable = nready < 0 || nready == 64 || c->reads_every_poll();
    for (int i = 0; i < nready && !readable; ++i) readable = ready[i].data.ptr == c.get();
    c->poll(now, readable);
  }
  conns.clear();
}

int Cq::arm(bool solicited_only) {
  // The program is about to sleep on the CQ: what its polls left waiting on its direct
  // connections leaves now.
  flush_deferred_direct(now_ns(), true);
  std::lock_guard lock(poll_lock_);
  armed_.store(solicited_only ? 2 : 1, std::memory_order_seq_cst);
  shm::arm_word(view_.cq->armed, solicited_only);
  for (RecvSource* src : sources_) shm::arm_word(src->ring.ring->armed, solicited_only);
  // As a hardware CQ armed at its consumer index: completions already waiting unpolled make
  // the event at once. A program that polls, finds nothing, and arms (UCX) would otherwise
  // sleep through a completion that came in between, until the next one.
  if (channel_ && !solicited_only) {
    bool waiting = shm::cq_ready(view_, head_);
    for (size_t i = 0; i < sources_.size() && !waiting; ++i)
      waiting = shm::ring_ready(sources_[i]->ring, sources_[i]->head);
    if (waiting) {
      uint64_t one = 1;
      [[maybe_unused]] ssize_t r = ::write(event_fd_, &one, sizeof(one));
    }
  }
  return 0;
}

void Cq::push(const ibv_wc& wc, bool solicited) {
  if (shm::cq_push(view_, wc) != shm::RingResult::kOk) {
    if (!overflow_reported_.exchange(true)) ctx_.push_event(IBV_EVENT_CQ_ERR, user);
    return;
  }
  if (channel_ && shm::cq_should_notify(view_.cq, solicited)) {
    uint64_t one = 1;
    [[maybe_unused]] ssize_t r = ::write(event_fd_, &one, sizeof(one));
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
  if (table_offset_) pd_.context().device().arena().free(table_offset_);
}

int Srq::init(const ibv_srq_attr& attr) {
  if (attr.max_wr == 0 || attr.max_wr > 16384 || attr.max_sge == 0 ||
      attr.max_sge > shm::kMaxRecvSge || attr.srq_limit > attr.max_wr)
    return EINVAL;
  max_wr_ = shm::pow2_at_least(attr.max_wr);
  max_sge_ = attr.max_sge;
  limit_.store(attr.srq_limit, std::memory_order_relaxed);
  Device& dev = pd_.context().device();
  if (int e = object_.create_srq(dev.control(), dev.info().client_id, max_wr_, max_sge_)) return e;
  table_offset_ = dev.arena().alloc(shm::recv_table_bytes(max_wr_, max_sge_));
  if (!table_offset_) return ENOMEM;
  recvs_.init(object_.rq(), dev.arena().at<shm::RecvTable>(table_offset_));
  return 0;
}

int Srq::post(ibv_recv_wr* wr, ibv_recv_wr** bad) {
  MemoryRegistry& mem = pd_.context().device().memory();
  std::lock_guard lock(lock_);
  for (; wr; wr = wr->next) {
    OdpRecvCopy odp;
    const ibv_recv_wr& w = resolve_implicit(mem, *wr, odp);
    if (w.num_sge > 0 && static_cast<uint32_t>(w.num_sge) <= max_sge_)
      mem.prepare_receive(w.sg_list, w.num_sge);
    if (int e = recvs_.post(w)) {
      *bad = wr;
      return e;
    }
  }
  return 0;
}

int Srq::modify(const ibv_srq_attr& attr, int mask) {
  if (mask & IBV_SRQ_MAX_WR) return EINVAL;  // resizing is not supported
  if (mask & IBV_SRQ_LIMIT) {
    if (attr.srq_limit > max_wr_) return EINVAL;
    limit_.store(attr.srq_limit, std::memory_order_release);
  }
  return 0;
}

void Srq::query(ibv_srq_attr& attr) const {
  attr.max_wr = max_wr_;
  attr.max_sge = max_sge_;
  attr.srq_limit = limit_.load(std::memory_order_acquire);
}

// The limit event: once the receives left in the queue fall below an armed limit, one
// IBV_EVENT_SRQ_LIMIT_REACHED, and the limit is disarmed (0) until ibv_modify_srq arms it again.
// Receives are taken by senders; their owner sees it as their completions come in.
void Srq::check_limit() {
  uint32_t limit = limit_.load(std::memory_order_acquire);
  if (limit == 0 || recvs_.waiting() >= limit) return;
  if (limit_.compare_exchange_strong(limit, 0, std::memory_order_acq_rel))
    pd_.context().push_event(IBV_EVENT_SRQ_LIMIT_REACHED, user);
}

}  // namespace vrdma
