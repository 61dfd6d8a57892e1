// Implicit on-demand paging: one MR over the whole address space (ibv_reg_mr(pd, NULL,
// SIZE_MAX, IBV_ACCESS_ON_DEMAND | ...)), its lkey naming local gather and scatter lists and its
// rkey remote targets anywhere in memory the process has mapped, with data checked byte for
// byte; accesses to memory that is not mapped (or mapped without the rights) complete with
// errors and leave other QPs alone; deregistration while the MR is in use.
#include <stdint.h>
#include <stdio.h>
#include <sys/mman.h>

#include <atomic>
#include <fstream>
#include <string>

#include "verbs_fixture.h"

namespace vrdma::testing {
namespace {

constexpr int kAll = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                     IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_ON_DEMAND;

// Anonymous pages that no registration has seen yet.
struct Pages {
  explicit Pages(size_t n, int prot = PROT_READ | PROT_WRITE) : len(n * 4096) {
    void* p = ::mmap(nullptr, len, prot, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    EXPECT_NE(p, MAP_FAILED);
    base = static_cast<uint8_t*>(p);
  }
  ~Pages() {
    if (base) ::munmap(base, len);
  }
  uint64_t addr(size_t off = 0) const { return reinterpret_cast<uint64_t>(base + off); }
  uint8_t* base = nullptr;
  size_t len;
};

// The permissions /proc/self/maps shows for the mapping that holds `addr` ("" if none).
std::string perms_at(uint64_t addr) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    unsigned long long lo, hi;
    char perms[5] = {};
    if (sscanf(line.c_str(), "%llx-%llx %4s", &lo, &hi, perms) == 3 && lo <= addr && addr < hi)
      return perms;
  }
  return "";
}

class ImplicitOdpTest : public PairTest {
 protected:
  void SetUp() override {
    VerbsTest::SetUp();
    connect_pair();
    mr = ibv_reg_mr(pd, nullptr, SIZE_MAX, kAll);
    ASSERT_NE(mr, nullptr) << strerror(errno);
  }
  void TearDown() override {
    if (mr) {
      EXPECT_EQ(ibv_dereg_mr(mr), 0);
    }
    VerbsTest::TearDown();
  }
  ibv_wc_status rdma(ibv_qp* q, ibv_cq* c, ibv_wr_opcode op, uint64_t laddr, uint32_t len,
                     uint64_t raddr) {
    return rdma_on(q, c, op, laddr, mr->lkey, len, raddr, mr->rkey);
  }
  ibv_wc_status atomic(ibv_wr_opcode op, uint64_t laddr, uint64_t raddr, uint64_t add_or_cmp,
                       uint64_t swap = 0) {
    ibv_sge sge{laddr, 8, mr->lkey};
    ibv_send_wr wr = send_wr(op, sge);
    wr.wr.atomic.remote_addr = raddr;
    wr.wr.atomic.rkey = mr->rkey;
    wr.wr.atomic.compare_add = add_or_cmp;
    wr.wr.atomic.swap = swap;
    return complete_one(a, wr, ca);
  }
  ibv_mr* mr = nullptr;
};

TEST_F(ImplicitOdpTest, AdvertisedAndRegisteredOverTheWholeAddressSpace) {
  ibv_device_attr_ex ax{};
  ASSERT_EQ(ibv_query_device_ex(ctx, nullptr, &ax), 0);
  EXPECT_TRUE(ax.odp_caps.general_caps & IBV_ODP_SUPPORT_IMPLICIT);
  EXPECT_EQ(mr->addr, nullptr);
  EXPECT_EQ(mr->length, SIZE_MAX);
  EXPECT_NE(mr->lkey, 0u);
  EXPECT_EQ(mr->lkey, mr->rkey);
  // Without ON_DEMAND: no MR over the whole address space.
  EXPECT_EQ(ibv_reg_mr(pd, nullptr, SIZE_MAX, IBV_ACCESS_LOCAL_WRITE), nullptr);
  EXPECT_EQ(errno, EINVAL);
  // An implicit MR keeps its translation.
  Pages p(1);
  EXPECT_EQ(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, nullptr, p.base, 4096, 0),
            IBV_REREG_MR_ERR_INPUT);
}

TEST_F(ImplicitOdpTest, SendsFromMallocIntoFreshlyMappedReceives) {
  const size_t n = 3 * 4096 + 123;
  std::vector<uint8_t> src(n);
  fill_random(src.data(), n, 1);
  Pages dst(4);
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE(round);
    fill_random(src.data(), n, 10 + round);
    memset(dst.base, 0, dst.len);
    ibv_sge rs{dst.addr(7), static_cast<uint32_t>(n), mr->lkey};
    ibv_recv_wr rw{};
    rw.sg_list = &rs;
    rw.num_sge = 1;
    ibv_recv_wr* rbad;
    ASSERT_EQ(ibv_post_recv(b, &rw, &rbad), 0);
    ibv_sge ss{reinterpret_cast<uint64_t>(src.data()), static_cast<uint32_t>(n), mr->lkey};
    ibv_send_wr sw = send_wr(IBV_WR_SEND, ss);
    ASSERT_EQ(complete_one(a, sw, ca), IBV_WC_SUCCESS);
    auto w = poll(cb, 1);
    ASSERT_EQ(w.size(), 1u);
    EXPECT_EQ(w[0].status, IBV_WC_SUCCESS);
    EXPECT_EQ(w[0].byte_len, n);
    EXPECT_EQ(memcmp(dst.base + 7, src.data(), n), 0);
    EXPECT_EQ(dst.base[6], 0);
    EXPECT_EQ(dst.base[7 + n], 0);
  }
}

TEST_F(ImplicitOdpTest, RdmaWriteReadAndAtomicsThroughTheImplicitRkey) {
  // Every target is memory no registration has seen: the owner registers it when the peer asks.
  const size_t n = 2 * 4096 + 77;
  std::vector<uint8_t> src(n), back(n, 0);
  fill_random(src.data(), n, 2);
  Pages target(3);
  ASSERT_EQ(
      rdma(a, ca, IBV_WR_RDMA_WRITE, reinterpret_cast<uint64_t>(src.data()), n, target.addr(100)),
      IBV_WC_SUCCESS);
  EXPECT_EQ(memcmp(target.base + 100, src.data(), n), 0);
  EXPECT_EQ(target.base[99], 0);
  // Read it back from another fresh mapping, and into a fresh one.
  Pages other(2), into(2);
  fill_random(other.base, other.len, 3);
  ASSERT_EQ(rdma(a, ca, IBV_WR_RDMA_READ, into.addr(5), 5000, other.addr(50)), IBV_WC_SUCCESS);
  EXPECT_EQ(memcmp(into.base + 5, other.base + 50, 5000), 0);
  ASSERT_EQ(
      rdma(a, ca, IBV_WR_RDMA_READ, reinterpret_cast<uint64_t>(back.data()), n, target.addr(100)),
      IBV_WC_SUCCESS);
  EXPECT_EQ(back, src);
  // Atomics on a fresh page.
  Pages cell(1);
  auto* word = reinterpret_cast<uint64_t*>(cell.base + 64);
  *word = 40;
  uint64_t old = 0;
  ASSERT_EQ(atomic(IBV_WR_ATOMIC_FETCH_AND_ADD, reinterpret_cast<uint64_t>(&old), cell.addr(64), 2),
            IBV_WC_SUCCESS);
  EXPECT_EQ(old, 40u);
  EXPECT_EQ(*word, 42u);
  ASSERT_EQ(
      atomic(IBV_WR_ATOMIC_CMP_AND_SWP, reinterpret_cast<uint64_t>(&old), cell.addr(64), 42, 7),
      IBV_WC_SUCCESS);
  EXPECT_EQ(old, 42u);
  EXPECT_EQ(*word, 7u);
  // The same ranges again: served by what was registered.
  fill_random(src.data(), n, 4);
  ASSERT_EQ(
      rdma(b, cb, IBV_WR_RDMA_WRITE, reinterpret_cast<uint64_t>(src.data()), n, target.addr(100)),
      IBV_WC_SUCCESS);
  EXPECT_EQ(memcmp(target.base + 100, src.data(), n), 0);
}

TEST_F(ImplicitOdpTest, UnmappedTargetFailsAndTheNeighbourPairGoesOn) {
  ibv_cq* cc = cq();
  ibv_cq* cd = cq();
  ibv_qp* c = qp(cc, cc);
  ibv_qp* d = qp(cd, cd);
  ASSERT_TRUE(c && d);
  connect(c, d);
  Pages hole(2);
  ASSERT_EQ(::munmap(hole.base + 4096, 4096), 0);
  std::vector<uint8_t> src(256, 0x5a);
  const uint64_t s = reinterpret_cast<uint64_t>(src.data());
  // Remote: nothing mapped there, or a range that runs into the hole.
  EXPECT_EQ(rdma(a, ca, IBV_WR_RDMA_WRITE, s, 256, hole.addr(4096 + 8)), IBV_WC_REM_ACCESS_ERR);
  // The hole, now a page without access (that no later mapping lands there): the same.
  ASSERT_NE(
      ::mmap(hole.base + 4096, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0),
      MAP_FAILED);
  hole.len = 8192;
  // The neighbour pair is not affected.
  Pages ok(1);
  ASSERT_EQ(rdma(c, cc, IBV_WR_RDMA_WRITE, s, 256, ok.addr(0)), IBV_WC_SUCCESS);
  EXPECT_EQ(memcmp(ok.base, src.data(), 256), 0);
  ASSERT_EQ(rdma(c, cc, IBV_WR_RDMA_READ, s, 256, hole.addr(4096 - 256)), IBV_WC_SUCCESS);
  EXPECT_EQ(rdma(c, cc, IBV_WR_RDMA_READ, s, 256, hole.addr(4096 - 128)), IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(perms_at(hole.addr(4096)), "---p");
  // Local: a gather list in the hole.
  ibv_cq* ce = cq();
  ibv_cq* cf = cq();
  ibv_qp* e = qp(ce, ce);
  ibv_qp* f = qp(cf, cf);
  ASSERT_TRUE(e && f);
  connect(e, f);
  EXPECT_EQ(rdma(e, ce, IBV_WR_RDMA_WRITE, hole.addr(4096), 64, ok.addr(0)), IBV_WC_LOC_PROT_ERR);
}

TEST_F(ImplicitOdpTest, ReadOnlyMemoryIsNotMadeWritable) {
  // A writable implicit MR over a read-only mapping: the peer's write is refused and the
  // mapping keeps its rights and contents; a read of it is refused too (the MR's pages would be
  // mapped writable).
  Pages ro(1);
  memset(ro.base, 0x11, ro.len);
  ASSERT_EQ(::mprotect(ro.base, ro.len, PROT_READ), 0);
  std::vector<uint8_t> src(64, 0x77);
  EXPECT_EQ(rdma(a, ca, IBV_WR_RDMA_WRITE, reinterpret_cast<uint64_t>(src.data()), 64, ro.addr(0)),
            IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(perms_at(ro.addr(0)), "r--p");
  EXPECT_EQ(ro.base[0], 0x11);
}

TEST_F(ImplicitOdpTest, PrefetchRegistersRangesAndRefusesHoles) {
  Pages p(2);
  ibv_sge sge{p.addr(10), 5000, mr->lkey};
  EXPECT_EQ(
      ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, IBV_ADVISE_MR_FLAG_FLUSH, &sge, 1), 0);
  // Registered: the pages are now a shared backing.
  EXPECT_EQ(perms_at(p.addr(10)), "rw-s");
  Pages hole(1);
  void* at = hole.base;
  ASSERT_EQ(::munmap(at, 4096), 0);
  hole.base = nullptr;
  ibv_sge bad{reinterpret_cast<uint64_t>(at), 64, mr->lkey};
  EXPECT_EQ(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, IBV_ADVISE_MR_FLAG_FLUSH, &bad, 1),
            EFAULT);
  EXPECT_EQ(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &bad, 1), 0);  // async
}

TEST_F(ImplicitOdpTest, DeregWhileInUse) {
  Pages target(4);
  std::vector<uint8_t> src(4096);
  fill_random(src.data(), src.size(), 5);
  // Many writes posted, the MR deregistered before they are all polled: every one completes
  // (placed, or an error), none hangs.
  const int kPosts = 32;
  std::vector<ibv_sge> sges(kPosts);
  std::vector<ibv_send_wr> wrs(kPosts);
  for (int i = 0; i < kPosts; ++i) {
    sges[i] = ibv_sge{reinterpret_cast<uint64_t>(src.data()), 4096, mr->lkey};
    wrs[i] = send_wr(IBV_WR_RDMA_WRITE, sges[i]);
    wrs[i].wr_id = i;
    wrs[i].wr.rdma.remote_addr = target.addr((i % 4) * 4096);
    wrs[i].wr.rdma.rkey = mr->rkey;
    wrs[i].next = i + 1 < kPosts ? &wrs[i + 1] : nullptr;
  }
  ibv_send_wr* bad;
  ASSERT_EQ(ibv_post_send(a, &wrs[0], &bad), 0);
  const uint32_t old_key = mr->rkey;
  ASSERT_EQ(ibv_dereg_mr(mr), 0);
  mr = nullptr;
  auto w = poll(ca, kPosts);
  EXPECT_EQ(w.size(), static_cast<size_t>(kPosts));
  for (const ibv_wc& c : w) {
    if (c.status == IBV_WC_SUCCESS) {  // placed before the MR went, and kept by the application
      EXPECT_EQ(memcmp(target.base + (c.wr_id % 4) * 4096, src.data(), 4096), 0) << c.wr_id;
    }
  }
  // The application's memory stays its own and usable.
  memset(target.base, 0x3c, target.len);
  EXPECT_EQ(target.base[target.len - 1], 0x3c);
  // The old key reaches nothing any more, from a fresh pair.
  ibv_cq* cc = cq();
  ibv_cq* cd = cq();
  ibv_qp* c = qp(cc, cc);
  ibv_qp* d = qp(cd, cd);
  ASSERT_TRUE(c && d);
  connect(c, d);
  Buffer& local = buffer(64);
  ibv_sge s{local.addr(), 64, local.mr->lkey};
  ibv_send_wr wr = send_wr(IBV_WR_RDMA_WRITE, s);
  wr.wr.rdma.remote_addr = target.addr(0);
  wr.wr.rdma.rkey = old_key;
  EXPECT_EQ(complete_one(c, wr, cc), IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(target.base[0], 0x3c);
}

}  // namespace
}  // namespace vrdma::testing
