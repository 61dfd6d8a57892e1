// What the router takes from vrdmad's options.
#pragma once

#include <cstdint>
#include <string>

namespace vrdma::daemon {

struct RouterConfig {
  uint32_t host_id = 0;
  std::string listen;  // "a.b.c.d:port" this host's router accepts links on
};

}  // namespace vrdma::daemon
