#include "daemon/registry/xrcd_table.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>

namespace vrdma::daemon {

int XrcdTable::open(uint32_t client, const std::string& tenant, UniqueFd file, uint32_t oflags,
                    uint32_t& id) {
  struct stat st {};
  if (!file || ::fstat(file.get(), &st) != 0) return EBADF;
  Key key{tenant, st.st_dev, st.st_ino};
  auto it = by_file_.find(key);
  if (it != by_file_.end()) {
    if ((oflags & O_CREAT) && (oflags & O_EXCL)) return EINVAL;
    id = it->second;
  } else {
    if (!(oflags & O_CREAT)) return EINVAL;
    // Numbers are not reused while the daemon lives (2^32 opens away).
    while (next_ == 0 || domains_.count(next_)) ++next_;
    id = next_++;
    Domain d;
    d.key = key;
    d.file = std::move(file);
    domains_.emplace(id, std::move(d));
    by_file_.emplace(std::move(key), id);
  }
  ++domains_.at(id).opens;
  ++opens_[client][id];
  return 0;
}

bool XrcdTable::holds(uint32_t client, uint32_t id) const {
  auto c = opens_.find(client);
  return c != opens_.end() && c->second.count(id);
}

void XrcdTable::drop_opens(uint32_t id, uint32_t n) {
  auto d = domains_.find(id);
  if (d == domains_.end()) return;
  d->second.opens -= n < d->second.opens ? n : d->second.opens;
  if (d->second.opens) return;
  by_file_.erase(d->second.key);
  domains_.erase(d);
}

int XrcdTable::close(uint32_t client, uint32_t id) {
  auto c = opens_.find(client);
  if (c == opens_.end()) return ENOENT;
  auto o = c->second.find(id);
  if (o == c->second.end()) return ENOENT;
  if (--o->second == 0) c->second.erase(o);
  if (c->second.empty()) opens_.erase(c);
  drop_opens(id, 1);
  return 0;
}

void XrcdTable::client_gone(uint32_t client) {
  auto c = opens_.find(client);
  if (c == opens_.end()) return;
  for (auto [id, n] : c->second) drop_opens(id, n);
  opens_.erase(c);
}

}  // namespace vrdma::daemon
