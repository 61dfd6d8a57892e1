// Device memory (ibv_alloc_dm, the copies, ibv_reg_dm_mr as a local SGE and a remote target),
// parent domains with the application's allocator and thread domains, and on-demand paging
// (explicit ODP MRs, ibv_advise_mr; implicit ODP is implicit_odp_test.cc's), with data checked byte
// for byte and their error paths.
#include <algorithm>

#include "verbs_fixture.h"

namespace vrdma::testing {
namespace {

class MemoryExtTest : public PairTest {
 protected:
  ibv_dm* dm(size_t len) {
    ibv_alloc_dm_attr attr{len, 0, 0};
    ibv_dm* d = ibv_alloc_dm(ctx, &attr);
    EXPECT_NE(d, nullptr) << strerror(errno);
    return d;
  }
};

// ---- device memory ------------------------------------------------------------------------

TEST_F(MemoryExtTest, DeviceMemoryCopiesWithinItsBoundsOnly) {
  ibv_device_attr_ex ax{};
  ASSERT_EQ(ibv_query_device_ex(ctx, nullptr, &ax), 0);
  ASSERT_GT(ax.max_dm_size, 0u);
  ibv_alloc_dm_attr too_big{ax.max_dm_size + 1, 0, 0};
  EXPECT_EQ(ibv_alloc_dm(ctx, &too_big), nullptr);
  ibv_alloc_dm_attr bad_mask{64, 0, 1};
  EXPECT_EQ(ibv_alloc_dm(ctx, &bad_mask), nullptr);
  EXPECT_EQ(errno, EINVAL);
  const size_t n = 10000;
  ibv_dm* d = dm(n);
  ASSERT_NE(d, nullptr);
  std::vector<uint8_t> in(n), out(n, 0);
  fill_random(in.data(), n, 11);
  ASSERT_EQ(ibv_memcpy_to_dm(d, 0, in.data(), n), 0);
  ASSERT_EQ(ibv_memcpy_from_dm(out.data(), d, 0, n), 0);
  EXPECT_EQ(in, out);
  // A part of it, at an offset.
  std::vector<uint8_t> part(400);
  fill_random(part.data(), part.size(), 12);
  ASSERT_EQ(ibv_memcpy_to_dm(d, 1000, part.data(), part.size()), 0);
  std::vector<uint8_t> back(400);
  ASSERT_EQ(ibv_memcpy_from_dm(back.data(), d, 1000, back.size()), 0);
  EXPECT_EQ(back, part);
  memcpy(in.data() + 1000, part.data(), part.size());
  // Misaligned or out of bounds: refused, nothing changed.
  struct {
    uint64_t off;
    size_t len;
  } bad[] = {{1, 4}, {4, 3}, {n + 4, 4}, {0, n + 4}, {n - 4, 8}};
  for (auto& c : bad) {
    SCOPED_TRACE(c.off);
    std::vector<uint8_t> junk(c.len + 8, 0xee);
    EXPECT_EQ(ibv_memcpy_to_dm(d, c.off, junk.data(), c.len), EINVAL);
    EXPECT_EQ(ibv_memcpy_from_dm(junk.data(), d, c.off, c.len), EINVAL);
  }
  ASSERT_EQ(ibv_memcpy_from_dm(out.data(), d, 0, n), 0);
  EXPECT_EQ(in, out);
  EXPECT_EQ(ibv_free_dm(d), 0);
}

TEST_F(MemoryExtTest, DeviceMemoryMrIsZeroBasedLocalSourceAndRemoteTarget) {
  connect_pair();
  const size_t n = 8192;
  ibv_dm* d = dm(n);
  ASSERT_NE(d, nullptr);
  const unsigned zb = IBV_ACCESS_ZERO_BASED | IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                      IBV_ACCESS_REMOTE_READ;
  // Not zero-based, beyond the DM: refused.
  EXPECT_EQ(ibv_reg_dm_mr(pd, d, 0, n, IBV_ACCESS_LOCAL_WRITE), nullptr);
  EXPECT_EQ(ibv_reg_dm_mr(pd, d, 0, n + 4, zb), nullptr);
  EXPECT_EQ(ibv_reg_dm_mr(pd, d, 4096, 4100, zb), nullptr);
  ibv_mr* mr = ibv_reg_dm_mr(pd, d, 0, n, zb);
  ASSERT_NE(mr, nullptr) << strerror(errno);
  EXPECT_EQ(mr->addr, nullptr);
  EXPECT_EQ(mr->length, n);
  // Remote target: the peer writes at DM offsets 0.. through the rkey.
  Buffer& src = buffer(n);
  fill_random(src.data(), n, 13);
  EXPECT_EQ(rdma_on(a, ca, IBV_WR_RDMA_WRITE, src.addr(), src.mr->lkey, n, 0, mr->rkey),
            IBV_WC_SUCCESS);
  std::vector<uint8_t> got(n);
  ASSERT_EQ(ibv_memcpy_from_dm(got.data(), d, 0, n), 0);
  EXPECT_EQ(memcmp(got.data(), src.data(), n), 0);
  // Past its end: refused.
  EXPECT_EQ(rdma_on(a, ca, IBV_WR_RDMA_WRITE, src.addr(), src.mr->lkey, 8, n - 4, mr->rkey),
            IBV_WC_REM_ACCESS_ERR);
  // Local source: b writes from the DM (SGE addresses from 0) into a's buffer (a new pair: the
  // access error above put a's QP in the error state).
  connect_pair();
  std::vector<uint8_t> fresh(n);
  fill_random(fresh.data(), n, 14);
  ASSERT_EQ(ibv_memcpy_to_dm(d, 0, fresh.data(), n), 0);
  Buffer& dst = buffer(n);
  EXPECT_EQ(rdma_on(b, cb, IBV_WR_RDMA_WRITE, 4096, mr->lkey, 4096, dst.addr(), dst.mr->rkey),
            IBV_WC_SUCCESS);
  EXPECT_EQ(memcmp(dst.data(), fresh.data() + 4096, 4096), 0);
  // An MR keeps its DM: free refused until it is deregistered.
  EXPECT_EQ(ibv_free_dm(d), EBUSY);
  ASSERT_EQ(ibv_dereg_mr(mr), 0);
  EXPECT_EQ(ibv_free_dm(d), 0);
}

// ---- parent and thread domains ------------------------------------------------------------

struct AllocLog {
  std::vector<uint8_t> arena = std::vector<uint8_t>(1 << 20);
  size_t used = 0;
  int allocs = 0, frees = 0;
  uint64_t type = 0;
  size_t last_size = 0;
  enum Mode { kArena, kDefault, kFail } mode = kArena;
};

void* log_alloc(ibv_pd*, void* ctx, size_t size, size_t align, uint64_t type) {
  auto* l = static_cast<AllocLog*>(ctx);
  ++l->allocs;
  l->type = type;
  l->last_size = size;
  if (l->mode == AllocLog::kDefault) return IBV_ALLOCATOR_USE_DEFAULT;
  if (l->mode == AllocLog::kFail) return nullptr;
  uintptr_t base = reinterpret_cast<uintptr_t>(l->arena.data()) + l->used;
  uintptr_t p = (base + align - 1) & ~(uintptr_t(align) - 1);
  l->used = p + size - reinterpret_cast<uintptr_t>(l->arena.data());
  return reinterpret_cast<void*>(p);
}
void log_free(ibv_pd*, void* ctx, void*, uint64_t) {
  ++static_cast<AllocLog*>(ctx)->frees;
}

TEST_F(MemoryExtTest, ParentDomainAllocatorHoldsTheSendQueue) {
  AllocLog log;
  ibv_td_init_attr tda{};
  ibv_td* td = ibv_alloc_td(ctx, &tda);
  ASSERT_NE(td, nullptr) << strerror(errno);
  ibv_parent_domain_init_attr pa{};
  pa.pd = pd;
  pa.td = td;
  pa.comp_mask = IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS | IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT;
  pa.alloc = log_alloc;
  pa.free = log_free;
  pa.pd_context = &log;
  ibv_pd* parent = ibv_alloc_parent_domain(ctx, &pa);
  ASSERT_NE(parent, nullptr) << strerror(errno);
  // A CQ may name it (and not a plain PD).
  ibv_cq_init_attr_ex cxa{};
  cxa.cqe = 64;
  cxa.comp_mask = IBV_CQ_INIT_ATTR_MASK_PD;
  cxa.parent_domain = parent;
  ibv_cq_ex* cx = ibv_create_cq_ex(ctx, &cxa);
  ASSERT_NE(cx, nullptr) << strerror(errno);
  cqs.push_back(ibv_cq_ex_to_cq(cx));
  cxa.parent_domain = pd;
  EXPECT_EQ(ibv_create_cq_ex(ctx, &cxa), nullptr);

  ibv_cq* cs = ibv_cq_ex_to_cq(cx);
  ibv_cq* cr = cq();
  ibv_qp_init_attr qa{};
  qa.send_cq = cs;
  qa.recv_cq = cs;
  qa.qp_type = IBV_QPT_RC;
  qa.cap = {16, 16, 1, 1, 64};
  ibv_qp* sender = ibv_create_qp(parent, &qa);
  ASSERT_NE(sender, nullptr) << strerror(errno);
  EXPECT_EQ(log.allocs, 1);
  EXPECT_EQ(log.type, 1u);  // a QP's send queue
  EXPECT_GT(log.last_size, 16u * 64u);
  ibv_qp* receiver = qp(cr, cr);
  ASSERT_NE(receiver, nullptr);
  connect(sender, receiver);
  // MRs on the parent domain serve QPs of its PD.
  auto* rmem = new std::vector<uint8_t>(4 * 64);
  ibv_mr* rmr = ibv_reg_mr(parent, rmem->data(), rmem->size(), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(rmr, nullptr);
  // Inline sends posted before any receive wait in the send queue, in the allocator's memory.
  uint8_t payload[4][48];
  for (int i = 0; i < 4; ++i) fill_random(payload[i], sizeof(payload[i]), 20 + i);
  for (int i = 0; i < 4; ++i) {
    ibv_sge sge{reinterpret_cast<uint64_t>(payload[i]), sizeof(payload[i]), 0};
    ibv_send_wr wr = send_wr(IBV_WR_SEND, sge, IBV_SEND_SIGNALED | IBV_SEND_INLINE);
    wr.wr_id = i;
    ibv_send_wr* bad;
    ASSERT_EQ(ibv_post_send(sender, &wr, &bad), 0);
  }
  auto found = [&](const uint8_t* p, size_t len) {
    return std::search(log.arena.begin(), log.arena.begin() + log.used, p, p + len) !=
           log.arena.begin() + log.used;
  };
  EXPECT_TRUE(found(payload[3], sizeof(payload[3])));
  for (int i = 0; i < 4; ++i) {
    ibv_sge sge{reinterpret_cast<uint64_t>(rmem->data() + 64 * i), 64, rmr->lkey};
    ibv_recv_wr rw{};
    rw.wr_id = i;
    rw.sg_list = &sge;
    rw.num_sge = 1;
    ibv_recv_wr* bad;
    ASSERT_EQ(ibv_post_recv(receiver, &rw, &bad), 0);
  }
  auto sent = poll(cs, 4);
  ASSERT_EQ(sent.size(), 4u);
  for (auto& w : sent) EXPECT_EQ(w.status, IBV_WC_SUCCESS);
  auto recvd = poll(cr, 4);
  ASSERT_EQ(recvd.size(), 4u);
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(memcmp(rmem->data() + 64 * i, payload[i], sizeof(payload[i])), 0) << i;
  ASSERT_EQ(ibv_destroy_qp(sender), 0);
  EXPECT_EQ(log.frees, 1);
  ASSERT_EQ(ibv_dereg_mr(rmr), 0);
  delete rmem;

  // USE_DEFAULT: the library's memory, nothing to give back; NULL: the QP is not created.
  log.mode = AllocLog::kDefault;
  ibv_qp* q2 = ibv_create_qp(parent, &qa);
  ASSERT_NE(q2, nullptr);
  EXPECT_EQ(log.allocs, 2);
  ASSERT_EQ(ibv_destroy_qp(q2), 0);
  EXPECT_EQ(log.frees, 1);
  log.mode = AllocLog::kFail;
  errno = 0;
  EXPECT_EQ(ibv_create_qp(parent, &qa), nullptr);
  EXPECT_EQ(errno, ENOMEM);

  // Without allocators, and the PD outliving its parent domain.
  ibv_parent_domain_init_attr plain{};
  plain.pd = pd;
  ibv_pd* p2 = ibv_alloc_parent_domain(ctx, &plain);
  ASSERT_NE(p2, nullptr);
  ibv_qp* q3 = ibv_create_qp(p2, &qa);
  ASSERT_NE(q3, nullptr);
  ASSERT_EQ(ibv_destroy_qp(q3), 0);
  EXPECT_EQ(ibv_dealloc_pd(p2), 0);
  EXPECT_EQ(ibv_dealloc_pd(parent), 0);
  Buffer& still = buffer(64);
  EXPECT_NE(still.mr, nullptr);
  EXPECT_EQ(ibv_dealloc_td(td), 0);
  // Bad attributes.
  ibv_td_init_attr bad_td{1};
  EXPECT_EQ(ibv_alloc_td(ctx, &bad_td), nullptr);
  ibv_parent_domain_init_attr no_pd{};
  EXPECT_EQ(ibv_alloc_parent_domain(ctx, &no_pd), nullptr);
  ibv_parent_domain_init_attr no_fn{};
  no_fn.pd = pd;
  no_fn.comp_mask = IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS;
  EXPECT_EQ(ibv_alloc_parent_domain(ctx, &no_fn), nullptr);
}

// ---- on-demand paging ---------------------------------------------------------------------

TEST_F(MemoryExtTest, OdpMrsWorkAndAdviceIsChecked) {
  connect_pair();
  const size_t n = 3 * 4096 + 100;
  const int odp = IBV_ACCESS_ON_DEMAND | IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                  IBV_ACCESS_REMOTE_READ;
  Buffer& target = buffer(n, odp);
  Buffer& src = buffer(n, odp);
  Buffer& plain = buffer(64);
  fill_random(src.data(), n, 30);
  ibv_sge adv{target.addr(), static_cast<uint32_t>(n), target.mr->lkey};
  EXPECT_EQ(
      ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, IBV_ADVISE_MR_FLAG_FLUSH, &adv, 1), 0);
  EXPECT_EQ(rdma_on(a, ca, IBV_WR_RDMA_WRITE, src.addr(), src.mr->lkey, n, target.addr(),
                    target.mr->rkey),
            IBV_WC_SUCCESS);
  EXPECT_EQ(memcmp(target.data(), src.data(), n), 0);
  Buffer& rd = buffer(n, odp);
  EXPECT_EQ(
      rdma_on(a, ca, IBV_WR_RDMA_READ, rd.addr(), rd.mr->lkey, n, target.addr(), target.mr->rkey),
      IBV_WC_SUCCESS);
  EXPECT_EQ(memcmp(rd.data(), src.data(), n), 0);
  // Advice beyond the MR, on an MR without ON_DEMAND, of an unknown kind: refused.
  ibv_sge past{target.addr(), static_cast<uint32_t>(n + 1), target.mr->lkey};
  EXPECT_EQ(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &past, 1), EINVAL);
  ibv_sge not_odp{plain.addr(), 64, plain.mr->lkey};
  EXPECT_EQ(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &not_odp, 1), EINVAL);
  EXPECT_EQ(ibv_advise_mr(pd, static_cast<ibv_advise_mr_advice>(9), 0, &adv, 1), EOPNOTSUPP);
  // Implicit ODP (the whole address space) is implicit_odp_test.cc's.
  ibv_device_attr_ex ax{};
  ASSERT_EQ(ibv_query_device_ex(ctx, nullptr, &ax), 0);
  EXPECT_TRUE(ax.odp_caps.general_caps & IBV_ODP_SUPPORT);
}

}  // namespace
}  // namespace vrdma::testing
