// One TCP connection between the routers of two hosts: non-blocking, frames in both
// directions. Outgoing frames wait in a fixed ring whose payloads point at the memory they
// come from (a client's registered memory) until the kernel took them; incoming frames are
// parsed from a receive buffer, and each frame's payload goes where the handler says: straight
// into a client's memory, read directly from the socket when it is large.
#pragma once

#include <sys/uio.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/unique_fd.h"
#include "daemon/router/wire.h"
#include "shm/respond.h"

namespace vrdma::daemon {

class Link;

// Where an incoming frame's payload goes: up to kMaxRecvSge segments, or nowhere (discard).
struct PayloadDest {
  shm::Seg segs[shm::kMaxRecvSge + 1];
  int nsegs = 0;
  bool discard = true;
};

class LinkHandler {
 public:
  virtual ~LinkHandler() = default;
  // A frame's header and body arrived; fill `dest` for its payload (if any).
  virtual void on_frame(Link& link, wire::Type type, const uint8_t* body, uint32_t payload,
                        PayloadDest& dest) = 0;
  // The payload of the last frame is in place (called for frames with a payload only).
  virtual void on_payload(Link& link) = 0;
};

class Link {
 public:
  static constexpr uint32_t kRing = 4096;        // outgoing frames in flight
  static constexpr uint32_t kOwnedBytes = 4096;  // per frame, for data that must be copied

  Link(uint32_t id, UniqueFd fd, bool outbound);
  ~Link();

  uint32_t id() const { return id_; }
  int fd() const { return fd_.get(); }
  bool outbound() const { return outbound_; }
  bool connected() const { return connected_; }
  void set_connected() { connected_ = true; }

  // The peer host, once known (from Hello for inbound links).
  uint32_t host_id = 0;
  uint64_t peer_boot = 0;
  std::string peer_addr;
  int64_t connect_deadline_ns = 0;
  int64_t last_rx_ns = 0;
  int64_t last_ping_ns = 0;
  uint32_t routed_qps = 0;  // local RC/UC QPs whose requests go out on this link

  // Queues a frame: header+body copied, payload referenced (must stay valid until written)
  // or copied into the frame's own buffer (`copy`, at most kOwnedBytes). False when full.
  bool send(wire::Type type, const void* body, uint32_t body_len, const shm::Seg* payload = nullptr,
            int nseg = 0, uint64_t payload_len = 0, bool copy = false);
  bool has_room(uint32_t frames = 1) const { return kRing - (head_ - tail_) >= frames; }
  bool tx_pending() const { return head_ != tail_; }

  // Writes what the socket takes. Returns false when the connection failed.
  bool flush();
  // Reads and dispatches frames until the socket is empty or `budget` bytes were read.
  // Returns false when the connection ended or sent garbage (*why says which).
  bool receive(LinkHandler& h, size_t budget, const char** why);

  uint64_t bytes_out = 0, bytes_in = 0;

 private:
  struct Out {
    uint8_t hdr[sizeof(wire::Header) + sizeof(wire::Cm)];  // the largest body
    uint32_t hdr_len;
    int niov;
    iovec iov[shm::kMaxSendSge + 1];
  };
  static constexpr size_t kRecvBuffer = 256 * 1024;
  static constexpr uint64_t kDirectRead = 16 * 1024;  // payloads this large skip the buffer

  // Dispatches the frames (and the payload bytes) that are in the receive buffer. False when
  // the stream is broken (*why says how).
  bool dispatch_buffered(LinkHandler& h, const char** why);
  void consume_payload(LinkHandler& h);  // what of a payload the buffer holds
  void compact_buffer();
  // A large payload with a destination: read straight into it (recvmsg's result).
  bool wants_direct_read() const;
  ssize_t read_direct(LinkHandler& h);

  uint32_t id_;
  UniqueFd fd_;
  bool outbound_;
  bool connected_ = false;

  std::unique_ptr<Out[]> ring_;
  std::unique_ptr<uint8_t[]> owned_;
  uint64_t head_ = 0, tail_ = 0;  // produce at head, write from tail
  uint64_t tail_off_ = 0;         // bytes of the tail frame already written

  // Receive side.
  std::unique_ptr<uint8_t[]> rbuf_;
  size_t rlen_ = 0, rpos_ = 0;
  enum class Rx { kHeader, kBody, kPayload } rx_ = Rx::kHeader;
  wire::Header rhdr_{};
  uint32_t body_len_ = 0;
  uint64_t payload_left_ = 0;
  PayloadDest dest_;
  int dest_seg_ = 0;
  uint64_t dest_off_ = 0;
};

}  // namespace vrdma::daemon
