// XRC domains of one host. A domain is named by an inode within a tenant: clients of one tenant
// that open the same file (ibv_open_xrcd's descriptor) share it, and the file is kept open while
// the domain lives so that its inode is not reused for another. Each client's opens are counted;
// the domain goes with its last close (or its last client).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <tuple>

#include "common/unique_fd.h"

namespace vrdma::daemon {

class XrcdTable {
 public:
  // Opens the domain of `file` for `client` of `tenant`, as ibv_open_xrcd: O_CREAT creates it
  // when it does not exist (else EINVAL), O_EXCL with O_CREAT refuses an existing one (EINVAL).
  // 0 and its number in `id` (never 0), or a positive errno (EBADF: the file cannot be stat'ed).
  int open(uint32_t client, const std::string& tenant, UniqueFd file, uint32_t oflags,
           uint32_t& id);
  // One open of `client` closed. ENOENT when it holds none.
  int close(uint32_t client, uint32_t id);
  bool holds(uint32_t client, uint32_t id) const;
  // Every open of a client that went away.
  void client_gone(uint32_t client);
  size_t size() const { return domains_.size(); }

 private:
  using Key = std::tuple<std::string, dev_t, ino_t>;
  struct Domain {
    Key key;
    UniqueFd file;
    uint32_t opens = 0;
  };
  void drop_opens(uint32_t id, uint32_t n);

  std::map<uint32_t, Domain> domains_;
  std::map<Key, uint32_t> by_file_;
  std::map<uint32_t, std::map<uint32_t, uint32_t>> opens_;  // client -> domain -> opens
  uint32_t next_ = 1;
};

}  // namespace vrdma::daemon
