// One stream between two ends that exchange frames (wire.h): non-blocking, frames in both
// directions. vrdmad's router links hosts with it (over TCP, inside TLS unless the cluster runs
// in plaintext: daemon/router/link.h adds the TLS layer); the client library's direct path links
// two containers' QPs with it (TCP between the two containers' addresses).
//
// Outgoing frames wait in a fixed ring whose payloads point at the memory they come from (a
// client's registered memory); sendmsg gathers them from there. Incoming bytes go through a
// FrameParser (frame_parser.h), whose payloads go where the handler says: into a client's
// memory (large ones read straight from the socket into it), into a sink, or nowhere.
//
// Transports: a socket (TCP, or any connected stream socket: the tests take socket pairs), a
// layer over it that a subclass provides (the router's TLS), or two ends joined in memory in one
// process (join()), which read each other's queued frames without a system call.
#pragma once

#include <sys/uio.h>

#include <cstdint>
#include <memory>
#include <string>

#include "common/unique_fd.h"
#include "shm/respond.h"
#include "transport/frame_parser.h"
#include "transport/wire.h"

namespace vrdma::transport {

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

// How large a link's buffers are: vrdmad's links between hosts carry many QPs each; a direct
// connection carries one QP's work.
struct LinkSizes {
  uint32_t ring = 4096;             // outgoing frames in flight
  uint32_t owned_bytes = 4096;      // per frame, for payloads that must be copied (`copy`)
  uint32_t recv_buffer = 256 * 1024;
};

class Link : private FrameSink {
 public:
  enum class State : uint8_t {
    kConnecting,  // outbound: connect in progress
    kHandshake,   // a layer over the socket is being set up (TLS)
    kOpen,        // frames flow
  };

  // An outbound link starts kConnecting (until connected()); an inbound one is open.
  Link(uint32_t id, UniqueFd fd, bool outbound, const LinkSizes& sizes = {});
  ~Link() override;
  Link(const Link&) = delete;
  Link& operator=(const Link&) = delete;

  uint32_t id() const { return id_; }
  // A new number, as another owner takes the link (the router's threads hand links over).
  void renumber(uint32_t id) { id_ = id; }
  int fd() const { return fd_.get(); }
  bool outbound() const { return outbound_; }
  State state() const { return state_; }
  bool open() const { return state_ == State::kOpen; }
  // Outbound: the connection is up (then the handshake of a layer over it, or frames at once).
  void connected();
  // Advances a layer's handshake: 1 done (the link is open), 0 not yet, -1 failed (*why).
  virtual int handshake(std::string* why);

  // Joins two ends that live in this process and thread (the router's link to itself): each
  // reads what the other queued straight from where its bytes are (one copy, from the sender's
  // memory into the receiver's) without a system call. Their sockets then carry nothing but the
  // end of the stream: when one end goes, the other reads its socket again and finds the peer
  // closed, as across hosts.
  static void join(Link& a, Link& b);
  bool joined() const { return joined_ != nullptr; }

  int64_t last_rx_ns = 0;       // the last time bytes arrived
  int64_t last_ping_ns = 0;     // the last ping sent (requester.h)
  int64_t tx_stalled_ns = 0;    // since when queued frames wait for the socket (0: they do not)
  int last_outq = 0;            // bytes the kernel held unacknowledged when last looked at
  int64_t last_outq_ns = 0;     // the last time that was seen shrinking
  // The socket refused part of the last write (its send buffer is full). flush() tries
  // regardless; an owner that watches the socket tries no write until it says it has room
  // again (EPOLLOUT, which the kernel signals once a good part of the buffer is free), so a
  // full link costs one large write per drain instead of a small one per pass.
  bool tx_blocked = false;
  // The socket may hold bytes: set when the owner's poll says so (level-triggered), cleared
  // once a read finds the socket empty, or takes less than it asked for and less than
  // kFlowing (a stream that flows is read on until empty: what arrived meanwhile comes in the
  // same pass, its responses in the same write). What arrives after is signalled again. An
  // owner reads only such links, and so makes no system call for links with nothing to read.
  bool rx_ready = true;
  uint64_t held_bytes = 0;      // payload bytes held for requests that came on it (responder.h)
  uint32_t held_requests = 0;   // and those requests
  int64_t rtt_ns = -1;          // the last ping's round trip (-1: none yet)

  // Queues a frame: header+body copied, payload referenced (must stay valid until written)
  // or copied into the frame's own buffer (`copy`, at most LinkSizes::owned_bytes). False when
  // full.
  bool send(wire::Type type, const void* body, uint32_t body_len, const shm::Seg* payload = nullptr,
            int nseg = 0, uint64_t payload_len = 0, bool copy = false);
  bool has_room(uint32_t frames = 1) const { return sizes_.ring - (head_ - tail_) >= frames; }
  uint32_t ring_size() const { return sizes_.ring; }
  virtual bool tx_pending() const { return head_ != tail_; }
  // Bytes a layer over the socket holds that the socket no longer signals.
  virtual bool rx_pending() const { return false; }

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
  // Whether the link has heard nothing from its peer lately: no bytes received, and nothing of
  // what this end sent acknowledged by the peer (the kernel's send queue, or a joined end's
  // ring, not shrinking) for longer than `bound`. Bytes the kernel merely accepted prove
  // nothing.
  bool silent(int64_t now, int64_t bound);

  uint64_t bytes_out = 0, bytes_in = 0;
  uint64_t socket_writes = 0, socket_reads = 0;  // send/recv calls on the socket that moved data
  // (a joined link makes none)
  uint64_t bytes_queued = 0;  // frame bytes queued by send() since the link opened
  // Queued frame bytes not yet written to the socket (plaintext).
  uint64_t unwritten_bytes() const { return bytes_queued - bytes_out; }
  uint64_t frames_in() const { return parser_.frames(); }
  uint64_t frames_out() const { return head_; }  // frames queued since the link opened
  // How many bytes of the stream this end may read before its owner lets it read on (0: no
  // limit): an inbound router link reads nothing but its Hello until the Hello authenticated
  // it (daemon/router/link.h).
  virtual uint64_t read_limit() const { return 0; }

 protected:
  struct Out {
    uint8_t hdr[sizeof(wire::Header) + wire::kMaxBody];
    uint32_t hdr_len;
    int niov;
    iovec iov[shm::kMaxSendSge + 1];
  };
  static constexpr size_t kFlowing = 16 * 1024;  // rx_ready

  // A layer over the socket (TLS) overrides these: how queued frames reach the socket, and how
  // bytes come back from it. The defaults write and read the socket itself.
  virtual bool flush_out();
  virtual ssize_t read_some(uint8_t* buf, size_t len);
  virtual ssize_t read_vec(const iovec* iov, int n);
  void set_state(State s) { state_ = s; }

  // recvmsg on the socket (or a joined end's queued frames), and what it says of rx_ready:
  // >0 bytes, 0 end of stream, -1 errno set (EAGAIN: nothing now).
  ssize_t socket_read(const iovec* iov, int n);
  // The ring, for a layer that takes the frames' bytes itself.
  const Out& out_at(uint64_t f) const { return ring_[f % sizes_.ring]; }
  uint64_t head_ = 0, tail_ = 0;  // produce at head, write from tail
  uint64_t tail_off_ = 0;         // bytes of the tail frame already written (or staged)

 private:
  // FrameSink, forwarded to the handler of the receive() in progress.
  bool on_frame(wire::Type type, const uint8_t* body, uint32_t payload, PayloadDest& dest,
                const char** why) override;
  void on_payload_data(const uint8_t* data, size_t len) override;
  void on_payload() override;

  bool flush_plain();
  // A joined link's queued frames, copied into `iov` by the other end's socket_read: the
  // frames taken whole retire. Bytes copied, 0 when none wait.
  size_t take(const iovec* iov, int n);

  static constexpr uint64_t kDirectRead = 16 * 1024;  // payloads this large skip the buffer

  uint32_t id_;
  UniqueFd fd_;
  bool outbound_;
  State state_;
  LinkSizes sizes_;
  Link* joined_ = nullptr;  // the other end in this process (join())

  // Allocated when the first frame is queued (an inbound link may send nothing before it is
  // authenticated); the buffer for copied payloads when the first is.
  std::unique_ptr<Out[]> ring_;
  std::unique_ptr<uint8_t[]> owned_;

  // Receive side.
  std::unique_ptr<uint8_t[]> rbuf_;
  FrameParser parser_;
  LinkHandler* handler_ = nullptr;  // during receive()
};

}  // namespace vrdma::transport
