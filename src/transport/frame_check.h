// What a frame must look like before anything acts on it: checks that need the frame alone
// (sizes, known values, a payload that matches what the body announces). What needs the
// router's state (who sent it, which connection) is checked by the router.
#pragma once

#include <cstdint>

#include "transport/wire.h"

namespace vrdma::wire {

// The header: a known type, a payload only where the type has one, within RDMA's largest
// message. False with *why set otherwise.
bool check_header(const Header& h, const char** why);
// The body of a frame whose header passed, with its payload length.
bool check_frame(Type type, const uint8_t* body, uint32_t payload, const char** why);

}  // namespace vrdma::wire
