// Shared by the drop-in librdmacm.so.1 sources.
#pragma once

// The library is built with -fvisibility=hidden; the version script
// (librdmacm.map) then assigns each exported symbol its version node.
#define VRDMA_EXPORT __attribute__((visibility("default")))
