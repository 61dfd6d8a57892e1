// The asymmetric fence (shm/asym_fence.h) is available here: a process registers for the
// barriers others issue and may issue them itself, and issuing one succeeds. Without it every
// same-host placement pays a full fence (settle.cc); the verbs tests that write into memory
// while its pages move (PeerWritesDuringANeighboursRegistrationAreKept and the sharing tests)
// then run on that path instead of this one.
#include "shm/asym_fence.h"

#include <gtest/gtest.h>

namespace vrdma::shm {
namespace {

TEST(AsymFence, RegistersIssuesAndSucceeds) {
  EXPECT_TRUE(receives_heavy_fences());
  EXPECT_TRUE(receives_heavy_fences());  // once per process; the answer stays
  ASSERT_TRUE(can_issue_heavy_fence());
  EXPECT_TRUE(heavy_fence());
}

}  // namespace
}  // namespace vrdma::shm
