// Unpredictable numbers for identifiers a client must not guess (QP numbers, connection ids):
// the kernel's CSPRNG (getrandom), buffered per thread.
#pragma once

#include <cstdint>

namespace vrdma {

// 32 random bits.
uint32_t random_u32();

}  // namespace vrdma
