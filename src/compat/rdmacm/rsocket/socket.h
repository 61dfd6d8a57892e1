// rsockets: the socket API of <rdma/rsocket.h> (rsocket, rbind, rconnect, rsend, rpoll, ...)
// built on this library's rdma_cm and on verbs. This header holds what the files of this folder
// share: the socket object, its table, and the internal operations.
//
//   table.cc     fd -> socket
//   endpoint.cc  creating and destroying a socket's rdma_cm id, QP, CQ and buffers; addresses
//   pool.cc      registered buffers and CQs of closed sockets, reused
//   connect.cc   rconnect and its state machine
//   listen.cc    rlisten, raccept and the accept service thread
//   transfer.cc  the data path: completions, credits, posting, readiness
//   wait.cc      sleeping on a socket and waking the threads that sleep on it
//   stream.cc    rsend/rrecv and their variants
//   poll.cc      rpoll, rselect
//   options.cc   rsetsockopt, rgetsockopt, rfcntl
//   iomap.cc     riomap, riounmap, riowrite
//   api.cc       rsocket, rbind, rshutdown, rclose, rgetsockname, rgetpeername
//
// An rsocket's number is a real file descriptor: the one of its own rdma_cm event channel, as
// in rdma-core. rpoll knows which descriptors are rsockets and waits on what stands behind them
// (completion channel, event channel, accept queue); given to non-rsocket calls such a
// descriptor means nothing useful.
//
// Locking: each socket has one mutex, held by every call on it and released while the call
// sleeps. A call that sleeps registers a Waiter (an eventfd of its thread); whoever processes
// completions of a socket that others sleep on wakes them. The accept service takes a
// listener's mutex, never the other way round.
#pragma once

#include <netinet/in.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <rdma/rsocket.h>

#include <cstdint>
#include <deque>
#include <mutex>
#include <vector>

#include "wire.h"

namespace vrdma::rsock {

// Defaults, as rdma-core's rsockets has them (buffers: our own).
inline constexpr uint32_t kDefaultBuf = 256 << 10;  // send buffer and receive ring, bytes
inline constexpr uint32_t kMinBuf = 8 << 10;
inline constexpr uint32_t kDefaultQueue = 384;  // RDMA_SQSIZE, RDMA_RQSIZE
inline constexpr uint32_t kMinQueue = 16;
inline constexpr uint32_t kMaxQueue = 8192;
inline constexpr uint32_t kDefaultInline = 64;   // RDMA_INLINE
inline constexpr uint32_t kMaxInline = 4096;     // what the vrdma device supports
inline constexpr uint32_t kMaxIomap = 256;       // RDMA_IOMAPSIZE
inline constexpr uint32_t kCtrlRecvs = 16;       // receives beyond the data messages
inline constexpr uint32_t kCtrlSends = 4;        // send queue slots kept for control messages
inline constexpr uint32_t kMaxPiece = 64 << 10;  // bytes per RDMA WRITE
inline constexpr uint32_t kSendLowat = 2048;     // writable: at least this much buffer free
inline constexpr uint64_t kRecvId = 1ull << 63;  // wr_id of receives (sends: counters below)

// Socket options. A listener's are copied into the sockets it accepts.
struct Options {
  uint32_t sbuf = kDefaultBuf;  // SO_SNDBUF (the size used; set value doubled, as Linux does)
  uint32_t rbuf = kDefaultBuf;  // SO_RCVBUF
  uint32_t sq = kDefaultQueue;
  uint32_t rq = kDefaultQueue;
  uint32_t inline_size = kDefaultInline;
  uint32_t iomap = 0;
  int keepidle = 7200;
  int linger_time = 0;
  bool reuseaddr = false;
  bool keepalive = false;
  bool nodelay = false;
  bool oobinline = false;
  bool linger = false;
  bool v6only = false;
};

enum class State : uint8_t {
  kInit,
  kBound,
  kListening,
  kConnecting,  // rconnect under way (address, route, connection)
  kConnected,
  kFailed,  // the connection attempt failed; so_error says why
};

// A message in the receive ring, not yet consumed by the application.
struct RxMsg {
  uint32_t off;  // in the ring
  uint32_t len;  // payload bytes (0 for an IO mapping, skipped by readers)
  uint32_t adv;  // ring bytes it occupies
};

struct LocalMap {  // riomap of this side
  ibv_mr* mr;
  off_t offset;
  int index;  // slot in the peer's table, -1 for a local (PROT_NONE) mapping
};

struct PeerMap {  // an IO mapping the peer announced
  uint64_t offset = 0, addr = 0, length = 0;
  uint32_t rkey = 0;
};

struct Waiter {
  int fd;  // eventfd of the sleeping thread
  Waiter* next;
  Waiter* prev;
};

struct Listener;

struct Socket {
  int fd = -1;  // the event channel's descriptor: the socket's number
  int domain = AF_INET;
  std::mutex mu;
  State state = State::kInit;
  int fl = 0;        // O_NONBLOCK and the other file status flags (rfcntl)
  int so_error = 0;  // SO_ERROR
  Options opt;
  rdma_event_channel* ch = nullptr;
  rdma_cm_id* id = nullptr;
  sockaddr_in local{}, peer{};

  // ---- endpoint (a connected socket) ----
  ibv_comp_channel* cc = nullptr;
  ibv_cq* cq = nullptr;
  ibv_qp* qp = nullptr;
  uint8_t* rbuf = nullptr;  // the ring
  ibv_mr* rmr = nullptr;
  uint32_t ring = 0, slot = 0, rq_depth = 0;
  uint8_t* sbuf = nullptr;
  ibv_mr* smr = nullptr;
  uint32_t sbuf_size = 0;
  std::vector<ibv_recv_wr> recv_wrs;  // rq_depth receives, chained

  // ---- send side (all counters cumulative) ----
  uint64_t peer_ring_addr = 0;
  uint32_t peer_rkey = 0, peer_ring = 0, peer_slot = 0;
  uint64_t tx_tail = 0;      // ring bytes used in the peer's ring
  uint64_t tx_credited = 0;  // ring bytes the peer has freed
  uint32_t sq_size = 0;
  uint64_t sq_posted = 0, sq_done = 0;
  uint32_t unsignaled = 0;
  uint64_t sb_head = 0, sb_done = 0;  // send buffer bytes used / released
  bool credit_due = false;            // a kCredit could not be posted yet

  // ---- receive side ----
  std::vector<RxMsg> rmsg;  // power-of-two ring of unread messages
  uint64_t rm_head = 0, rm_tail = 0;
  uint32_t head_used = 0;  // bytes of the head message already read
  uint64_t rx_pos = 0;     // ring bytes of all messages seen
  uint64_t rx_freed = 0, rx_reported = 0;
  uint32_t reposts = 0;  // receives to post again

  // ---- connection state ----
  bool rd_shut = false, wr_shut = false;  // shutdown by this side
  bool fin_sent = false, close_sent = false;
  bool peer_fin = false;     // the peer sends no more
  bool peer_closed = false;  // the peer reads no more either
  int err = 0;               // the connection broke (ECONNRESET, ...)
  bool cq_armed = false;
  uint32_t unacked = 0;  // completion events taken, not yet acknowledged

  // ---- riomap ----
  std::vector<LocalMap> maps;
  std::vector<PeerMap> peer_maps;    // opt.iomap entries, filled by the peer
  uint32_t peer_iomap = 0;           // entries the peer accepts from us
  std::deque<IomapEntry> iomap_out;  // announcements not yet sent

  Waiter* waiters = nullptr;
  bool closing = false;     // rclose under way: sleepers leave with EBADF
  Listener* lst = nullptr;  // when listening
};

// ---- table.cc ----
Socket* lookup(int fd);
int insert(Socket* s);  // 0 or errno
void remove(Socket* s);

// ---- endpoint.cc ----
int fail(int err);  // errno = err, -1
// A new socket with its event channel (non-blocking) and rdma_cm id; not in the table.
Socket* new_socket(int domain, int& err);
// A socket's event channel, non-blocking, its descriptor (the socket's number) above every
// descriptor open now, the one a caller just took for the socket included (librspreload maps
// select()'s results back by walking descriptors upwards: a socket's number below its caller's
// descriptor would stand for it). nullptr with err.
rdma_event_channel* socket_channel(int& err);
// The QP, CQ, completion channel, ring and send buffer of a socket whose id has a device.
int create_endpoint(Socket& s);
ConnData conn_data(const Socket& s);
int take_conn_data(Socket& s, const void* data, uint8_t len);  // 0 or errno
void destroy_socket(Socket* s);                                // everything, not the table entry
uint32_t cq_entries(const Socket& s);

// ---- pool.cc ----
// The registered buffers, CQ and completion channel of a closed socket of the same sizes, if
// one is kept (s.ring and s.sbuf_size set); true when s got them.
bool pool_take(Socket& s, uint32_t cqe);
// Keeps (or frees) them once the socket's QP is gone; the socket no longer has them.
void pool_give(Socket& s);
// AF_INET or AF_INET6 (v4-mapped, wildcard, loopback) to an IPv4 address.
int to_v4(const sockaddr* sa, socklen_t len, int domain, sockaddr_in& out);
void from_v4(const Socket& s, const sockaddr_in& in, sockaddr* out, socklen_t* len);

// ---- connect.cc ----
// Drives a connection attempt with the events that arrived: 0 when connected, EINPROGRESS
// while under way, else the error (state kFailed).
int drive_connect(Socket& s);

// ---- listen.cc ----
bool accept_ready(Socket& s);
int accept_wait_fd(const Socket& s);
void stop_listening(Socket& s);  // with s.mu held by nobody

// ---- transfer.cc and wait.cc (s.mu held) ----
void progress(Socket& s);    // completions: data, credits, control, errors
void process_cm(Socket& s);  // rdma_cm events of a connected socket (disconnects)
void peer_left(Socket& s, rdma_cm_event_type t);  // one such event
bool readable(const Socket& s);
bool writable(Socket& s);
short poll_events(Socket& s, short events);       // what rpoll reports, after progress
int post_ctrl(Socket& s, Op op, uint32_t value);  // 0, or EAGAIN without a send slot
int post_write(Socket& s, Op op, const void* buf, uint32_t len, uint64_t raddr, uint32_t rkey,
               bool imm);  // copies or inlines buf
// One ring message (kData or kIomap) of at most len bytes: the bytes sent, 0 without room.
uint32_t send_message(Socket& s, Op op, const void* buf, uint32_t len);
uint32_t sq_free(const Socket& s);
uint32_t sbuf_free(const Socket& s);
void consume(Socket& s, uint32_t bytes);  // the reader took bytes of the head message(s)
void return_credit(Socket& s);
void flush_iomaps(Socket& s);
// Blocks (unless nonblock) until ready(s) or timeout_ms passes (-1: no limit). Returns 0 when
// ready, EAGAIN when nonblock and not ready, ETIMEDOUT, EINTR (a signal), EBADF (rclose).
template <typename Pred>
int wait_until(Socket& s, std::unique_lock<std::mutex>& lk, bool nonblock, Pred ready,
               int timeout_ms = -1);
// One sleep of the calling thread on the socket's descriptors (and its kick eventfd).
int sleep_once(Socket& s, std::unique_lock<std::mutex>& lk, int timeout_ms);
// Arms the CQ so that sleeping is safe, then takes what arrived meanwhile.
void prepare_sleep(Socket& s);
// Descriptors a sleeper on this socket waits for (up to 3).
int wait_fds(const Socket& s, pollfd* out);
void after_wake(Socket& s, const pollfd* fds, int n);
void kick_waiters(Socket& s, const Waiter* self);
int thread_wake_fd();  // this thread's eventfd, -1 if it cannot have one
void drain(int fd);
int64_t now_ns();
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

template <typename Pred>
int wait_until(Socket& s, std::unique_lock<std::mutex>& lk, bool nonblock, Pred ready,
               int timeout_ms) {
  constexpr int64_t kSpinNs = 20000;  // poll this long before sleeping
  progress(s);
  if (ready(s)) return 0;
  if (nonblock) return EAGAIN;
  int64_t start = now_ns();
  int64_t deadline = timeout_ms < 0 ? -1 : start + int64_t(timeout_ms) * 1000000;
  for (;;) {
    if (s.closing) return EBADF;
    int64_t now = now_ns();
    if (deadline >= 0 && now >= deadline) return ETIMEDOUT;
    if (now - start < kSpinNs) {
      lk.unlock();
      cpu_relax();
      lk.lock();
      progress(s);
      if (ready(s)) return 0;
      continue;
    }
    prepare_sleep(s);
    if (ready(s)) return 0;
    int left = deadline < 0 ? -1 : int((deadline - now) / 1000000) + 1;
    int e = sleep_once(s, lk, left);
    progress(s);
    if (ready(s)) return 0;
    if (e == EINTR) return EINTR;  // a signal ends the wait, as it ends a socket call
  }
}

}  // namespace vrdma::rsock
