// Errors inside the engine are plain errno values (0 = success), as verbs returns them.
#pragma once

namespace vrdma {
using Errno = int;
}
