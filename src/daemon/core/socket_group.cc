#include "daemon/core/socket_group.h"

#include <errno.h>
#include <grp.h>
#include <string.h>

#include <cstdlib>
#include <vector>

namespace vrdma::daemon {

bool resolve_group(const std::string& name_or_number, gid_t* gid, std::string* why) {
  if (name_or_number.empty()) {
    *why = "empty group";
    return false;
  }
  char* end = nullptr;
  unsigned long n = std::strtoul(name_or_number.c_str(), &end, 10);
  if (*end == '\0' && name_or_number[0] != '-') {
    *gid = static_cast<gid_t>(n);
    return true;
  }
  std::vector<char> buf(16384);
  group gr{};
  group* found = nullptr;
  int err = ::getgrnam_r(name_or_number.c_str(), &gr, buf.data(), buf.size(), &found);
  if (err != 0 || !found) {
    *why = "no group '" + name_or_number + "'" + (err ? std::string(": ") + strerror(err) : "");
    return false;
  }
  *gid = found->gr_gid;
  return true;
}

}  // namespace vrdma::daemon
