// Engine pieces that need no daemon: the arena and its allocator, and the
// shared rings.
#include <errno.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <set>

#include "engine/arena.h"
#include "shm/rings.h"

namespace vrdma {
namespace {

TEST(Arena, PeersCannotShrinkOrGrowIt) {
  Arena a;
  ASSERT_EQ(a.create(1), 0);
  EXPECT_EQ(::ftruncate(a.fd(), 0), -1);
  EXPECT_EQ(errno, EPERM);
  EXPECT_EQ(::ftruncate(a.fd(), shm::kArenaSize * 2), -1);
  EXPECT_EQ(a.header()->magic, shm::kArenaMagic);
}

TEST(Arena, AllocationsAreAlignedDisjointAndReused) {
  Arena a;
  ASSERT_EQ(a.create(1), 0);
  std::set<uint32_t> offs;
  for (int i = 0; i < 100; ++i) {
    uint32_t o = a.alloc(100 + i);
    ASSERT_NE(o, 0u);
    EXPECT_EQ(o % shm::kCacheLine, 0u);
    EXPECT_TRUE(offs.insert(o).second);
  }
  uint32_t first = *offs.begin();
  a.free(first);
  EXPECT_EQ(a.alloc(64), first);
  EXPECT_EQ(a.alloc(shm::kArenaSize), 0u);  // larger than what is left
}

TEST(Rings, CompletionQueueKeepsOrderAndReportsOverflow) {
  Arena a;
  ASSERT_EQ(a.create(1), 0);
  uint32_t off = a.alloc(shm::cq_bytes(4));
  auto* cq = a.at<shm::CqShared>(off);
  shm::cq_init(cq, 4, 0);
  shm::CqView v{cq, 3};
  EXPECT_FALSE(shm::cq_ready(v));
  for (uint64_t i = 0; i < 4; ++i) {
    ibv_wc wc{};
    wc.wr_id = i;
    EXPECT_TRUE(shm::cq_push(v, wc));
  }
  ibv_wc extra{};
  EXPECT_FALSE(shm::cq_push(v, extra));
  EXPECT_EQ(cq->overflow.load(), 1u);
  ibv_wc out[8];
  ASSERT_EQ(shm::cq_poll(v, 8, out), 4);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(out[i].wr_id, uint64_t(i));
  EXPECT_TRUE(shm::cq_push(v, extra));  // room again
}

TEST(Rings, ReceiveQueueClampsAHostileSgeCount) {
  Arena a;
  ASSERT_EQ(a.create(1), 0);
  uint32_t off = a.alloc(shm::rq_bytes(8, 2));
  auto* rq = a.at<shm::RecvQueue>(off);
  shm::rq_init(rq, 8, 2, false);
  shm::RqView v{rq, 7, 2, rq->entry_size};
  EXPECT_EQ(rq->entry_size % shm::kCacheLine, 0u);
  ibv_sge sge[2] = {{1, 2, 3}, {4, 5, 6}};
  ASSERT_TRUE(shm::rq_push(v, 42, sge, 2));
  v.entry(0)->num_sge = 1000;  // a peer scribbles on the entry
  shm::RecvWr r;
  ASSERT_TRUE(shm::rq_pop(v, r));
  EXPECT_EQ(r.wr_id, 42u);
  EXPECT_EQ(r.num_sge, 2u);
  EXPECT_FALSE(shm::rq_pop(v, r));
}

}  // namespace
}  // namespace vrdma
