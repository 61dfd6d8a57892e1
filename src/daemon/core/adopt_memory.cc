// Registered memory that lives in a System V shared memory segment stays there. Moving its pages
// into a file of the library's own (what a registration does with any other memory) would end
// the sharing the program set up: the other processes attached to the segment would no longer
// see the registered pages, and the segment, detached from the registering process, may be
// destroyed under them (UCX and Open MPI allocate windows and receive pools this way). vrdmad
// opens the segment's file itself, through /proc/PID/map_files (which needs privileges a
// container lacks), checks that it is a segment's (its size cannot change, so nobody mapping
// it can fault), and keeps it as one of the client's memory descriptors.
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdio>

#include "common/log.h"
#include "common/proc_maps.h"
#include "daemon/core/daemon.h"
#include "shm/shared_file.h"

namespace vrdma::daemon {

namespace {

constexpr uint64_t kMaxSegmentFile = 1ull << 40;

// The file of the client's mapping [start, end), opened read-write, when it is a System V
// segment's mapped shared and writable; EOPNOTSUPP when it is anything else.
int open_segment(pid_t pid, uint64_t start, uint64_t end, UniqueFd& fd, uint64_t& size,
                 uint64_t& offset) {
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/maps", static_cast<int>(pid));
  Mapping m;
  if (!find_mapping(path, start, m) || m.start != start || m.end != end) return EINVAL;
  // Shared and writable now: the process opened the file for writing (a mapping of a file
  // opened read-only can never become writable), so vrdmad's descriptor gives it nothing new.
  if (!m.sysv_segment()) return EOPNOTSUPP;
  std::snprintf(path, sizeof(path), "/proc/%d/map_files/%" PRIx64 "-%" PRIx64,
                static_cast<int>(pid), start, end);
  fd.reset(::open(path, O_RDWR | O_CLOEXEC));
  if (!fd) {
    LOG_DEBUG("AdoptMemory: %s: %s", path, strerror(errno));
    return EOPNOTSUPP;
  }
  if (shm::check_sysv_segment(fd.get(), kMaxSegmentFile, size) != 0) return EOPNOTSUPP;
  if (m.offset % shm::kPage || m.offset > size || end - start > size - m.offset) return EINVAL;
  offset = m.offset;
  return 0;
}

}  // namespace

void Daemon::handle(Client& c, const Decoded& d, const proto::AdoptMemoryReq& r) {
  if (c.fds.count(r.fd_id)) return void(reply_error(c, d, EEXIST));
  if (r.vma_start % shm::kPage || r.vma_end % shm::kPage || r.vma_start >= r.vma_end ||
      c.ident.pid <= 0)
    return void(reply_error(c, d, EINVAL));
  UniqueFd fd;
  proto::AdoptMemoryRep rep{};
  if (int err = open_segment(c.ident.pid, r.vma_start, r.vma_end, fd, rep.file_size, rep.offset))
    return void(reply_error(c, d, err));
  if (int err = charge(c, Resource::kFds)) return void(reply_error(c, d, err));
  ClientFd e;
  e.kind = proto::FdKind::kMemory;
  e.size = rep.file_size;
  e.segment = true;
  const int out = fd.get();
  e.fd = std::move(fd);
  c.fds.emplace(r.fd_id, std::move(e));
  LOG_DEBUG("client %u: fd %u is the System V segment mapped at 0x%" PRIx64 " (%" PRIu64 " bytes)",
            c.id, r.fd_id, r.vma_start, rep.file_size);
  send(c, proto::Op::kAdoptMemory, d.seq, 0, &rep, sizeof(rep), std::span<const int>(&out, 1));
}

}  // namespace vrdma::daemon
