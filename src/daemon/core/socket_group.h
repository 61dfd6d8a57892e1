// The group that may connect to vrdmad's socket (--socket-group): a group name or number.
#pragma once

#include <sys/types.h>

#include <string>

namespace vrdma::daemon {

// true and *gid set, or false with *why set (unknown group).
bool resolve_group(const std::string& name_or_number, gid_t* gid, std::string* why);

}  // namespace vrdma::daemon
