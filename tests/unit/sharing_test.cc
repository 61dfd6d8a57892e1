// What a same-host peer gets, through the drop-in library against an in-process vrdmad: consent
// before delivery, grants by access flags and protection domain, revocation on deregistration,
// backings split at MR boundaries, a reset QP reached anew, and keys that say nothing of where
// their MR is.
#include <arpa/inet.h>
#include <sys/mman.h>

#include <set>

#include "verbs_fixture.h"

namespace vrdma::testing {
namespace {

class SharingTest : public VerbsTest {
 protected:
  void SetUp() override {
    VerbsTest::SetUp();
    c1 = cq();
    c2 = cq();
    a = qp(c1, c1);
    b = qp(c2, c2);
  }
  ibv_send_wr rdma(ibv_wr_opcode op, ibv_sge& sg, uint64_t raddr, uint32_t rkey) {
    ibv_send_wr wr = send_wr(op, sg);
    wr.wr_id = 5;
    wr.wr.rdma.remote_addr = raddr;
    wr.wr.rdma.rkey = rkey;
    return wr;
  }
  ibv_cq *c1, *c2;
  ibv_qp *a, *b;
};

// A's RTR names B, B's names another QP: A's sends are never delivered; A retries until its
// timeout, as on a fabric.
TEST_F(SharingTest, NothingIsDeliveredUntilTheDestinationNamesTheSender) {
  ibv_qp* other = qp(c2, c2);
  ASSERT_EQ(to_init(a), 0);
  ASSERT_EQ(to_init(b), 0);
  ASSERT_EQ(to_init(other), 0);
  ASSERT_EQ(to_rtr(a, b->qp_num), 0);
  ASSERT_EQ(to_rtr(b, other->qp_num), 0);
  ASSERT_EQ(to_rts(a, 0, 8, 2), 0);  // ~1 ms timeout, 2 retries
  Buffer& src = buffer(4096);
  Buffer& dst = buffer(4096);
  ASSERT_EQ(post_recv(b, dst, 4096, 77), 0);
  ibv_sge sg{src.addr(), 64, src.mr->lkey};
  ibv_send_wr wr = send_wr(IBV_WR_SEND, sg);
  EXPECT_EQ(complete_one(a, wr, c1), IBV_WC_RETRY_EXC_ERR);
  EXPECT_TRUE(poll(c2, 1, 100).empty()) << "B received from a QP it did not name";
}

// Once B names A, the same QPs connect (the first send at RTS finds the agreement).
TEST_F(SharingTest, TheSecondRtrCompletesTheAgreement) {
  ASSERT_EQ(to_init(a), 0);
  ASSERT_EQ(to_init(b), 0);
  ASSERT_EQ(to_rtr(a, b->qp_num), 0);  // B has not named A yet
  ASSERT_EQ(to_rts(a), 0);
  ASSERT_EQ(to_rtr(b, a->qp_num), 0);
  ASSERT_EQ(to_rts(b), 0);
  Buffer& src = buffer(4096);
  Buffer& dst = buffer(4096);
  ASSERT_EQ(post_recv(b, dst, 4096, 78), 0);
  std::memcpy(src.data(), "agreed", 7);
  ibv_sge sg{src.addr(), 7, src.mr->lkey};
  ibv_send_wr wr = send_wr(IBV_WR_SEND, sg);
  EXPECT_EQ(complete_one(a, wr, c1), IBV_WC_SUCCESS);
  auto r = poll(c2, 1);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].wr_id, 78u);
  EXPECT_STREQ(reinterpret_cast<char*>(dst.data()), "agreed");
}

// RDMA needs the MR's remote rights and its protection domain to be the reached QP's.
TEST_F(SharingTest, RdmaNeedsTheRightsAndTheProtectionDomain) {
  connect(a, b);
  Buffer& src = buffer(4096);
  Buffer& local_only = buffer(4096, IBV_ACCESS_LOCAL_WRITE);
  ibv_sge sg{src.addr(), 64, src.mr->lkey};
  ibv_send_wr w = rdma(IBV_WR_RDMA_READ, sg, local_only.addr(), local_only.mr->rkey);
  EXPECT_EQ(complete_one(a, w, c1), IBV_WC_REM_ACCESS_ERR);
}

TEST_F(SharingTest, ReadOnlyMrReadsButRefusesWrites) {
  connect(a, b);
  Buffer& src = buffer(4096);
  Buffer& ro = buffer(4096, IBV_ACCESS_REMOTE_READ);
  fill_random(ro.data(), 4096, 3);
  ibv_sge sg{src.addr(), 4096, src.mr->lkey};
  ibv_send_wr r = rdma(IBV_WR_RDMA_READ, sg, ro.addr(), ro.mr->rkey);
  EXPECT_EQ(complete_one(a, r, c1), IBV_WC_SUCCESS);
  EXPECT_EQ(std::memcmp(src.data(), ro.data(), 4096), 0);
  ibv_send_wr w = rdma(IBV_WR_RDMA_WRITE, sg, ro.addr(), ro.mr->rkey);
  EXPECT_EQ(complete_one(a, w, c1), IBV_WC_REM_ACCESS_ERR);
}

TEST_F(SharingTest, AnotherProtectionDomainsKeyIsRefused) {
  connect(a, b);
  Buffer& src = buffer(4096);
  ibv_pd* pd2 = ibv_alloc_pd(ctx);
  ASSERT_NE(pd2, nullptr);
  std::vector<uint8_t> mem(4096, 1);
  ibv_mr* other = ibv_reg_mr(pd2, mem.data(), mem.size(),
                             IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  ASSERT_NE(other, nullptr);
  ibv_sge sg{src.addr(), 64, src.mr->lkey};
  ibv_send_wr w = rdma(IBV_WR_RDMA_WRITE, sg, reinterpret_cast<uint64_t>(mem.data()), other->rkey);
  EXPECT_EQ(complete_one(a, w, c1), IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(mem[0], 1);
  ibv_dereg_mr(other);
  ibv_dealloc_pd(pd2);
}

// After ibv_dereg_mr the key is refused and the memory keeps its contents, in private memory.
TEST_F(SharingTest, DeregistrationRevokesAndKeepsTheContents) {
  connect(a, b);
  Buffer& src = buffer(4096);
  auto* mem = static_cast<uint8_t*>(
      ::mmap(nullptr, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(mem, MAP_FAILED);
  ibv_mr* mr = ibv_reg_mr(pd, mem, 8192, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  ASSERT_NE(mr, nullptr);
  fill_random(src.data(), 4096, 9);
  ibv_sge sg{src.addr(), 4096, src.mr->lkey};
  ibv_send_wr w = rdma(IBV_WR_RDMA_WRITE, sg, reinterpret_cast<uint64_t>(mem), mr->rkey);
  ASSERT_EQ(complete_one(a, w, c1), IBV_WC_SUCCESS);
  uint32_t old_key = mr->rkey;
  ASSERT_EQ(ibv_dereg_mr(mr), 0);
  EXPECT_EQ(std::memcmp(mem, src.data(), 4096), 0) << "contents kept";
  mem[0] ^= 0xff;  // still the application's memory, writable
  ibv_send_wr again = rdma(IBV_WR_RDMA_WRITE, sg, reinterpret_cast<uint64_t>(mem), old_key);
  EXPECT_EQ(complete_one(a, again, c1), IBV_WC_REM_ACCESS_ERR);
  ::munmap(mem, 8192);
}

// A registration inside another: both work, on backings cut at the inner one's pages; the outer
// one keeps working when the inner one goes.
TEST_F(SharingTest, OverlappingRegistrationsShareSplitBackings) {
  connect(a, b);
  Buffer& src = buffer(16384);
  auto* mem = static_cast<uint8_t*>(
      ::mmap(nullptr, 8 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(mem, MAP_FAILED);
  fill_random(mem, 8 * 4096, 4);
  std::vector<uint8_t> before(mem, mem + 8 * 4096);
  const int rw = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  ibv_mr* outer = ibv_reg_mr(pd, mem, 8 * 4096, rw);
  ASSERT_NE(outer, nullptr);
  EXPECT_EQ(std::memcmp(mem, before.data(), before.size()), 0);
  ibv_mr* inner = ibv_reg_mr(pd, mem + 2 * 4096 + 100, 3 * 4096, IBV_ACCESS_REMOTE_READ);
  ASSERT_NE(inner, nullptr);
  EXPECT_EQ(std::memcmp(mem, before.data(), before.size()), 0) << "splitting kept the contents";
  fill_random(src.data(), 16384, 5);
  ibv_sge sg{src.addr(), 16384, src.mr->lkey};
  ibv_send_wr w = rdma(IBV_WR_RDMA_WRITE, sg, reinterpret_cast<uint64_t>(mem) + 4096, outer->rkey);
  ASSERT_EQ(complete_one(a, w, c1), IBV_WC_SUCCESS);
  EXPECT_EQ(std::memcmp(mem + 4096, src.data(), 16384), 0);
  // The inner MR reads what the outer one received; it refuses writes.
  Buffer& back = buffer(3 * 4096);
  ibv_sge rs{back.addr(), 3 * 4096, back.mr->lkey};
  ibv_send_wr r = rdma(IBV_WR_RDMA_READ, rs, reinterpret_cast<uint64_t>(mem) + 2 * 4096 + 100,
                       inner->rkey);
  ASSERT_EQ(complete_one(a, r, c1), IBV_WC_SUCCESS);
  EXPECT_EQ(std::memcmp(back.data(), mem + 2 * 4096 + 100, 3 * 4096), 0);
  ASSERT_EQ(ibv_dereg_mr(inner), 0);
  ibv_send_wr w2 = rdma(IBV_WR_RDMA_WRITE, sg, reinterpret_cast<uint64_t>(mem) + 4096, outer->rkey);
  fill_random(src.data(), 16384, 6);
  ASSERT_EQ(complete_one(a, w2, c1), IBV_WC_SUCCESS);
  EXPECT_EQ(std::memcmp(mem + 4096, src.data(), 16384), 0) << "the outer MR still works";
  ASSERT_EQ(ibv_dereg_mr(outer), 0);
  ::munmap(mem, 8 * 4096);
}

// A receive buffer that was read-only-exposed (sealed) takes writes once a receive points in.
TEST_F(SharingTest, ReceiveIntoAReadExposedMr) {
  connect(a, b);
  Buffer& src = buffer(4096);
  Buffer& dst = buffer(4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
  ibv_sge rsg{src.addr(), 64, src.mr->lkey};
  ibv_send_wr r = rdma(IBV_WR_RDMA_READ, rsg, dst.addr(), dst.mr->rkey);
  ASSERT_EQ(complete_one(a, r, c1), IBV_WC_SUCCESS);
  ASSERT_EQ(post_recv(b, dst, 4096, 91), 0);
  std::memcpy(src.data(), "into a sealed buffer", 21);
  ibv_sge sg{src.addr(), 21, src.mr->lkey};
  ibv_send_wr s = send_wr(IBV_WR_SEND, sg);
  ASSERT_EQ(complete_one(a, s, c1), IBV_WC_SUCCESS);
  auto got = poll(c2, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(got[0].wr_id, 91u);
  EXPECT_STREQ(reinterpret_cast<char*>(dst.data()), "into a sealed buffer");
}

// A QP that went back to RESET is reached anew: connected to another peer, it works, and its
// old peer reaches nothing of the new connection.
TEST_F(SharingTest, ResetQpConnectsAnew) {
  connect(a, b);
  ibv_qp_attr x{};
  x.qp_state = IBV_QPS_RESET;
  ASSERT_EQ(ibv_modify_qp(b, &x, IBV_QP_STATE), 0);
  ibv_qp* c = qp(c1, c1);
  connect(c, b);
  Buffer& src = buffer(4096);
  Buffer& dst = buffer(4096);
  ASSERT_EQ(post_recv(b, dst, 4096, 55), 0);
  std::memcpy(src.data(), "new", 4);
  ibv_sge sg{src.addr(), 4, src.mr->lkey};
  ibv_send_wr s = send_wr(IBV_WR_SEND, sg);
  EXPECT_EQ(complete_one(c, s, c1), IBV_WC_SUCCESS);
  auto got = poll(c2, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].wr_id, 55u);
  EXPECT_EQ(got[0].src_qp, c->qp_num);
  // A still names B, but B names C now: A's sends go nowhere.
  ibv_send_wr s2 = send_wr(IBV_WR_SEND, sg);
  ibv_send_wr* bad;
  ASSERT_EQ(ibv_post_send(a, &s2, &bad), 0);
  auto w = poll(c1, 1, 3000);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_NE(w[0].status, IBV_WC_SUCCESS);
}

TEST_F(SharingTest, KeysAreRandomAndSayNothingOfTheirSlot) {
  std::set<uint32_t> keys, lows;
  for (int i = 0; i < 64; ++i) {
    Buffer& b = buffer(64, IBV_ACCESS_LOCAL_WRITE);
    EXPECT_EQ(b.mr->lkey, b.mr->rkey);
    keys.insert(b.mr->lkey);
    lows.insert(b.mr->lkey & 0xfff);
  }
  EXPECT_EQ(keys.size(), 64u);
  // Slot numbers in the low bits would be 64 neighbours; random bits spread over 4096.
  EXPECT_GT(*lows.rbegin() - *lows.begin(), 1024u);
}

}  // namespace
}  // namespace vrdma::testing
