// libFuzzer entry for what a library process parses from another, untrusted process on the
// direct path across hosts: the input is the byte stream the other end of a direct connection
// wrote, read by a transport::Link (the frame parser and checks, large payloads read "from the
// socket" straight into their destination) and dispatched as DirectLink::on_frame dispatches it
// (engine/direct.cc) to a real transport::Responder (requests to this process's QPs, executed
// against their receive queues and registered memory) and a real transport::Requester (responses
// to what this process's QPs sent). DirectLink itself needs a Device and so a vrdmad: its
// dispatch, its drive pass and its end (finish) are reproduced here around the same classes, with
// vrdmad's ticket check (DirectTake) a table of one ticket.
//
// This process is a fake client built from the pieces the library builds it from: an arena
// (the senders' shared state, send queues, send CQs), a key table, QP objects in sealed memfds
// and four MRs, reached through a shm::Peer as the library reaches itself (Device::self_peer).
// Addresses are fixed (the MRs' iovas), so that the fuzzer can name them; half of the mutations
// insert whole frames with the numbers this process answers to (LLVMFuzzerCustomMutator), the
// other half are libFuzzer's own.
//
// What must hold, whatever the stream (a failure traps):
//   - nothing outside the MRs' registered ranges changes, nor anything of an MR without local
//     write whose owner never used it (and AddressSanitizer watches the rest);
//   - every frame this end writes passes the other end's checks (wire::check_frame);
//   - a READ or an atomic of this process's that completes successfully reports the bytes it
//     asked for, never what the other end claims;
//   - every receive completion names a receive that was posted, once, and a message received in
//     full holds no more bytes than its receive could take;
//   - once the connection ended, every request this process's QPs posted has completed, once
//     each and in order, no request is held and no held byte is counted.
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <vector>

#include "common/log.h"
#include "engine/arena.h"
#include "shm/layout.h"
#include "shm/peer.h"
#include "shm/rings.h"
#include "shm/shared_file.h"
#include "shm/work_request.h"
#include "transport/frame_check.h"
#include "transport/frame_parser.h"
#include "transport/link.h"
#include "transport/requester.h"
#include "transport/responder.h"
#include "transport/wire.h"

namespace {

using namespace vrdma;
using transport::Link;
using transport::PayloadDest;

void check(bool ok) {
  if (!ok) __builtin_trap();
}

constexpr uint32_t kClient = 7;
constexpr uint32_t kSelfIpv4 = 0x0501010a;  // 10.1.1.5 (network order)
constexpr uint32_t kPeerIpv4 = 0x0502020a;  // 10.2.2.5
// The ticket this process's vrdmad keeps for the pair QP 0x403 (there) -> QP 0x303 (here).
constexpr uint8_t kTicket[16] = {'t', 'i', 'c', 'k', 'e', 't', '-', 'f',
                                 'o', 'r', '-', '0', 'x', '3', '0', '3'};

// As engine/direct.cc sizes and drives a connection, but for the ring and the bytes of frames one
// pass reads, both 16 times smaller (a ring of 2048 frames costs AddressSanitizer more than the
// rest of an input does): room for an answer to every frame one pass reads, as there.
constexpr transport::LinkSizes kSizes{128, 0, 64 * 1024};
constexpr size_t kReceiveBudget = 4 * 1024;
constexpr uint32_t kRoomToReceive = 120;
static_assert(kReceiveBudget / (sizeof(wire::Header) + sizeof(wire::Response)) < kRoomToReceive);
static_assert(kRoomToReceive <= kSizes.ring);
constexpr size_t kDirectReadBudget = 256 * 1024;
constexpr uint32_t kPerTurn = 16;
constexpr uint32_t kPumpBudget = 512;

// ---- this process: arena, key table, MRs, QPs ----------------------------------------------

constexpr uint64_t kMrMap = 12 * shm::kPage;  // each MR's backing
constexpr uint64_t kMrVaOff = 100;            // where the MR starts in its first page
constexpr uint64_t kMrLen = 40000;            // registered bytes

struct Mr {
  uint32_t key, slot, access, pd;
  uint64_t iova;
  uint32_t fd_id = 0;
  uint8_t* map = nullptr;  // the owner's mapping of the backing
  uint64_t addr(uint64_t off) const { return iova + off; }
};

// Local use only (what this process sends from, where READ data lands), remote rights (the
// target of the other end's requests), remote read only without local write (never written),
// and remote rights in another protection domain than the QPs' (never written either).
enum MrIndex { kLocal, kRemote, kReadOnly, kOtherPd, kMrs };
constexpr uint32_t kRemoteAll =
    IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC;

struct RecvQp {  // a QP of this process the other end's QPs send to
  uint32_t qpn, type, access;
  uint32_t src_qpn;  // the source its RTR names
  uint32_t fd_id = 0;
  uint8_t* obj_base = nullptr;
  uint64_t obj_size = 0;
  shm::QpObject* obj = nullptr;
  shm::RqView rq;
  shm::RingView ring;
  // Per input.
  uint64_t rq_tail = 0, ring_head = 0;
  std::vector<uint64_t> capacity;  // bytes each posted receive can take
  std::set<uint64_t> completed;
  bool wanted = true;  // its RTR names its source (else another)
};

struct SendQpState {  // a QP of this process that sends on the connection
  uint32_t qpn, type, dst_qpn;
  uint32_t shared_off = 0;
  shm::QpShared* shared = nullptr;
  shm::SendQueue* sq = nullptr;
  shm::CqView cq;
  // Per input.
  uint64_t posted = 0, cq_head = 0, completions = 0;
  std::vector<uint64_t> wr_ids;
  std::vector<uint32_t> wr_lengths;  // READ: its bytes; atomics: 8; else 0
};

uint8_t pattern(uint32_t mr, uint64_t i) {
  return static_cast<uint8_t>(i * 31 + mr * 77 + 5);
}

class Self : public shm::FdSource {
 public:
  Self() {
    check(arena.create(kClient) == 0);
    const uint64_t keys_size = (sizeof(shm::KeyTable) + shm::kPage - 1) & ~(shm::kPage - 1);
    int kfd = -1;
    check(shm::create_sealed("fuzz-keys", keys_size, false, kfd) == 0);
    keys = static_cast<shm::KeyTable*>(
        ::mmap(nullptr, keys_size, PROT_READ | PROT_WRITE, MAP_SHARED, kfd, 0));
    check(keys != MAP_FAILED);
    keys->magic = shm::kKeyTableMagic;
    keys->version = shm::kArenaVersion;
    keys->slots = shm::kMrSlots;
    fds[shm::kKeyTableFdId] = kfd;
    const uint32_t access[kMrs] = {IBV_ACCESS_LOCAL_WRITE, IBV_ACCESS_LOCAL_WRITE | kRemoteAll,
                                   IBV_ACCESS_REMOTE_READ, IBV_ACCESS_LOCAL_WRITE | kRemoteAll};
    for (uint32_t i = 0; i < kMrs; ++i) {
      Mr& m = mrs[i];
      m.slot = i + 1;
      m.key = 0x1100 * (i + 1);  // 0x1100, 0x2200, 0x3300, 0x4400
      m.access = access[i];
      m.pd = i == kOtherPd ? 2 : 1;
      m.iova = 0x100000ull * (i + 1);
      int fd = -1;
      check(shm::create_sealed("fuzz-mr", kMrMap, false, fd) == 0);
      m.map =
          static_cast<uint8_t*>(::mmap(nullptr, kMrMap, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
      check(m.map != MAP_FAILED);
      m.fd_id = add_fd(fd);
      keys->gen[m.slot].store(1);
      pristine[i].resize(kMrMap);
      for (uint64_t b = 0; b < kMrMap; ++b) pristine[i][b] = pattern(i, b);
    }
    // Receivers: RC, UC, and an RC QP reached only once the other end adds it (DirectAdd).
    recv[0] = RecvQp{0x301, IBV_QPT_RC, kRemoteAll, 0x401};
    recv[1] = RecvQp{0x302, IBV_QPT_UC, IBV_ACCESS_REMOTE_WRITE, 0x402};
    recv[2] = RecvQp{0x303, IBV_QPT_RC, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ, 0x403};
    for (auto& r : recv) make_object(r);
    // Senders: RC and UC.
    send[0] = SendQpState{0x101, IBV_QPT_RC, 0x201};
    send[1] = SendQpState{0x102, IBV_QPT_UC, 0x202};
    for (auto& s : send) make_sender(s);
    // The process as its direct connections reach it (Device::self_peer). One for every input:
    // its views of the MRs and objects stay what they are, as the files never change.
    peer = std::make_shared<shm::Peer>(*this, kClient);
    peer->use_arena(arena.base(), shm::kArenaSize);
    peer->defer_retire();
  }

  // Everything as a new process would have it.
  void reset(uint8_t cfg) {
    for (uint32_t i = 0; i < kMrs; ++i) memcpy(mrs[i].map, pristine[i].data(), kMrMap);
    for (auto& r : recv) {
      memset(r.obj_base + r.obj->hdr.ring_offset, 0, shm::ring_bytes(kRingCap));
      shm::ring_init(r.ring.ring, kRingCap);
      memset(r.obj_base + r.obj->hdr.rq_offset, 0, shm::rq_bytes(kRqCap, kRqSge));
      shm::rq_init(r.rq.rq, kRqCap, kRqSge);
      r.obj->attrs.state.store(IBV_QPS_RTS);
      r.obj->attrs.gone.store(0);
      r.obj->attrs.min_rnr_timer.store(cfg & 31);
      r.obj->rx_ops.store(0);
      r.obj->rx_bytes.store(0);
      r.rq_tail = r.ring_head = 0;
      r.capacity.clear();
      r.completed.clear();
      r.wanted = true;
    }
    for (auto& s : send) {
      memset(s.sq->entries, 0, size_t(kSqCap) * s.sq->entry_size);
      s.sq->tail.store(0);
      s.sq->done.store(0);
      s.cq.cq->tail.store(0);
      s.cq.cq->head.store(0);
      s.cq.cq->overflow.store(0);
      shm::cq_init(s.cq.cq, kCqCap, 0);
      s.shared->state.store(IBV_QPS_RTS);
      s.shared->gone.store(0);
      s.posted = s.cq_head = s.completions = 0;
      s.wr_ids.clear();
      s.wr_lengths.clear();
    }
  }

  // Nothing outside the registered ranges changed, nor any MR the owner never let be written.
  void check_memory() const {
    for (uint32_t i = 0; i < kMrs; ++i) {
      const uint8_t* m = mrs[i].map;
      const uint8_t* p = pristine[i].data();
      if (i == kReadOnly || i == kOtherPd) {
        check(memcmp(m, p, kMrMap) == 0);
      } else {
        check(memcmp(m, p, kMrVaOff) == 0);
        check(memcmp(m + kMrVaOff + kMrLen, p + kMrVaOff + kMrLen, kMrMap - kMrVaOff - kMrLen) ==
              0);
      }
    }
  }

  // FdSource: what the library's SelfSource answers (engine/self_source.cc, memory.cc).
  int fetch_fd(uint32_t, uint32_t fd_id, uint32_t, int& fd) override {
    auto it = fds.find(fd_id);
    if (it == fds.end()) return ENOENT;
    fd = ::fcntl(it->second, F_DUPFD_CLOEXEC, 0);
    return fd < 0 ? errno : 0;
  }
  int grant_mr(uint32_t, uint32_t, uint32_t key, uint32_t access, shm::MrGrant& out) override {
    out = shm::MrGrant{};
    for (const Mr& m : mrs) {
      if (m.key != key) continue;
      if (access & kRemoteAll) {
        if ((m.access & access) != access) return EACCES;
        out.writable = (m.access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) != 0;
      } else {
        if ((access & IBV_ACCESS_LOCAL_WRITE) && !(m.access & IBV_ACCESS_LOCAL_WRITE))
          return EACCES;
        out.writable = (m.access & IBV_ACCESS_LOCAL_WRITE) != 0;
      }
      out.slot = m.slot;
      out.gen = keys->gen[m.slot].load();
      out.access = m.access;
      out.pd = m.pd;
      out.nseg = 1;
      out.iova = m.iova;
      out.length = kMrLen;
      out.va_offset = kMrVaOff;
      out.map_length = kMrMap;
      out.seg[0] = shm::MrGrant::Seg{m.fd_id, 0, kMrMap};
      return fetch_fd(kClient, m.fd_id, 0, out.fds[0]);
    }
    return ENOENT;
  }

  static constexpr uint32_t kRqCap = 64, kRingCap = 64, kRqSge = 4;
  static constexpr uint32_t kSqCap = 16, kCqCap = 64, kSqSge = 4, kMaxInline = 64;

  Arena arena;
  shm::KeyTable* keys = nullptr;
  std::map<uint32_t, int> fds;
  Mr mrs[kMrs];
  std::vector<uint8_t> pristine[kMrs];
  RecvQp recv[3];
  SendQpState send[2];
  std::shared_ptr<shm::Peer> peer;

 private:
  uint32_t add_fd(int fd) {
    fds[next_fd_id_] = fd;
    return next_fd_id_++;
  }

  void make_object(RecvQp& r) {
    const uint32_t ring_off = sizeof(shm::QpObject);
    const uint32_t rq_off = static_cast<uint32_t>(
        (ring_off + shm::ring_bytes(kRingCap) + shm::kCacheLine - 1) & ~(shm::kCacheLine - 1));
    r.obj_size = (rq_off + shm::rq_bytes(kRqCap, kRqSge) + shm::kPage - 1) & ~(shm::kPage - 1);
    int fd = -1;
    check(shm::create_sealed("fuzz-qp", r.obj_size, false, fd) == 0);
    r.obj_base = static_cast<uint8_t*>(
        ::mmap(nullptr, r.obj_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
    check(r.obj_base != MAP_FAILED);
    r.obj = reinterpret_cast<shm::QpObject*>(r.obj_base);
    shm::ObjectHeader& h = r.obj->hdr;
    h.magic = shm::kObjectMagic;
    h.version = shm::kArenaVersion;
    h.kind = static_cast<uint32_t>(shm::ObjectKind::kQp);
    h.owner_client = kClient;
    h.size = r.obj_size;
    h.ring_offset = ring_off;
    h.rq_offset = rq_off;
    r.ring = shm::RingView{reinterpret_cast<shm::RecvRing*>(r.obj_base + ring_off), kRingCap - 1};
    auto* rq = reinterpret_cast<shm::RecvQueue*>(r.obj_base + rq_off);
    shm::rq_init(rq, kRqCap, kRqSge);
    r.rq = shm::RqView{rq, kRqCap - 1, kRqSge, rq->entry_size};
    r.obj->attrs.qpn = r.qpn;
    r.obj->attrs.qp_type = r.type;
    r.obj->attrs.access.store(r.access);
    r.obj->attrs.pd = 1;
    r.fd_id = add_fd(fd);
  }

  void make_sender(SendQpState& s) {
    s.shared_off = arena.alloc(sizeof(shm::QpShared));
    s.shared = arena.at<shm::QpShared>(s.shared_off);
    const uint32_t esz = shm::route_wqe_size(kSqSge, kMaxInline);
    const uint32_t sq_off = arena.alloc(sizeof(shm::SendQueue) + size_t(kSqCap) * esz);
    s.sq = arena.at<shm::SendQueue>(sq_off);
    s.sq->capacity = kSqCap;
    s.sq->entry_size = esz;
    s.sq->max_sge = kSqSge;
    s.sq->max_inline = kMaxInline;
    const uint32_t cq_off = arena.alloc(shm::cq_bytes(kCqCap));
    s.cq = shm::CqView{arena.at<shm::CqShared>(cq_off), kCqCap - 1};
    shm::cq_init(s.cq.cq, kCqCap, 0);
    s.shared->qpn = s.qpn;
    s.shared->qp_type = s.type;
    s.shared->send_cq_offset = cq_off;
    s.shared->recv_cq_offset = cq_off;
    s.shared->sq_offset = sq_off;
    s.shared->retry_cnt.store(7);
    s.shared->rnr_retry.store(7);
  }

  uint32_t next_fd_id_ = 2;
};

Self& self() {
  static Self* s = [] {
    set_log_level(LogLevel::kError);
    return new Self;
  }();
  return *s;
}

// ---- the socket: the input, as it arrives -------------------------------------------------

// What this end writes goes through the other end's parser and checks.
class OutCheck : public transport::FrameSink {
 public:
  bool on_frame(wire::Type type, const uint8_t*, uint32_t, PayloadDest& dest,
                const char**) override {
    // What this end of a direct connection sends: responses, its QPs' requests, pings and
    // pongs, closes.
    check(type == wire::Type::kResponse || type == wire::Type::kRequest ||
          type == wire::Type::kPing || type == wire::Type::kPong || type == wire::Type::kClose);
    dest.kind = PayloadDest::Kind::kDiscard;
    return true;
  }
  void on_payload_data(const uint8_t*, size_t) override {}
  void on_payload() override {}
};

class StreamLink : public Link {
 public:
  StreamLink(const uint8_t* data, size_t size)
      : Link(1, UniqueFd(), true, kSizes), data_(data), size_(size) {
    connected();
  }
  // `n` more bytes of the stream reach the socket.
  void arrive(size_t n) { avail_ = std::min(size_, avail_ + n); }
  bool all_arrived() const { return avail_ == size_; }
  bool eof = true;  // after the stream, the end of it (else silence)

 protected:
  bool flush_out() override {
    while (tail_ != head_) {
      const Out& o = out_at(tail_);
      for (int i = 0; i < o.niov; ++i) {
        const char* why = nullptr;
        check(out_.feed(static_cast<const uint8_t*>(o.iov[i].iov_base), o.iov[i].iov_len, sink_,
                        &why));
        bytes_out += o.iov[i].iov_len;
      }
      ++tail_;
    }
    tail_off_ = 0;
    return true;
  }
  ssize_t read_some(uint8_t* buf, size_t len) override {
    iovec v{buf, len};
    return read_vec(&v, 1);
  }
  ssize_t read_vec(const iovec* iov, int n) override {
    if (pos_ == size_ && eof) return 0;
    if (pos_ == avail_) {
      errno = EAGAIN;
      return -1;
    }
    size_t got = 0;
    for (int i = 0; i < n && pos_ < avail_; ++i) {
      const size_t m = std::min(iov[i].iov_len, avail_ - pos_);
      memcpy(iov[i].iov_base, data_ + pos_, m);
      pos_ += m;
      got += m;
    }
    return static_cast<ssize_t>(got);
  }

 private:
  const uint8_t* data_;
  size_t size_, pos_ = 0, avail_ = 0;
  transport::FrameParser out_;
  OutCheck sink_;
};

// ---- the connection: DirectLink's receiving and sending sides -------------------------------

class Conn : public transport::LinkHandler,
             private transport::RequesterEnv,
             private transport::ResponderEnv {
 public:
  Conn(Self& s, const uint8_t* data, size_t size)
      : s_(s),
        link_(data, size),
        self_(s.peer),
        req_(*this),
        resp_(*this, transport::ResponderLimits{65536, 16384, 16ull << 20, 65536, 64ull << 20}) {}
  ~Conn() override = default;

  StreamLink& link() { return link_; }
  bool live() const { return live_; }
  transport::Responder& resp() { return resp_; }

  // DirectLink::attach_sender (without a ticket: the pair the connection was opened for).
  void attach_sender(SendQpState& s) {
    transport::SendQp& q = senders_[s.qpn];
    q.qpn = s.qpn;
    q.owner = kClient;
    q.type = s.type;
    q.ipv4 = kSelfIpv4;
    q.dst_qpn = s.dst_qpn;
    q.link_id = link_.id();
    q.peer = self_;
    check(transport::Requester::attach(q, s.shared_off) == 0);
  }
  // DirectLink::detach_sender.
  void detach_sender(uint32_t qpn) {
    if (!senders_.erase(qpn) || !live_) return;
    wire::Close c{qpn, wire::kCloseSender};
    link_.send(wire::Type::kClose, &c, sizeof(c));
    if (!link_.flush(now_)) finish("send failed");
  }
  // DirectLink::attach_receiver (vrdmad took the ticket).
  int attach_receiver(RecvQp& r, uint32_t src_ipv4, uint32_t src_qpn) {
    if (!live_) return ENOTCONN;
    if (!resp_.connect(link_, 0, src_ipv4, src_qpn, r.qpn, r.type, kClient)) return ENOMEM;
    receivers_[r.qpn] = &r;
    return 0;
  }
  // DirectLink::detach_receiver.
  void detach_receiver(RecvQp& r) {
    if (!receivers_.erase(r.qpn)) return;
    auto& conns = resp_.conns();
    for (auto it = conns.begin(); it != conns.end();) {
      if (it->second->dst_qpn != r.qpn) {
        ++it;
        continue;
      }
      resp_.release_held(*it->second, &link_);
      it = conns.erase(it);
    }
    if (live_) {
      wire::Close c{r.qpn, wire::kCloseReceiver};
      link_.send(wire::Type::kClose, &c, sizeof(c));
      if (!link_.flush(now_)) finish("send failed");
    }
  }

  // DirectLink::drive.
  void drive(int64_t now) {
    now_ = now;
    if (live_ && link_.has_room(kRoomToReceive)) {
      const char* why = nullptr;
      const uint64_t before = link_.bytes_in;
      link_.rx_ready = true;
      if (!link_.receive(*this, kReceiveBudget, &why, kDirectReadBudget)) {
        check(why != nullptr);
        finish(why);
      } else if (link_.bytes_in != before) {
        link_.last_rx_ns = now;
      }
    }
    resp_.retry_held(now, [this](uint32_t) { return &link_; });
    pump(now);
    if (live_ && !check_senders(now)) finish("no answer within the QPs' timeout");
    if (live_ && link_.tx_pending() && !link_.flush(now)) finish("send failed");
    if (self_->has_retired() && !link_.tx_pending() && !req_.placing() && !resp_.placing())
      self_->reclaim();
  }

  // DirectLink::finish.
  void finish(const char*) {
    if (!live_) return;
    live_ = false;
    // Senders: what is posted from now on finds nobody.
    for (auto& [qpn, q] : senders_) {
      if (q.failed) continue;
      const bool outstanding = q.done < q.sent;
      if (!outstanding && closed_.count(q.dst_qpn)) continue;
      req_.abort(q, outstanding ? IBV_WC_RETRY_EXC_ERR : IBV_WC_WR_FLUSH_ERR, true,
                 outstanding ? proto::FatalReason::kRouted : proto::FatalReason::kPeerGone);
    }
    // Receivers: the other process is gone.
    for (const auto& [key, c] : resp_.conns())
      if (names_peer(c->dst_qpn, c->src_ipv4, c->src_qpn)) ++fatals_;
    resp_.forget_link(link_);
  }

 private:
  // transport::LinkHandler: DirectLink::on_frame and its payload callbacks.
  bool on_frame(Link& link, wire::Type type, const uint8_t* body, uint32_t payload,
                PayloadDest& dest, const char** why) override {
    switch (type) {
      case wire::Type::kRequest: {
        const auto r = wire::read<wire::Request>(body);
        if (r.qp_type == IBV_QPT_UD) {
          *why = "a datagram on a direct connection";
          return false;
        }
        resp_.on_request(link, r, payload, dest, now_);
        return true;
      }
      case wire::Type::kResponse:
        req_.on_response(link, wire::read<wire::Response>(body), payload, dest, now_);
        return true;
      case wire::Type::kDirectAdd:
        add(wire::read<wire::DirectAdd>(body));
        return true;
      case wire::Type::kClose: {
        const auto c = wire::read<wire::Close>(body);
        if (c.role == wire::kCloseSender)
          sender_closed(c.qpn);
        else
          receiver_closed(c.qpn);
        return true;
      }
      case wire::Type::kPing:
        link_.send(wire::Type::kPong, body, sizeof(wire::Ping));
        return true;
      case wire::Type::kPong: {
        const auto sent = static_cast<int64_t>(wire::read<wire::Ping>(body).token);
        if (sent > 0 && sent <= now_ && sent == link_.last_ping_ns) link_.rtt_ns = now_ - sent;
        return true;
      }
      default:
        *why = "a frame a direct connection does not carry";
        return false;
    }
  }
  void on_payload_data(Link& link, const uint8_t* data, size_t len) override {
    resp_.on_payload_data(link, data, len);
  }
  void on_payload(Link& link) override {
    if (!resp_.on_payload(link)) req_.on_payload(link, now_);
  }

  // DirectLink::add: vrdmad takes the ticket it issued for exactly this pair (once).
  bool add(const wire::DirectAdd& a) {
    if (ticket_taken_ || memcmp(a.ticket, kTicket, sizeof(kTicket)) != 0 || a.src_qpn != 0x403 ||
        a.dst_qpn != 0x303 || a.qp_type != IBV_QPT_RC)
      return false;
    ticket_taken_ = true;
    return attach_receiver(s_.recv[2], kPeerIpv4, a.src_qpn) == 0;
  }
  void sender_closed(uint32_t src_qpn) {
    if (transport::InConn* c = resp_.find(link_.id(), src_qpn)) {
      resp_.release_held(*c, &link_);
      resp_.conns().erase(transport::conn_key(link_.id(), src_qpn));
    }
  }
  void receiver_closed(uint32_t dst_qpn) {
    closed_.insert(dst_qpn);
    for (auto& [qpn, q] : senders_)
      if (q.dst_qpn == dst_qpn && !q.failed && q.done != q.sent)
        req_.abort(q, IBV_WC_RETRY_EXC_ERR, true);
  }

  // DirectLink::pump and check_senders (direct_send.cc).
  uint32_t pump(int64_t now) {
    if (senders_.empty()) return 0;
    uint32_t budget = kPumpBudget;
    bool more = true;
    auto first = senders_.lower_bound(turn_);
    if (first == senders_.end()) first = senders_.begin();
    while (more && budget >= kPerTurn) {
      more = false;
      auto it = first;
      do {
        transport::SendQp& q = it->second;
        const uint64_t before = q.sent;
        if (req_.pump(q, now, kPerTurn) && q.sent != before) more = true;
        budget -= std::min<uint32_t>(budget, static_cast<uint32_t>(q.sent - before));
        if (++it == senders_.end()) it = senders_.begin();
      } while (it != first && budget >= kPerTurn);
    }
    if (++first == senders_.end()) first = senders_.begin();
    turn_ = first->first;
    return kPumpBudget - budget;
  }
  bool check_senders(int64_t now) {
    for (auto& [qpn, q] : senders_)
      if (!q.failed && q.done != q.sent && transport::Requester::check_silence(q, link_, now))
        return false;
    return true;
  }

  // transport::RequesterEnv.
  transport::SendQp* find(uint32_t qpn) override {
    auto it = senders_.find(qpn);
    return it == senders_.end() ? nullptr : &it->second;
  }
  Link* link_for(transport::SendQp&, const transport::Wqe&) override {
    return live_ ? &link_ : nullptr;
  }
  void failed(transport::SendQp&, proto::FatalReason) override { ++fatals_; }

  // transport::ResponderEnv: DirectLink's (direct_receive.cc).
  bool names_peer(uint32_t qpn, uint32_t ipv4, uint32_t peer_qpn) override {
    auto it = receivers_.find(qpn);
    return it != receivers_.end() && it->second->wanted && ipv4 == kPeerIpv4 &&
           it->second->src_qpn == peer_qpn;
  }
  bool target(uint32_t qpn, shm::PeerQp& out) override {
    auto it = receivers_.find(qpn);
    if (it == receivers_.end()) return false;
    return shm::attach_peer_qp(self_, it->second->fd_id, 0, out) == 0 && out.qpn == qpn;
  }
  const char* who() const override { return "direct: peer"; }

  Self& s_;
  StreamLink link_;
  std::shared_ptr<shm::Peer> self_;
  int64_t now_ = 0;
  bool live_ = true;
  bool ticket_taken_ = false;
  uint64_t fatals_ = 0;
  std::map<uint32_t, transport::SendQp> senders_;
  std::set<uint32_t> closed_;
  transport::Requester req_;
  uint32_t turn_ = 0;
  transport::Responder resp_;
  std::map<uint32_t, RecvQp*> receivers_;
};

// ---- the program: what it posts, and what it finds in its CQs ------------------------------

// A receive of kind `k` (what its scatter list points at).
void post_recv(Self& s, RecvQp& r, uint32_t k) {
  if (r.rq_tail - r.ring_head >= Self::kRqCap) return;  // as many as the owner can track
  const Mr& l = s.mrs[kLocal];
  const Mr& m = s.mrs[kRemote];
  const uint64_t at = (r.rq_tail * 512) % 20000;
  ibv_sge sge[3];
  uint32_t n = 0;
  switch (k % 4) {
    case 0:
      sge[n++] = ibv_sge{l.addr(at), 256, l.key};
      break;
    case 1:  // large, over two MRs
      sge[n++] = ibv_sge{l.addr(at), 16, l.key};
      sge[n++] = ibv_sge{m.addr(at), 20000, m.key};
      break;
    case 2:  // none: zero bytes
      break;
    default:  // memory without local write: the receive completes in error
      sge[n++] = ibv_sge{l.addr(at), 8, l.key};
      sge[n++] = ibv_sge{s.mrs[kReadOnly].addr(0), 64, s.mrs[kReadOnly].key};
      break;
  }
  uint64_t cap = 0;
  for (uint32_t i = 0; i < n; ++i) cap += sge[i].length;
  uint64_t tail = r.rq_tail;
  if (!shm::rq_push(r.rq, tail, sge, n)) return;
  r.rq_tail = tail;
  r.capacity.push_back(cap);
}

// A work request of kind `k` on sender `q`, as the library writes it into its send queue.
void post_send(Self& s, SendQpState& q, uint32_t k) {
  if (q.sq->tail.load() - q.sq->done.load() >= Self::kSqCap) return;
  const Mr& l = s.mrs[kLocal];
  const uint64_t at = (q.posted * 1024) % 16384;
  auto* e = reinterpret_cast<shm::RouteWqe*>(q.sq->entries + (q.posted & (Self::kSqCap - 1)) *
                                                                 uint64_t(q.sq->entry_size));
  memset(e, 0, q.sq->entry_size);
  e->wr_id = 1000 * q.qpn + q.posted;
  e->send_flags = IBV_SEND_SIGNALED;
  e->rkey = 0x9900;  // the other end's memory: whatever it is, it answers
  e->remote_addr = 0x10000;
  e->ud_qpn = q.dst_qpn;
  static const uint32_t kRc[] = {IBV_WR_SEND,
                                 IBV_WR_SEND_WITH_IMM,
                                 IBV_WR_RDMA_WRITE,
                                 IBV_WR_RDMA_READ,
                                 IBV_WR_ATOMIC_CMP_AND_SWP,
                                 IBV_WR_RDMA_READ,
                                 IBV_WR_ATOMIC_FETCH_AND_ADD,
                                 IBV_WR_RDMA_WRITE_WITH_IMM};
  static const uint32_t kUc[] = {IBV_WR_SEND, IBV_WR_RDMA_WRITE, IBV_WR_RDMA_WRITE_WITH_IMM,
                                 IBV_WR_SEND_WITH_IMM};
  e->opcode = q.type == IBV_QPT_RC ? kRc[k % 8] : kUc[k % 4];
  const uint32_t sizes[] = {8, 300, 20000, 0};
  uint32_t len = sizes[(k >> 3) % 4];
  if (shm::is_atomic(e->opcode)) {
    len = 8;
    e->remote_addr = 0x10008;
  }
  if (len == 20000) {  // three pieces
    e->num_sge = 3;
    e->sge[0] = ibv_sge{l.addr(20000), 7000, l.key};
    e->sge[1] = ibv_sge{l.addr(27000), 3, l.key};
    e->sge[2] = ibv_sge{l.addr(27003), 12997, l.key};
  } else if (len) {
    e->num_sge = 1;
    e->sge[0] = ibv_sge{l.addr(at), len, l.key};
  }
  q.wr_ids.push_back(e->wr_id);
  q.wr_lengths.push_back(shm::returns_data(e->opcode) ? len : 0);
  ++q.posted;
  q.sq->tail.store(q.posted);
}

// The program polls its CQs: send completions in order, each once, a successful READ's or
// atomic's with its own length; receive completions of
// receives it posted, each once, a message no longer than its receive.
void poll(Self& s) {
  for (auto& q : s.send) {
    ibv_wc wc[16];
    int n;
    while ((n = shm::cq_poll(q.cq, q.cq_head, 16, wc)) > 0) {
      for (int i = 0; i < n; ++i) {
        check(q.completions < q.wr_ids.size());
        check(wc[i].wr_id == q.wr_ids[q.completions]);
        // A READ that succeeded brought what it asked for; an atomic, its 8 bytes.
        if (wc[i].status == IBV_WC_SUCCESS && q.wr_lengths[q.completions])
          check(wc[i].byte_len == q.wr_lengths[q.completions]);
        check(wc[i].qp_num == q.qpn);
        ++q.completions;
      }
    }
  }
  for (auto& r : s.recv) {
    shm::RecvReport rep;
    while (shm::ring_take(r.ring, r.ring_head, rep)) {
      check(rep.index < r.capacity.size());
      check(r.completed.insert(rep.index).second);
      // (A WRITE_WITH_IMM's length is the WRITE's: its data went to the memory it named.)
      if (rep.status == shm::kRecvOk && rep.opcode == shm::kRecvSend)
        check(rep.byte_len <= r.capacity[rep.index]);
      check(rep.dst_qp == r.qpn);
    }
  }
}

// ---- mutations that know the frames -----------------------------------------------------------

constexpr size_t kSetup = 5;

// A well-formed frame of what the other end sends, with the numbers this process answers to: a
// request to one of its receivers (the next in its connection's sequence, or another), a
// response to one of its senders (likewise), the added pair's DirectAdd, a Close, a ping or pong.
// `requests` and `responses`: how many of each the stream holds before, by QPN.
std::vector<uint8_t> make_frame(std::minstd_rand& rng, const std::map<uint32_t, uint64_t>& requests,
                                const std::map<uint32_t, uint64_t>& responses) {
  auto pick = [&](auto... v) {
    const uint64_t all[] = {uint64_t(v)...};
    return all[rng() % sizeof...(v)];
  };
  auto seq_of = [&](const std::map<uint32_t, uint64_t>& m, uint32_t qpn) -> uint64_t {
    auto it = m.find(qpn);
    const uint64_t next = it == m.end() ? 0 : it->second;
    switch (rng() % 8) {
      case 0:
        return rng() % 4;
      case 1:
        return next + 1;
      default:
        return next;
    }
  };
  const uint32_t lengths[] = {0, 1, 8, 64, 300, 4000, 16384, 20000, 40000};
  wire::Header h{};
  std::vector<uint8_t> body;
  uint64_t payload = 0;
  switch (rng() % 10) {
    case 0:
    case 1:
    case 2:
    case 3: {  // a request
      wire::Request r{};
      const uint32_t src = static_cast<uint32_t>(pick(0x401, 0x401, 0x402, 0x403, 0x404));
      r.src_qpn = src;
      r.dst_qpn = src - 0x100;
      r.seq = seq_of(requests, src);
      r.qp_type = src == 0x402 ? IBV_QPT_UC : IBV_QPT_RC;
      if (rng() % 16 == 0)
        r.qp_type = static_cast<uint32_t>(pick(IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD));
      r.opcode = static_cast<uint32_t>(pick(IBV_WR_SEND, IBV_WR_SEND_WITH_IMM, IBV_WR_SEND_WITH_INV,
                                            IBV_WR_RDMA_WRITE, IBV_WR_RDMA_WRITE_WITH_IMM,
                                            IBV_WR_RDMA_READ, IBV_WR_ATOMIC_CMP_AND_SWP,
                                            IBV_WR_ATOMIC_FETCH_AND_ADD));
      const uint32_t mr = static_cast<uint32_t>(rng() % 5);  // 4: no MR's key
      r.rkey = mr < kMrs ? 0x1100 * (mr + 1) : static_cast<uint32_t>(rng());
      r.length = lengths[rng() % 9];
      const uint64_t off = rng() % 3 == 0 ? rng() % 48000 : (rng() % 5000) & ~uint64_t(7);
      r.remote_addr = 0x100000ull * ((mr % kMrs) + 1) + off;
      if (shm::is_atomic(r.opcode)) r.length = 8;
      r.compare_add = rng() % 4;
      r.swap = rng();
      r.imm_data = static_cast<uint32_t>(rng());
      r.solicited = rng() % 2;
      r.rnr_retry = static_cast<uint8_t>(pick(0, 1, 7));
      r.timeout = static_cast<uint8_t>(pick(0, 1, 14, 31));
      r.retry_cnt = static_cast<uint8_t>(rng() % 8);
      r.flags = rng() % 2;
      if (shm::carries_data(r.opcode)) payload = r.length;
      h.type = static_cast<uint8_t>(wire::Type::kRequest);
      body.resize(sizeof(r));
      memcpy(body.data(), &r, sizeof(r));
      break;
    }
    case 4:
    case 5:
    case 6: {  // a response
      wire::Response r{};
      r.src_qpn = static_cast<uint32_t>(pick(0x101, 0x101, 0x102, 0x103));
      r.seq = seq_of(responses, r.src_qpn);
      r.status = rng() % 4 ? IBV_WC_SUCCESS : static_cast<uint32_t>(rng() % 22);
      r.byte_len = lengths[rng() % 9];
      r.atomic_old = rng();
      if (r.status == IBV_WC_SUCCESS && rng() % 2) payload = r.byte_len;
      h.type = static_cast<uint8_t>(wire::Type::kResponse);
      body.resize(sizeof(r));
      memcpy(body.data(), &r, sizeof(r));
      break;
    }
    case 7: {
      wire::DirectAdd a{};
      memcpy(a.ticket, kTicket, sizeof(a.ticket));
      a.src_qpn = 0x403;
      a.dst_qpn = 0x303;
      a.qp_type = IBV_QPT_RC;
      if (rng() % 4 == 0) a.dst_qpn = static_cast<uint32_t>(pick(0x301, 0x302, 0x304));
      h.type = static_cast<uint8_t>(wire::Type::kDirectAdd);
      body.resize(sizeof(a));
      memcpy(body.data(), &a, sizeof(a));
      break;
    }
    case 8: {
      wire::Close c{static_cast<uint32_t>(pick(0x401, 0x402, 0x403, 0x201, 0x202)),
                    static_cast<uint32_t>(pick(wire::kCloseSender, wire::kCloseReceiver))};
      h.type = static_cast<uint8_t>(wire::Type::kClose);
      body.resize(sizeof(c));
      memcpy(body.data(), &c, sizeof(c));
      break;
    }
    default: {
      wire::Ping p{rng() % 2 ? 0 : uint64_t(1'000'000'000) + rng() % 1000};
      h.type = static_cast<uint8_t>(rng() % 2 ? wire::Type::kPing : wire::Type::kPong);
      body.resize(sizeof(p));
      memcpy(body.data(), &p, sizeof(p));
      break;
    }
  }
  h.payload = static_cast<uint32_t>(payload);
  std::vector<uint8_t> f(sizeof(h));
  memcpy(f.data(), &h, sizeof(h));
  f.insert(f.end(), body.begin(), body.end());
  for (uint64_t i = 0; i < payload; ++i) f.push_back(static_cast<uint8_t>(i * 7 + 1));
  return f;
}

}  // namespace

extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t max_size);

// Half the time libFuzzer's own mutations; else a whole frame (make_frame) inserted between two
// frames of the stream, or the last frame dropped. The stream stays what the harness reads.
extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size,
                                          unsigned int seed) {
  std::minstd_rand rng(seed);
  if (size < kSetup || rng() % 2) return LLVMFuzzerMutate(data, size, max_size);
  const size_t start = kSetup + (data[0] & 15);
  if (start > size) return LLVMFuzzerMutate(data, size, max_size);
  // The frames the stream holds: where each ends, and the requests and responses before it.
  std::vector<size_t> ends{start};
  std::vector<std::pair<std::map<uint32_t, uint64_t>, std::map<uint32_t, uint64_t>>> seen(1);
  size_t pos = start;
  while (pos + sizeof(wire::Header) <= size) {
    wire::Header h;
    memcpy(&h, data + pos, sizeof(h));
    const uint32_t bs = wire::body_size(static_cast<wire::Type>(h.type));
    if (!bs || pos + sizeof(h) + bs + h.payload > size) break;
    auto counts = seen.back();
    const auto type = static_cast<wire::Type>(h.type);
    if (type == wire::Type::kRequest || type == wire::Type::kResponse) {
      uint32_t qpn;
      memcpy(&qpn, data + pos + sizeof(h), sizeof(qpn));  // src_qpn comes first in both
      ++(type == wire::Type::kRequest ? counts.first : counts.second)[qpn];
    }
    pos += sizeof(h) + bs + h.payload;
    ends.push_back(pos);
    seen.push_back(std::move(counts));
  }
  if (ends.size() > 1 && rng() % 8 == 0) {  // drop the last whole frame
    const size_t from = ends[ends.size() - 2], to = ends.back();
    memmove(data + from, data + to, size - to);
    return size - (to - from);
  }
  const size_t k = rng() % ends.size();
  std::vector<uint8_t> f = make_frame(rng, seen[k].first, seen[k].second);
  if (size + f.size() > max_size) {
    if (size >= max_size) return LLVMFuzzerMutate(data, size, max_size);
    f.resize(max_size - size);  // cut short: the stream ends inside it
  }
  const size_t at = ends[k];
  memmove(data + at + f.size(), data + at, size - at);
  memcpy(data + at, f.data(), f.size());
  return size + f.size();
}

// The input: five bytes of setup, up to 15 bytes that cut the stream into what arrives at each
// pass (the socket's reads), then the stream.
//   [0]: bits 0-3 the number of cut bytes; 4: after the stream, silence (else the end of it);
//        5: QP 0x301 is not ready at first (INIT for a few passes); 6: its RTR names another
//        source; 7: the program destroys QP 0x302 and its sending QP 0x102 mid-stream.
//   [1]: requests posted by QP 0x101 (RC): count (bits 0-2) and kinds (a seed)
//   [2]: the same for QP 0x102 (UC)
//   [3]: receives posted at first (bits 0-2 for 0x301, 3-5 for 0x302), and each pass (6-7)
//   [4]: the clock's step per pass (bits 0-3), the senders' timeout (bits 4-5), the receivers'
//        RNR timer (bits 6-7)
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < kSetup) return 0;
  const uint8_t* cfg = data;
  const size_t ncuts = cfg[0] & 15;
  if (size < kSetup + ncuts) return 0;
  const uint8_t* cuts = data + kSetup;
  const uint8_t* stream = cuts + ncuts;
  const size_t len = size - kSetup - ncuts;

  Self& s = self();
  s.reset(static_cast<uint8_t>(cfg[4] >> 6));
  const uint32_t timeouts[] = {0, 8, 14, 20};
  for (auto& q : s.send) q.shared->timeout.store(timeouts[(cfg[4] >> 4) & 3]);
  RecvQp& r1 = s.recv[0];
  if (cfg[0] & 0x20) r1.obj->attrs.state.store(IBV_QPS_INIT);
  if (cfg[0] & 0x40) r1.wanted = false;
  for (uint32_t i = 0; i < (cfg[3] & 7u); ++i) post_recv(s, s.recv[0], i);
  for (uint32_t i = 0; i < ((cfg[3] >> 3) & 7u); ++i) post_recv(s, s.recv[1], i + 1);
  for (uint32_t i = 0; i < 4; ++i) post_recv(s, s.recv[2], i);
  uint32_t seed = cfg[1];
  for (uint32_t i = 0; i < (cfg[1] & 7u); ++i) post_send(s, s.send[0], seed = seed * 37 + 11);
  seed = cfg[2];
  for (uint32_t i = 0; i < (cfg[2] & 7u); ++i) post_send(s, s.send[1], seed = seed * 37 + 11);

  bool detached = false;
  {
    Conn c(s, stream, len);
    c.link().eof = !(cfg[0] & 0x10);
    for (auto& q : s.send) c.attach_sender(q);
    check(c.attach_receiver(s.recv[0], kPeerIpv4, s.recv[0].src_qpn) == 0);
    check(c.attach_receiver(s.recv[1], kPeerIpv4, s.recv[1].src_qpn) == 0);

    int64_t now = 1'000'000'000;
    const int64_t dt = int64_t(1000) << (cfg[4] & 15);
    size_t cut = 0;
    // Each pass, the next piece of the stream arrives; then a few passes with nothing new (the
    // silence that may follow), bounded.
    int quiet = 0;
    for (int pass = 0; c.live() && quiet < 40; ++pass) {
      if (!c.link().all_arrived()) {
        const size_t b = ncuts ? cuts[cut++ % ncuts] : 255;
        c.link().arrive(b == 255 ? len : 1 + size_t(b) * b);
      } else {
        ++quiet;
      }
      now += c.link().all_arrived() && (cfg[0] & 0x10) ? 50'000'000 : dt;
      if (pass == 3) r1.obj->attrs.state.store(IBV_QPS_RTS);
      if (pass == 2 && (cfg[0] & 0x80)) {
        c.detach_receiver(s.recv[1]);
        c.detach_sender(s.send[1].qpn);
        detached = true;
      }
      for (uint32_t i = 0; i < (cfg[3] >> 6); ++i) {
        post_recv(s, s.recv[0], pass + i);
        post_recv(s, s.recv[1], pass + i + 2);
      }
      c.drive(now);
      poll(s);
    }
    c.finish("the end of the input");
    // A pass after the end flushes what was posted meanwhile.
    c.drive(now + dt);
    poll(s);
    check(c.resp().held_count() == 0);
    check(c.link().held_bytes == 0 && c.link().held_requests == 0);
  }
  // Every request posted completed, once, in order (the detached sender's aside: its QP went).
  for (auto& q : s.send) {
    if (&q == &s.send[1] && detached) continue;
    check(q.sq->done.load() == q.posted);
    check(q.completions == q.posted);
  }
  s.check_memory();
  return 0;
}
