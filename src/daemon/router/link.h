// One TCP connection between the routers of two hosts: non-blocking, frames in both
// directions, inside TLS 1.3 (tls.h) unless the cluster runs in plaintext.
//
// Outgoing frames wait in a fixed ring whose payloads point at the memory they come from (a
// client's registered memory). Without TLS, and with kernel TLS, sendmsg gathers them from
// there; with TLS in user space they are copied into a staging buffer that SSL_write
// encrypts. Incoming bytes go through a FrameParser (frame_parser.h), whose payloads go where
// the handler says: into a client's memory (large ones read straight from the socket, or from
// SSL_read, into it), into a sink, or nowhere.
#pragma once

#include <openssl/ssl.h>
#include <sys/uio.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/address.h"
#include "common/unique_fd.h"
#include "transport/frame_parser.h"
#include "transport/wire.h"
#include "shm/respond.h"

namespace vrdma::daemon {

using transport::FrameParser;
using transport::FrameSink;
using transport::PayloadDest;

class Link;

class LinkHandler {
 public:
  virtual ~LinkHandler() = default;
  // A frame's header and body arrived and are well-formed (frame_check.h); fill `dest` for its
  // payload (if any). False closes the link (*why says why).
  virtual bool on_frame(Link& link, wire::Type type, const uint8_t* body, uint32_t payload,
                        PayloadDest& dest, const char** why) = 0;
  // PayloadDest::kSink: the next bytes of the payload.
  virtual void on_payload_data(Link& link, const uint8_t* data, size_t len) = 0;
  // The payload of the last frame is in place (called for frames with a payload only).
  virtual void on_payload(Link& link) = 0;
};

class Link : private FrameSink {
 public:
  static constexpr uint32_t kRing = 4096;        // outgoing frames in flight
  static constexpr uint32_t kOwnedBytes = 4096;  // per frame, for data that must be copied

  enum class State : uint8_t {
    kConnecting,  // outbound: TCP connect in progress
    kHandshake,   // TLS handshake in progress
    kOpen,        // frames flow
  };

  // An outbound link starts kConnecting; an inbound one is connected (kOpen, or kHandshake
  // once use_tls() gave it a session).
  Link(uint32_t id, UniqueFd fd, bool outbound);
  ~Link() override;
  Link(const Link&) = delete;
  Link& operator=(const Link&) = delete;

  uint32_t id() const { return id_; }
  // A new number, as another router thread takes the link (Router::take_link).
  void renumber(uint32_t id) { id_ = id; }
  int fd() const { return fd_.get(); }
  bool outbound() const { return outbound_; }
  State state() const { return state_; }
  bool open() const { return state_ == State::kOpen; }

  // Encrypts the link with this session (the link owns it). Before connected() for outbound
  // links, right after accept for inbound ones.
  void use_tls(SSL* ssl);
  SSL* ssl() const { return ssl_; }
  // Outbound: the TCP connection is up (then the handshake, or frames at once in plaintext).
  void tcp_connected();
  // Advances the TLS handshake: 1 done (the link is open), 0 not yet, -1 failed (*why).
  int handshake(std::string* why);
  // Joins two ends that live in this process and thread (the router's link to itself,
  // router_self.cc): each reads what the other queued straight from where its bytes are (one
  // copy, from the sender's memory into the receiver's) without a system call. Their sockets
  // then carry nothing but the end of the stream: when one end goes, the other reads its
  // socket again and finds the peer closed, as across hosts.
  static void join(Link& a, Link& b);
  bool joined() const { return joined_ != nullptr; }
  // Which direction the kernel encrypts (kernel TLS); false in plaintext or user-space TLS.
  bool ktls_send() const { return ktls_send_; }
  bool ktls_recv() const { return ktls_recv_; }

  // What the router knows of the other side.
  uint32_t host_id = 0;        // the peer host (outbound: from the directory; inbound: once
                               // authenticated)
  bool authenticated = false;  // inbound: its Hello (and certificate) passed
  bool self = false;           // an end of the router's link to itself (router_self.cc)
  uint32_t lane = wire::kMainLane;  // which of the two hosts' links this is (wire.h: lanes)
  uint32_t peer_ipv4 = 0;      // the TCP peer's address (network order)
  std::vector<Ipv4Cidr> peer_cidrs;  // the container networks its host owns (directory)
  uint64_t peer_boot = 0;
  std::string peer_addr;
  int64_t opened_ns = 0;  // accepted or connect started
  int64_t connect_deadline_ns = 0;
  int64_t last_rx_ns = 0;
  int64_t last_ping_ns = 0;
  int64_t last_used_ns = 0;     // the last time a frame other than a ping passed
  int64_t tx_stalled_ns = 0;    // since when queued frames wait for the socket (0: they do not)
  int last_outq = 0;            // bytes the kernel held unacknowledged when last looked at
  int64_t last_outq_ns = 0;     // the last time that was seen shrinking
  bool rx_paused = false;       // not read while its responses have no room
  // The socket refused part of the last write (its send buffer is full). flush() tries
  // regardless; the router tries no write until the socket says it has room again (EPOLLOUT,
  // which the kernel signals once a good part of the buffer is free), so a full link costs
  // one large write per drain instead of a small one per pass.
  bool tx_blocked = false;
  // The socket may hold bytes: set when the router's epoll says so (level-triggered), cleared
  // once a read finds the socket empty, or takes less than it asked for and less than
  // kFlowing (a stream that flows is read on until empty: what arrived meanwhile comes in the
  // same pass, its responses in the same write). What arrives after is signalled again. A
  // pass reads only such links, and so makes no system call for links with nothing to read.
  bool rx_ready = true;
  uint32_t routed_qps = 0;      // local RC/UC QPs whose requests go out on this link
  uint64_t held_bytes = 0;      // payload bytes held for requests that came on it
  uint32_t held_requests = 0;   // and those requests

  // Queues a frame: header+body copied, payload referenced (must stay valid until written)
  // or copied into the frame's own buffer (`copy`, at most kOwnedBytes). False when full.
  bool send(wire::Type type, const void* body, uint32_t body_len, const shm::Seg* payload = nullptr,
            int nseg = 0, uint64_t payload_len = 0, bool copy = false);
  bool has_room(uint32_t frames = 1) const { return kRing - (head_ - tail_) >= frames; }
  bool tx_pending() const {
    return head_ != tail_ || plain_len_ || tls_out_pos_ < tls_out_len_;
  }
  // Decrypted bytes the TLS layer holds that the socket no longer signals.
  bool rx_pending() const;

  // Writes what the socket takes. Returns false when the connection failed. Progress of any
  // byte clears tx_stalled_ns.
  bool flush(int64_t now);
  // Reads and dispatches frames until the socket is empty, `budget` bytes of frames went
  // through the receive buffer (which bounds how many frames one call dispatches), or
  // `direct_budget` bytes were read in all (payloads read straight into their destination
  // count there only: a link carrying large payloads yields to the others now and then).
  // Returns false when the connection ended or sent garbage (*why says which).
  bool receive(LinkHandler& h, size_t budget, const char** why,
               size_t direct_budget = kDirectBudget);
  static constexpr size_t kDirectBudget = 1024 * 1024;

  uint64_t bytes_out = 0, bytes_in = 0;
  uint64_t socket_writes = 0, socket_reads = 0;  // send/recv calls on the socket that moved data
  // (a joined link makes none)
  uint64_t bytes_queued = 0;  // frame bytes queued by send() since the link opened
  // Queued frame bytes not yet written to the socket (plaintext).
  uint64_t unwritten_bytes() const { return bytes_queued - bytes_out; }
  uint64_t frames_in() const { return parser_.frames(); }
  uint64_t frames_out() const { return head_; }  // frames queued since the link opened
  int64_t rtt_ns = -1;                           // the last ping's round trip (-1: none yet)

 private:
  struct Out {
    uint8_t hdr[sizeof(wire::Header) + wire::kMaxBody];
    uint32_t hdr_len;
    int niov;
    iovec iov[shm::kMaxSendSge + 1];
  };
  static constexpr size_t kRecvBuffer = 256 * 1024;
  static constexpr uint64_t kDirectRead = 16 * 1024;  // payloads this large skip the buffer
  // User-space TLS: small pieces of frames are gathered into a staging buffer for SSL_write;
  // pieces this large are encrypted from where they are. The records OpenSSL makes collect in
  // tls_out_, which goes to the socket in large writes.
  static constexpr size_t kStage = 64 * 1024;
  static constexpr uint64_t kDirectWrite = 16 * 1024;
  static constexpr size_t kTlsOut = 256 * 1024;
  static constexpr size_t kTlsOutHigh = kTlsOut / 2;  // stop encrypting while this much waits
  // User-space TLS: what the socket holds is read into tls_in_ in large reads, from which
  // OpenSSL takes its records (one recv per up to kTlsIn bytes, not one per record).
  static constexpr size_t kTlsIn = 256 * 1024;
  static constexpr size_t kFlowing = 16 * 1024;  // rx_ready
  static_assert(kFlowing < kTlsIn);

  // FrameSink, forwarded to the handler of the receive() in progress.
  bool on_frame(wire::Type type, const uint8_t* body, uint32_t payload, PayloadDest& dest,
                const char** why) override;
  void on_payload_data(const uint8_t* data, size_t len) override;
  void on_payload() override;

  bool flush_plain();
  bool flush_tls();
  // The plaintext SSL_write takes next (plain_, plain_len_): staged pieces of frames, or one
  // large piece in place. Retires the frames it is done with. False when nothing is queued.
  bool next_plain();
  bool drain_tls_out();  // writes the collected records to the socket
  static BIO_METHOD* out_method();
  static int out_write(BIO* b, const char* data, int len);
  static BIO_METHOD* in_method();
  static int in_read(BIO* b, char* data, int len);
  // recv / SSL_read into one buffer or a scatter list: >0 bytes, 0 end of stream, -1 errno set
  // (EAGAIN: nothing now).
  ssize_t read_some(uint8_t* buf, size_t len);
  ssize_t socket_read(const iovec* iov, int n);  // recvmsg, and what it says of rx_ready
  // A joined link's queued frames, copied into `iov` by the other end's socket_read: the
  // frames taken whole retire. Bytes copied, 0 when none wait.
  size_t take(const iovec* iov, int n);
  ssize_t read_vec(const iovec* iov, int n);

  uint32_t id_;
  UniqueFd fd_;
  bool outbound_;
  State state_;
  SSL* ssl_ = nullptr;
  bool ktls_send_ = false, ktls_recv_ = false;
  Link* joined_ = nullptr;  // the other end in this process (join())

  // Allocated when the first frame is queued (an inbound link sends nothing before it is
  // authenticated).
  std::unique_ptr<Out[]> ring_;
  std::unique_ptr<uint8_t[]> owned_;
  uint64_t head_ = 0, tail_ = 0;  // produce at head, write from tail
  uint64_t tail_off_ = 0;         // bytes of the tail frame already written (or staged)
  std::unique_ptr<uint8_t[]> stage_;
  const uint8_t* plain_ = nullptr;
  size_t plain_len_ = 0;
  bool plain_direct_ = false;  // plain_ points into a frame (its bytes count in tail_off_)
  std::unique_ptr<uint8_t[]> tls_out_;
  size_t tls_out_pos_ = 0, tls_out_len_ = 0;
  std::unique_ptr<uint8_t[]> tls_in_;
  size_t tls_in_pos_ = 0, tls_in_len_ = 0;

  // Receive side.
  std::unique_ptr<uint8_t[]> rbuf_;
  FrameParser parser_;
  LinkHandler* handler_ = nullptr;  // during receive()
};

}  // namespace vrdma::daemon
