// Engine pieces that need no daemon: the arena and its allocator, and the
// shared rings.
#include <errno.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <set>

#include <sys/mman.h>

#include <memory>
#include <vector>

#include "engine/arena.h"
#include "engine/posted_recvs.h"
#include "shm/key_index.h"
#include "shm/rings.h"
#include "shm/shared_file.h"
#include "shm/sigbus_guard.h"

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
  uint64_t head = 0;
  EXPECT_FALSE(shm::cq_ready(v, head));
  for (uint64_t i = 0; i < 4; ++i) {
    ibv_wc wc{};
    wc.wr_id = i;
    EXPECT_EQ(shm::cq_push(v, wc), shm::RingResult::kOk);
  }
  ibv_wc extra{};
  EXPECT_EQ(shm::cq_push(v, extra), shm::RingResult::kFull);
  EXPECT_EQ(cq->overflow.load(), 1u);
  ibv_wc out[8];
  ASSERT_EQ(shm::cq_poll(v, head, 8, out), 4);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(out[i].wr_id, uint64_t(i));
  EXPECT_EQ(shm::cq_push(v, extra), shm::RingResult::kOk);  // room again
}

// A sequence number written ahead of where it can be ends the push: it fails, it never spins.
TEST(Rings, CorruptIndicesEndInAFailureNotASpin) {
  Arena a;
  ASSERT_EQ(a.create(1), 0);
  auto* cq = a.at<shm::CqShared>(a.alloc(shm::cq_bytes(4)));
  shm::cq_init(cq, 4, 0);
  shm::CqView cv{cq, 3};
  cq->entries[0].seq.store(1000);  // ahead of tail 0
  EXPECT_EQ(shm::cq_push(cv, ibv_wc{}), shm::RingResult::kCorrupt);

  auto* rq = a.at<shm::RecvQueue>(a.alloc(shm::rq_bytes(8, 2)));
  shm::rq_init(rq, 8, 2);
  shm::RqView rv{rq, 7, 2, rq->entry_size};
  uint64_t tail = 0;
  ibv_sge sge{1, 2, 3};
  ASSERT_TRUE(shm::rq_push(rv, tail, &sge, 1));
  rv.entry(0)->seq.store(1ull << 40);  // a consumer position nobody will ever reach
  shm::RecvWr r;
  EXPECT_EQ(shm::rq_take(rv, r), shm::RingResult::kCorrupt);
  rq->head.store(~0ull - 3);  // garbage head
  EXPECT_NE(shm::rq_take(rv, r), shm::RingResult::kOk);

  auto* ring = a.at<shm::RecvRing>(a.alloc(shm::ring_bytes(4)));
  shm::ring_init(ring, 4);
  shm::RingView gv{ring, 3};
  ring->tail.store(12345);
  ring->entries[12345 & 3].seq.store(99999);
  EXPECT_EQ(shm::ring_push(gv, shm::RecvReport{}), shm::RingResult::kCorrupt);
}

TEST(Rings, ReceiveQueueCarriesNoWrIdAndClampsAHostileSgeCount) {
  Arena a;
  ASSERT_EQ(a.create(1), 0);
  auto* rq = a.at<shm::RecvQueue>(a.alloc(shm::rq_bytes(8, 2)));
  shm::rq_init(rq, 8, 2);
  shm::RqView v{rq, 7, 2, rq->entry_size};
  EXPECT_EQ(rq->entry_size % shm::kCacheLine, 0u);
  uint64_t tail = 0;
  ibv_sge sge[2] = {{1, 2, 3}, {4, 5, 6}};
  ASSERT_TRUE(shm::rq_push(v, tail, sge, 2));
  EXPECT_EQ(tail, 1u);
  v.entry(0)->num_sge = 1000;  // a peer scribbles on the entry
  shm::RecvWr r;
  ASSERT_EQ(shm::rq_take(v, r), shm::RingResult::kOk);
  EXPECT_EQ(r.index, 0u);
  EXPECT_EQ(r.num_sge, 2u);
  EXPECT_EQ(shm::rq_take(v, r), shm::RingResult::kEmpty);
}

// The owner's table of posted receives: a report completes a receive only when it names one
// that is outstanding, once.
TEST(PostedRecvs, OnlyOutstandingReceivesCompleteAndOnlyOnce) {
  Arena a;
  ASSERT_EQ(a.create(1), 0);
  auto* rq = a.at<shm::RecvQueue>(a.alloc(shm::rq_bytes(4, 1)));
  shm::rq_init(rq, 4, 1);
  auto* table = a.at<shm::RecvTable>(a.alloc(shm::recv_table_bytes(4, 1)));
  PostedRecvs pr;
  pr.init(shm::RqView{rq, 3, 1, rq->entry_size}, table);
  ibv_sge sge{0x1000, 64, 7};
  for (uint64_t i = 0; i < 4; ++i) {
    ibv_recv_wr wr{};
    wr.wr_id = 100 + i;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ASSERT_EQ(pr.post(wr), 0);
  }
  ibv_recv_wr more{};
  more.num_sge = 0;
  EXPECT_EQ(pr.post(more), ENOMEM) << "four outstanding in a queue of four";
  uint64_t wr_id = 0;
  uint32_t len = 0;
  EXPECT_FALSE(pr.complete(4, wr_id, len)) << "never posted";
  EXPECT_FALSE(pr.complete(~0ull, wr_id, len)) << "the index whose tag would be 0";
  EXPECT_FALSE(pr.complete(2 + (1ull << 40), wr_id, len)) << "same slot, another position";
  ASSERT_TRUE(pr.complete(2, wr_id, len));
  EXPECT_EQ(wr_id, 102u);
  EXPECT_EQ(len, 64u);
  EXPECT_FALSE(pr.complete(2, wr_id, len)) << "repeated";
  // A sender took nothing from the shared ring, so position 0's cell is not free for reuse.
  EXPECT_EQ(pr.post(more), ENOMEM);
  std::vector<uint64_t> flushed;
  pr.flush([&](uint64_t id) { flushed.push_back(id); });
  EXPECT_EQ(flushed, (std::vector<uint64_t>{100, 101, 103}));
}

TEST(KeyIndex, FindsOnlyLiveKeysAndSurvivesChurn) {
  auto idx = std::make_unique<shm::KeyIndex>();
  EXPECT_EQ(idx->find(0), -1);
  EXPECT_EQ(idx->find(12345), -1);
  idx->insert(12345, 7);
  EXPECT_EQ(idx->find(12345), 7);
  idx->erase(12345);
  EXPECT_EQ(idx->find(12345), -1);
  // Far more insertions and erasures than the table has words: tombstones are reclaimed.
  uint32_t key = 0x9e3779b9;
  std::vector<uint32_t> live;
  for (uint32_t i = 0; i < 100000; ++i) {
    key = key * 1664525u + 1013904223u;
    if (!key) continue;
    idx->insert(key, i % shm::kMrSlots);
    live.push_back(key);
    if (live.size() > 3000) {
      idx->erase(live.front());
      live.erase(live.begin());
    }
  }
  for (size_t i = 0; i < live.size(); i += 97) EXPECT_GE(idx->find(live[i]), 0);
}

TEST(SharedFile, OnlySealedMemfdsAreMappedAndAtTheirOwnSize) {
  int fd = -1;
  ASSERT_EQ(shm::create_sealed("t", 8192, false, fd), 0);
  uint64_t size = 0;
  EXPECT_EQ(shm::check_sealed(fd, 1 << 20, size), 0);
  EXPECT_EQ(size, 8192u);
  EXPECT_EQ(shm::check_sealed(fd, 4096, size), EFBIG);
  int ro = shm::reopen_read_only(fd);
  ASSERT_GE(ro, 0);
  void* p = nullptr;
  EXPECT_EQ(shm::map_sealed(ro, PROT_READ | PROT_WRITE, 1 << 20, p, size), EACCES);
  ASSERT_EQ(shm::map_sealed(ro, PROT_READ, 1 << 20, p, size), 0);
  ::munmap(p, size);
  ::close(ro);
  ::close(fd);
  int loose = ::memfd_create("t", MFD_CLOEXEC);
  ASSERT_EQ(::ftruncate(loose, 8192), 0);
  EXPECT_EQ(shm::check_sealed(loose, 1 << 20, size), EPERM);
  ::close(loose);
}

// Memory another process could truncate: the guard turns the fault into a failed access.
TEST(SigbusGuard, AFaultingAccessFailsInsteadOfKillingTheProcess) {
  shm::install_sigbus_guard();
  int fd = ::memfd_create("t", MFD_CLOEXEC);
  ASSERT_EQ(::ftruncate(fd, 8192), 0);
  auto* p = static_cast<volatile uint8_t*>(
      ::mmap(nullptr, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  ASSERT_NE(p, MAP_FAILED);
  EXPECT_TRUE(shm::guarded_call([&] { p[4096] = 1; }));
  ASSERT_EQ(::ftruncate(fd, 0), 0);  // what seals prevent
  EXPECT_FALSE(shm::guarded_call([&] { p[4096] = 2; }));
  EXPECT_FALSE(shm::guarded_call([&] { (void)p[0]; }));
  ::munmap(const_cast<uint8_t*>(p), 8192);
  ::close(fd);
}

}  // namespace
}  // namespace vrdma
