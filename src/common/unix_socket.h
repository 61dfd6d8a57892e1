// SOCK_SEQPACKET messaging with file descriptor passing, shared by vrdmad, the
// drop-in libraries and the CLI. One call sends or receives one whole packet.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "common/protocol.h"

namespace vrdma {

// A received packet: header, payload and any file descriptors that came with it.
// The receiver owns the descriptors and must close those it does not keep.
struct Packet {
  proto::Header header{};
  // Aligned so that as<T>() yields a properly aligned T (payloads hold uint64_t fields).
  alignas(16) uint8_t payload[proto::kMaxMessage];
  int fds[proto::kMaxFdsPerMessage];
  int nfds = 0;
  bool truncated = false;  // payload or descriptors were cut off: treat as malformed

  template <typename T>
  const T* as() const {
    return header.len == sizeof(T) ? reinterpret_cast<const T*>(payload) : nullptr;
  }
  void close_fds();
};

// Connects to a vrdmad socket. Returns the fd or -errno.
int unix_connect(const std::string& path);

// Creates a listening socket at path (removing a stale one). Returns fd or -errno.
int unix_listen(const std::string& path, int backlog = 128);

// Sends one packet. Returns 0 or a positive errno. Never raises SIGPIPE.
int send_packet(int fd, proto::Op op, uint32_t seq, int32_t status, const void* payload, size_t len,
                std::span<const int> fds = {});

// Receives one packet. Returns payload length (>= 0), 0 with header.len 0 for
// an empty payload, or -errno; -ECONNRESET when the peer has closed.
int recv_packet(int fd, Packet& out, int flags = 0);

// Where clients find vrdmad: $VRDMA_SOCKET or the default path.
std::string socket_path_from_env();

}  // namespace vrdma
