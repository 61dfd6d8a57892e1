// Memory windows through the drop-in libibverbs: type 1 (ibv_bind_mw) and type 2 (BIND_MW by
// ibv_post_send and ibv_wr_bind_mw), remote access through the window's rkey limited to its
// range and rights, invalidation (zero-length rebind, LOCAL_INV, the peer's SEND_WITH_INV,
// dealloc) and access after it (REM_ACCESS_ERR, memory untouched), and bad binds. Random data
// is checked byte for byte.
#include "verbs_fixture.h"

namespace vrdma::testing {
namespace {

constexpr int kMrAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND;

class MwTest : public PairTest {
 protected:
  void SetUp() override {
    VerbsTest::SetUp();
    connect_pair();
  }

  // `a` reaches `rkey` at `addr` with `op` from/to `local`; returns the status.
  ibv_wc_status rdma(ibv_wr_opcode op, Buffer& local, uint32_t len, uint64_t addr, uint32_t rkey) {
    return rdma_on(a, ca, op, local.addr(), local.mr->lkey, len, addr, rkey);
  }

  // Binds a type-2 window on `q` (completion on `c`); returns the status.
  ibv_wc_status bind2(ibv_qp* q, ibv_cq* c, ibv_mw* mw, uint32_t rkey, ibv_mr* mr, uint64_t addr,
                      uint64_t len, unsigned access) {
    ibv_send_wr wr{};
    wr.opcode = IBV_WR_BIND_MW;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.bind_mw.mw = mw;
    wr.bind_mw.rkey = rkey;
    wr.bind_mw.bind_info.mr = mr;
    wr.bind_mw.bind_info.addr = addr;
    wr.bind_mw.bind_info.length = len;
    wr.bind_mw.bind_info.mw_access_flags = access;
    return complete_one(q, wr, c);
  }

  ibv_wc_status bind1(ibv_qp* q, ibv_cq* c, ibv_mw* mw, ibv_mr* mr, uint64_t addr, uint64_t len,
                      unsigned access) {
    ibv_mw_bind bind{};
    bind.wr_id = 7;
    bind.send_flags = IBV_SEND_SIGNALED;
    bind.bind_info.mr = mr;
    bind.bind_info.addr = addr;
    bind.bind_info.length = len;
    bind.bind_info.mw_access_flags = access;
    EXPECT_EQ(ibv_bind_mw(q, mw, &bind), 0);
    auto w = poll(c, 1);
    EXPECT_EQ(w.size(), 1u);
    if (w.empty()) return IBV_WC_GENERAL_ERR;
    EXPECT_EQ(w[0].wr_id, 7u);
    if (w[0].status == IBV_WC_SUCCESS) {
      EXPECT_EQ(w[0].opcode, IBV_WC_BIND_MW);
    }
    return w[0].status;
  }

  ibv_mw* mw(ibv_mw_type type) {
    ibv_mw* m = ibv_alloc_mw(pd, type);
    EXPECT_NE(m, nullptr) << strerror(errno);
    return m;
  }
};

TEST_F(MwTest, DeviceAdvertisesWindows) {
  ibv_device_attr attr{};
  ASSERT_EQ(ibv_query_device(ctx, &attr), 0);
  EXPECT_GT(attr.max_mw, 0);
  EXPECT_TRUE(attr.device_cap_flags & IBV_DEVICE_MEM_WINDOW);
  // Access through a type-2 window is not tied to the binding QP: neither 2A nor 2B.
  EXPECT_FALSE(attr.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2A);
  EXPECT_FALSE(attr.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2B);
  errno = 0;
  EXPECT_EQ(ibv_alloc_mw(pd, static_cast<ibv_mw_type>(3)), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
}

TEST_F(MwTest, Type1WindowGrantsItsRangeAndRightsOnly) {
  const size_t n = 3 * 4096;
  Buffer& target = buffer(n, kMrAccess);
  Buffer& src = buffer(n);
  Buffer& rd = buffer(n);
  fill_random(target.data(), n, 1);
  fill_random(src.data(), n, 2);
  std::vector<uint8_t> before(target.mem);
  ibv_mw* w = mw(IBV_MW_TYPE_1);
  ASSERT_NE(w, nullptr);
  const uint32_t key0 = w->rkey;
  const uint64_t wstart = target.addr() + 1000, wlen = 6000;
  ASSERT_EQ(
      bind1(b, cb, w, target.mr, wstart, wlen, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ),
      IBV_WC_SUCCESS);
  EXPECT_EQ(w->rkey, ibv_inc_rkey(key0));
  EXPECT_NE(w->rkey, target.mr->rkey);
  // The whole window, written and read back.
  EXPECT_EQ(rdma(IBV_WR_RDMA_WRITE, src, wlen, wstart, w->rkey), IBV_WC_SUCCESS);
  EXPECT_EQ(memcmp(target.data() + 1000, src.data(), wlen), 0);
  EXPECT_EQ(memcmp(target.data(), before.data(), 1000), 0);
  EXPECT_EQ(memcmp(target.data() + 7000, before.data() + 7000, n - 7000), 0);
  EXPECT_EQ(rdma(IBV_WR_RDMA_READ, rd, wlen, wstart, w->rkey), IBV_WC_SUCCESS);
  EXPECT_EQ(memcmp(rd.data(), src.data(), wlen), 0);
  std::vector<uint8_t> now(target.mem);
  // One byte past its end: refused, nothing written.
  EXPECT_EQ(rdma(IBV_WR_RDMA_WRITE, src, 2, wstart + wlen - 1, w->rkey), IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(target.mem, now);
  // The MR itself allows no remote access.
  connect_pair();
  EXPECT_EQ(rdma(IBV_WR_RDMA_WRITE, src, 16, target.addr(), target.mr->rkey),
            IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(target.mem, now);
  // Zero-length rebind: unbound; the old key is refused.
  uint32_t old = w->rkey;
  ASSERT_EQ(bind1(b, cb, w, target.mr, wstart, 0, 0), IBV_WC_SUCCESS);
  EXPECT_NE(w->rkey, old);
  connect_pair();
  EXPECT_EQ(rdma(IBV_WR_RDMA_WRITE, src, 16, wstart, old), IBV_WC_REM_ACCESS_ERR);
  connect_pair();
  EXPECT_EQ(rdma(IBV_WR_RDMA_WRITE, src, 16, wstart, w->rkey), IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(target.mem, now);
  EXPECT_EQ(ibv_dealloc_mw(w), 0);
}

TEST_F(MwTest, Type2ReadOnlyWindowThenLocalInvalidate) {
  const size_t n = 8192;
  Buffer& target = buffer(n, kMrAccess);
  Buffer& dst = buffer(n);
  Buffer& src = buffer(n);
  fill_random(target.data(), n, 3);
  fill_random(src.data(), n, 4);
  std::vector<uint8_t> before(target.mem);
  ibv_mw* w = mw(IBV_MW_TYPE_2);
  ASSERT_NE(w, nullptr);
  uint32_t key = ibv_inc_rkey(w->rkey);
  ASSERT_EQ(bind2(b, cb, w, key, target.mr, target.addr() + 512, 4096, IBV_ACCESS_REMOTE_READ),
            IBV_WC_SUCCESS);
  EXPECT_EQ(w->rkey, key);
  EXPECT_EQ(rdma(IBV_WR_RDMA_READ, dst, 4096, target.addr() + 512, key), IBV_WC_SUCCESS);
  EXPECT_EQ(memcmp(dst.data(), target.data() + 512, 4096), 0);
  // Read-only: a write is refused and changes nothing.
  EXPECT_EQ(rdma(IBV_WR_RDMA_WRITE, src, 64, target.addr() + 512, key), IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(target.mem, before);
  // LOCAL_INV with a stale key fails; with the window's key it invalidates.
  connect_pair();
  ibv_send_wr inv{};
  inv.opcode = IBV_WR_LOCAL_INV;
  inv.send_flags = IBV_SEND_SIGNALED;
  inv.invalidate_rkey = key + 1;
  EXPECT_NE(complete_one(b, inv, cb), IBV_WC_SUCCESS);
  connect_pair();
  inv.invalidate_rkey = key;
  ibv_send_wr* bad;
  ASSERT_EQ(ibv_post_send(b, &inv, &bad), 0);
  auto wc = poll(cb, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc[0].opcode, IBV_WC_LOCAL_INV);
  EXPECT_EQ(rdma(IBV_WR_RDMA_READ, dst, 64, target.addr() + 512, key), IBV_WC_REM_ACCESS_ERR);
  // Bound again under the next key, read-write this time.
  connect_pair();
  key = ibv_inc_rkey(key);
  ASSERT_EQ(bind2(b, cb, w, key, target.mr, target.addr(), n,
                  IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE),
            IBV_WC_SUCCESS);
  EXPECT_EQ(rdma(IBV_WR_RDMA_WRITE, src, n, target.addr(), key), IBV_WC_SUCCESS);
  EXPECT_EQ(memcmp(target.data(), src.data(), n), 0);
  EXPECT_EQ(ibv_dealloc_mw(w), 0);
  // Dealloc: refused, memory untouched.
  std::vector<uint8_t> now(target.mem);
  fill_random(src.data(), n, 5);
  EXPECT_EQ(rdma(IBV_WR_RDMA_WRITE, src, 64, target.addr(), key), IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(target.mem, now);
}

TEST_F(MwTest, SendWithInvalidateEndsThePeersWindow) {
  const size_t n = 4096;
  Buffer& target = buffer(n, kMrAccess);
  Buffer& src = buffer(n);
  Buffer& rbuf = buffer(n);
  fill_random(src.data(), n, 6);
  ibv_mw* w = mw(IBV_MW_TYPE_2);
  ASSERT_NE(w, nullptr);
  uint32_t key = ibv_inc_rkey(w->rkey);
  ASSERT_EQ(bind2(b, cb, w, key, target.mr, target.addr(), n, IBV_ACCESS_REMOTE_WRITE),
            IBV_WC_SUCCESS);
  EXPECT_EQ(rdma(IBV_WR_RDMA_WRITE, src, n, target.addr(), key), IBV_WC_SUCCESS);
  EXPECT_EQ(memcmp(target.data(), src.data(), n), 0);
  // The peer (a) sends with invalidate: b's receive says so.
  ASSERT_EQ(post_recv(b, rbuf, n, 42), 0);
  ibv_sge sge{src.addr(), 100, src.mr->lkey};
  ibv_send_wr wr = send_wr(IBV_WR_SEND_WITH_INV, sge);
  wr.invalidate_rkey = key;
  EXPECT_EQ(complete_one(a, wr, ca), IBV_WC_SUCCESS);
  auto rc = poll(cb, 1);
  ASSERT_EQ(rc.size(), 1u);
  EXPECT_EQ(rc[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(rc[0].wr_id, 42u);
  EXPECT_EQ(rc[0].opcode, IBV_WC_RECV);
  EXPECT_TRUE(rc[0].wc_flags & IBV_WC_WITH_INV);
  EXPECT_FALSE(rc[0].wc_flags & IBV_WC_WITH_IMM);
  EXPECT_EQ(rc[0].invalidated_rkey, key);
  EXPECT_EQ(rc[0].byte_len, 100u);
  EXPECT_EQ(memcmp(rbuf.data(), src.data(), 100), 0);
  // Now refused, memory untouched.
  std::vector<uint8_t> now(target.mem);
  fill_random(src.data(), n, 7);
  EXPECT_EQ(rdma(IBV_WR_RDMA_WRITE, src, 64, target.addr(), key), IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(target.mem, now);
  EXPECT_EQ(ibv_dealloc_mw(w), 0);
}

TEST_F(MwTest, BadBindsFailWithBindError) {
  const size_t n = 8192;
  Buffer& target = buffer(n, kMrAccess);
  Buffer& plain = buffer(n);  // no MW_BIND
  Buffer& nowrite = buffer(n, IBV_ACCESS_MW_BIND);
  ibv_mw* w2 = mw(IBV_MW_TYPE_2);
  ibv_mw* w1 = mw(IBV_MW_TYPE_1);
  ASSERT_TRUE(w1 && w2);
  const unsigned rw = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  const uint32_t key = ibv_inc_rkey(w2->rkey);
  struct Case {
    const char* what;
    ibv_mw* mw;
    uint32_t rkey;
    ibv_mr* mr;
    uint64_t addr, len;
    unsigned access;
  } cases[] = {
      {"MR without MW_BIND", w2, key, plain.mr, plain.addr(), 64, rw},
      {"past the MR's end", w2, key, target.mr, target.addr() + n - 10, 64, rw},
      {"before the MR", w2, key, target.mr, target.addr() - 1, 64, rw},
      {"another window's key bits", w2, key ^ 0x100, target.mr, target.addr(), 64, rw},
      {"remote write on an MR its owner may not write", w2, key, nowrite.mr, nowrite.addr(), 64,
       rw},
      {"a type-1 window by ibv_post_send", w1, ibv_inc_rkey(w1->rkey), target.mr, target.addr(), 64,
       rw},
      {"unknown access bits", w2, key, target.mr, target.addr(), 64, rw | IBV_ACCESS_MW_BIND},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    connect_pair();
    uint32_t before = c.mw->rkey;
    EXPECT_EQ(bind2(b, cb, c.mw, c.rkey, c.mr, c.addr, c.len, c.access), IBV_WC_MW_BIND_ERR);
    EXPECT_EQ(c.mw->rkey, before);
  }
  // LOCAL_INV of a type-1 window is an error too.
  connect_pair();
  ASSERT_EQ(bind1(b, cb, w1, target.mr, target.addr(), 64, rw), IBV_WC_SUCCESS);
  ibv_send_wr inv{};
  inv.opcode = IBV_WR_LOCAL_INV;
  inv.send_flags = IBV_SEND_SIGNALED;
  inv.invalidate_rkey = w1->rkey;
  EXPECT_EQ(complete_one(b, inv, cb), IBV_WC_MW_BIND_ERR);
  // Deregistering the MR unbinds its windows.
  Buffer& src = buffer(64);
  connect_pair();
  ASSERT_EQ(bind2(b, cb, w2, key, target.mr, target.addr(), 64, rw), IBV_WC_SUCCESS);
  EXPECT_EQ(rdma(IBV_WR_RDMA_WRITE, src, 64, target.addr(), key), IBV_WC_SUCCESS);
  ASSERT_EQ(ibv_dereg_mr(target.mr), 0);
  target.mr = ibv_reg_mr(pd, target.data(), 64, IBV_ACCESS_LOCAL_WRITE);  // for TearDown
  connect_pair();
  EXPECT_EQ(rdma(IBV_WR_RDMA_WRITE, src, 64, target.addr(), key), IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(ibv_dealloc_mw(w1), 0);
  EXPECT_EQ(ibv_dealloc_mw(w2), 0);
}

TEST_F(MwTest, WrBindMwMakesAZeroBasedWindow) {
  ibv_qp_init_attr_ex ax{};
  ibv_cq* c = cq();
  ax.send_cq = c;
  ax.recv_cq = c;
  ax.qp_type = IBV_QPT_RC;
  ax.cap.max_send_wr = 16;
  ax.cap.max_recv_wr = 16;
  ax.cap.max_send_sge = 1;
  ax.cap.max_recv_sge = 1;
  ax.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  ax.pd = pd;
  ax.send_ops_flags = IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_LOCAL_INV |
                      IBV_QP_EX_WITH_SEND_WITH_INV | IBV_QP_EX_WITH_RDMA_WRITE;
  ibv_qp* owner = ibv_create_qp_ex(ctx, &ax);
  ASSERT_NE(owner, nullptr) << strerror(errno);
  qps.push_back(owner);
  a = qp(ca, ca);
  connect(a, owner);
  const size_t n = 3 * 4096;
  Buffer& target = buffer(n, kMrAccess);
  Buffer& src = buffer(n);
  fill_random(src.data(), n, 8);
  ibv_mw* w = mw(IBV_MW_TYPE_2);
  ASSERT_NE(w, nullptr);
  const uint32_t key = ibv_inc_rkey(w->rkey);
  ibv_qp_ex* x = ibv_qp_to_qp_ex(owner);
  ASSERT_NE(x, nullptr);
  ibv_mw_bind_info info{target.mr, target.addr() + 4096, 4096,
                        IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_ZERO_BASED};
  ibv_wr_start(x);
  x->wr_id = 9;
  x->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_bind_mw(x, w, key, &info);
  ASSERT_EQ(ibv_wr_complete(x), 0);
  auto wc = poll(c, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc[0].wr_id, 9u);
  EXPECT_EQ(wc[0].opcode, IBV_WC_BIND_MW);
  EXPECT_EQ(w->rkey, key);
  // Offsets from 0 reach the window's first byte.
  EXPECT_EQ(rdma(IBV_WR_RDMA_WRITE, src, 4096, 0, key), IBV_WC_SUCCESS);
  EXPECT_EQ(memcmp(target.data() + 4096, src.data(), 4096), 0);
  // ibv_wr_local_inv ends it.
  ibv_wr_start(x);
  x->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_local_inv(x, key);
  ASSERT_EQ(ibv_wr_complete(x), 0);
  wc = poll(c, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc[0].opcode, IBV_WC_LOCAL_INV);
  EXPECT_EQ(rdma(IBV_WR_RDMA_WRITE, src, 64, 0, key), IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(ibv_dealloc_mw(w), 0);
}

}  // namespace
}  // namespace vrdma::testing
