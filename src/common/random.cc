#include "common/random.h"

#include <errno.h>
#include <sys/random.h>

#include <cstddef>
#include <random>

namespace vrdma {

uint32_t random_u32() {
  thread_local uint32_t buf[64];
  thread_local size_t pos = sizeof(buf) / sizeof(buf[0]);
  if (pos >= sizeof(buf) / sizeof(buf[0])) {
    size_t got = 0;
    auto* bytes = reinterpret_cast<unsigned char*>(buf);
    while (got < sizeof(buf)) {
      ssize_t n = ::getrandom(bytes + got, sizeof(buf) - got, 0);
      if (n > 0) {
        got += static_cast<size_t>(n);
      } else if (n < 0 && errno != EINTR) {
        // No getrandom (seccomp, very old kernel): the C++ library's source.
        std::random_device rd;
        for (size_t i = got / sizeof(uint32_t); i < sizeof(buf) / sizeof(buf[0]); ++i)
          buf[i] = rd();
        break;
      }
    }
    pos = 0;
  }
  return buf[pos++];
}

}  // namespace vrdma
