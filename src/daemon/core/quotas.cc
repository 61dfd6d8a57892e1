#include "daemon/core/quotas.h"

#include <errno.h>

#include <algorithm>

#include "common/log.h"

namespace vrdma::daemon {

const char* resource_name(Resource r) {
  static const char* const kNames[kResourceCount] = {
      "connections",      "qps", "mrs", "registered_bytes", "fds", "cm_listeners", "cm_connections",
      "directory_entries"};
  return kNames[static_cast<size_t>(r)];
}

int resource_errno(Resource r) {
  switch (r) {
    case Resource::kConnections:
    case Resource::kFds:
    case Resource::kCmListeners:
    case Resource::kCmConnections:
      return EMFILE;
    default:
      return EDQUOT;
  }
}

NetnsId ContainerQuotas::key_of(const Identity& id) {
  return id.anonymous ? NetnsId{} : id.netns;
}

int ContainerQuotas::charge(const NetnsId& key, const std::string& name, Resource r, uint64_t n) {
  const size_t i = static_cast<size_t>(r);
  auto it = usage_.find(key);
  const uint64_t used = it == usage_.end() ? 0 : it->second.used[i];
  if (n > limits_.max[i] || used > limits_.max[i] - n) {
    Usage scratch;  // a container that holds nothing is not kept for its log mark
    Usage& u = it == usage_.end() ? scratch : it->second;
    if (u.name.empty()) u.name = name;
    if (!u.refused_logged[i]) {
      u.refused_logged[i] = true;
      LOG_WARN(
          "container %s: over its quota of %s (%llu in use, limit %llu): refused (further "
          "refusals of this container are not logged)",
          u.name.c_str(), resource_name(r), static_cast<unsigned long long>(used),
          static_cast<unsigned long long>(limits_.max[i]));
    }
    return resource_errno(r);
  }
  if (it == usage_.end()) it = usage_.emplace(key, Usage{}).first;
  if (it->second.name.empty()) it->second.name = name;
  it->second.used[i] += n;
  return 0;
}

int ContainerQuotas::charge_published(const NetnsId& key) {
  auto it = usage_.find(key);
  if (it == usage_.end() || it->second.published) return 0;
  if (int err = charge(key, it->second.name, Resource::kDirectoryEntries)) return err;
  it->second.published = true;
  return 0;
}

void ContainerQuotas::release(const NetnsId& key, Resource r, uint64_t n) {
  auto it = usage_.find(key);
  if (it == usage_.end()) return;
  Usage& u = it->second;
  const size_t i = static_cast<size_t>(r);
  if (u.used[i] < n) {
    LOG_ERROR("container %s: quota accounting of %s went below zero", u.name.c_str(),
              resource_name(r));
    n = u.used[i];
  }
  u.used[i] -= n;
  if (r == Resource::kConnections && u.used[i] == 0) {
    if (u.published) {
      u.published = false;
      u.used[static_cast<size_t>(Resource::kDirectoryEntries)] -=
          std::min<uint64_t>(1, u.used[static_cast<size_t>(Resource::kDirectoryEntries)]);
    }
    for (size_t k = 0; k < kResourceCount; ++k)
      if (u.used[k] != 0)
        LOG_ERROR("container %s: %llu %s still counted after its last client left", u.name.c_str(),
                  static_cast<unsigned long long>(u.used[k]),
                  resource_name(static_cast<Resource>(k)));
    usage_.erase(it);
  }
}

const ContainerQuotas::Usage* ContainerQuotas::usage(const NetnsId& key) const {
  auto it = usage_.find(key);
  return it == usage_.end() ? nullptr : &it->second;
}

}  // namespace vrdma::daemon
