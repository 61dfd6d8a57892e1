// The extended verbs through the drop-in libibverbs: ibv_query_device_ex and the GID table,
// ibv_rereg_mr, ibv_resize_cq, SRQ limit events, extended CQs (ibv_start_poll and the
// ibv_wc_read_* accessors) and extended QPs (the ibv_wr_* interface), with data checked byte
// for byte and their error paths.
#include <arpa/inet.h>
#include <poll.h>
#include <time.h>

#include "verbs_fixture.h"

namespace vrdma::testing {
namespace {

uint64_t now_ns(clockid_t id) {
  timespec ts;
  clock_gettime(id, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

class VerbsExTest : public VerbsTest {
 protected:
  ibv_cq_ex* cq_ex(uint64_t wc_flags, int depth = 256) {
    ibv_cq_init_attr_ex a{};
    a.cqe = depth;
    a.wc_flags = wc_flags;
    ibv_cq_ex* c = ibv_create_cq_ex(ctx, &a);
    EXPECT_NE(c, nullptr) << strerror(errno);
    if (c) cqs.push_back(ibv_cq_ex_to_cq(c));
    return c;
  }

  ibv_qp* qp_ex(ibv_cq* scq, ibv_cq* rcq, uint64_t ops, ibv_qp_type type = IBV_QPT_RC,
                uint32_t max_send_wr = 64, uint32_t max_inline = 256) {
    ibv_qp_init_attr_ex a{};
    a.send_cq = scq;
    a.recv_cq = rcq;
    a.qp_type = type;
    a.cap.max_send_wr = max_send_wr;
    a.cap.max_recv_wr = 64;
    a.cap.max_send_sge = 4;
    a.cap.max_recv_sge = 4;
    a.cap.max_inline_data = max_inline;
    a.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    a.pd = pd;
    a.send_ops_flags = ops;
    ibv_qp* q = ibv_create_qp_ex(ctx, &a);
    EXPECT_NE(q, nullptr) << strerror(errno);
    if (q) qps.push_back(q);
    return q;
  }

  // Waits up to 5 s for an asynchronous event.
  bool async_event(ibv_async_event& ev) {
    pollfd p{ctx->async_fd, POLLIN, 0};
    if (::poll(&p, 1, 5000) != 1) return false;
    if (ibv_get_async_event(ctx, &ev) != 0) return false;
    ibv_ack_async_event(&ev);
    return true;
  }

  static constexpr uint64_t kAllOps =
      uint64_t(IBV_QP_EX_WITH_RDMA_WRITE) | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |
      IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ |
      IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD;
};

// ---- device -------------------------------------------------------------------------------

TEST_F(VerbsExTest, QueryDeviceExFillsEveryAttributeAsTheDeviceHasIt) {
  ibv_device_attr_ex ax;
  memset(&ax, 0xa5, sizeof(ax));
  ASSERT_EQ(ibv_query_device_ex(ctx, nullptr, &ax), 0);
  ibv_device_attr a;
  ASSERT_EQ(ibv_query_device(ctx, &a), 0);
  EXPECT_EQ(memcmp(&ax.orig_attr, &a, sizeof(a)), 0);
  EXPECT_EQ(ax.phys_port_cnt_ex, 1u);
  EXPECT_EQ(ax.orig_attr.phys_port_cnt, 1);
  EXPECT_EQ(ax.hca_core_clock, 1000000u);
  EXPECT_EQ(ax.completion_timestamp_mask, ~uint64_t{0});
  // Explicit and implicit ODP on every transport; device memory in the process.
  EXPECT_EQ(ax.odp_caps.general_caps, uint64_t(IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT));
  EXPECT_EQ(ax.odp_caps.per_transport_caps.rc_odp_caps,
            uint32_t(IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE |
                     IBV_ODP_SUPPORT_READ | IBV_ODP_SUPPORT_ATOMIC | IBV_ODP_SUPPORT_SRQ_RECV));
  EXPECT_EQ(ax.max_dm_size, 1u << 20);
  EXPECT_EQ(ax.tso_caps.max_tso, 0u);
  EXPECT_EQ(ax.rss_caps.supported_qpts, 0u);
  // XRC: what an XRC_SEND QP sends and an XRC SRQ receives, into ODP MRs as into any.
  EXPECT_EQ(ax.xrc_odp_caps, uint32_t(IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_WRITE |
                                      IBV_ODP_SUPPORT_READ | IBV_ODP_SUPPORT_ATOMIC |
                                      IBV_ODP_SUPPORT_SRQ_RECV));
  EXPECT_EQ(ax.raw_packet_caps, 0u);
  EXPECT_EQ(ax.comp_mask, 0u);
  EXPECT_EQ(ax.device_cap_flags_ex & 0xffffffffu, uint64_t(a.device_cap_flags));
  ibv_query_device_ex_input in{};
  in.comp_mask = 1;
  EXPECT_EQ(ibv_query_device_ex(ctx, &in, &ax), EINVAL);
}

TEST_F(VerbsExTest, GidTableHasTheOneRoceV2Gid) {
  ibv_gid_entry table[4];
  memset(table, 0, sizeof(table));
  ASSERT_EQ(ibv_query_gid_table(ctx, table, 4, 0), 1);
  ibv_gid_entry e;
  ASSERT_EQ(ibv_query_gid_ex(ctx, 1, 0, &e, 0), 0);
  EXPECT_EQ(memcmp(&table[0], &e, sizeof(e)), 0);
  ibv_gid gid;
  ASSERT_EQ(ibv_query_gid(ctx, 1, 0, &gid), 0);
  EXPECT_EQ(memcmp(gid.raw, e.gid.raw, 16), 0);
  EXPECT_EQ(e.port_num, 1u);
  EXPECT_EQ(e.gid_index, 0u);
  EXPECT_EQ(e.gid_type, IBV_GID_TYPE_ROCE_V2);
  EXPECT_EQ(ibv_query_gid_ex(ctx, 2, 0, &e, 0), EINVAL);
  EXPECT_EQ(ibv_query_gid_ex(ctx, 1, 0, &e, 1), EINVAL);
  EXPECT_EQ(ibv_query_gid_table(ctx, table, 0, 0), -EINVAL);
}

TEST_F(VerbsExTest, AddressHandleOnRoceNeedsAGrh) {
  ibv_ah_attr aa{};
  aa.port_num = 1;
  aa.is_global = 0;
  errno = 0;
  EXPECT_EQ(ibv_create_ah(pd, &aa), nullptr);
  EXPECT_EQ(errno, EINVAL);
  aa.is_global = 1;
  ASSERT_EQ(ibv_query_gid(ctx, 1, 0, &aa.grh.dgid), 0);
  ibv_ah* ah = ibv_create_ah(pd, &aa);
  ASSERT_NE(ah, nullptr);
  EXPECT_EQ(ibv_destroy_ah(ah), 0);
}

// ---- ibv_rereg_mr -------------------------------------------------------------------------

class ReregTest : public VerbsExTest {
 protected:
  void SetUp() override {
    VerbsExTest::SetUp();
    c1 = cq();
    c2 = cq();
    a = qp(c1, c1);
    b = qp(c2, c2);
    connect(a, b);
  }
  void reconnect() {
    ibv_qp_attr r{};
    r.qp_state = IBV_QPS_RESET;
    ASSERT_EQ(ibv_modify_qp(a, &r, IBV_QP_STATE), 0);
    ASSERT_EQ(ibv_modify_qp(b, &r, IBV_QP_STATE), 0);
    connect(a, b);
  }
  // RDMA write of `len` random bytes from `src` to (rkey, addr); the completion's status.
  ibv_wc_status write(Buffer& src, uint32_t rkey, uint64_t addr, uint32_t len, uint32_t seed) {
    fill_random(src.data(), len, seed);
    ibv_sge s{src.addr(), len, src.mr->lkey};
    ibv_send_wr wr = send_wr(IBV_WR_RDMA_WRITE, s);
    wr.wr.rdma.rkey = rkey;
    wr.wr.rdma.remote_addr = addr;
    return complete_one(a, wr, c1);
  }
  ibv_cq *c1 = nullptr, *c2 = nullptr;
  ibv_qp *a = nullptr, *b = nullptr;
};

TEST_F(ReregTest, AccessChangeKeepsTheKeysAndTakesEffect) {
  Buffer& src = buffer(8192);
  Buffer& dst = buffer(8192);
  const uint32_t rkey = dst.mr->rkey, lkey = dst.mr->lkey;
  ASSERT_EQ(write(src, rkey, dst.addr(), 8192, 1), IBV_WC_SUCCESS);
  EXPECT_EQ(memcmp(src.data(), dst.data(), 8192), 0);

  ASSERT_EQ(ibv_rereg_mr(dst.mr, IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0,
                         IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ),
            0);
  EXPECT_EQ(dst.mr->rkey, rkey);
  EXPECT_EQ(dst.mr->lkey, lkey);
  std::vector<uint8_t> before(dst.data(), dst.data() + 8192);
  EXPECT_EQ(write(src, rkey, dst.addr(), 8192, 2), IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(memcmp(before.data(), dst.data(), 8192), 0);

  reconnect();
  ASSERT_EQ(ibv_rereg_mr(dst.mr, IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0,
                         IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE),
            0);
  ASSERT_EQ(write(src, rkey, dst.addr(), 8192, 3), IBV_WC_SUCCESS);
  EXPECT_EQ(memcmp(src.data(), dst.data(), 8192), 0);
}

TEST_F(ReregTest, TranslationChangeMovesTheRegionUnderTheSameKey) {
  Buffer& src = buffer(4096);
  Buffer& dst = buffer(4096);
  std::vector<uint8_t> other(3 * 4096);
  fill_random(other.data(), other.size(), 11);
  std::vector<uint8_t> other_copy = other;
  const uint32_t rkey = dst.mr->rkey;
  uint8_t* target = other.data() + 100;
  ASSERT_EQ(ibv_rereg_mr(dst.mr, IBV_REREG_MR_CHANGE_TRANSLATION, nullptr, target, 5000, 0), 0);
  EXPECT_EQ(dst.mr->rkey, rkey);
  EXPECT_EQ(dst.mr->addr, target);
  EXPECT_EQ(dst.mr->length, 5000u);
  EXPECT_EQ(other, other_copy);  // contents kept by the registration
  std::vector<uint8_t> old_dst(dst.data(), dst.data() + 4096);
  ASSERT_EQ(write(src, rkey, reinterpret_cast<uint64_t>(target) + 900, 4096, 4), IBV_WC_SUCCESS);
  EXPECT_EQ(memcmp(src.data(), target + 900, 4096), 0);
  EXPECT_EQ(memcmp(old_dst.data(), dst.data(), 4096), 0);
  // The old range is no longer reachable by the key.
  EXPECT_EQ(write(src, rkey, dst.addr() + 4096 * 8, 16, 5), IBV_WC_REM_ACCESS_ERR);
  // The buffer the fixture deregisters is the MR, now over `other`.
  ASSERT_EQ(ibv_dereg_mr(dst.mr), 0);
  dst.mr = ibv_reg_mr(pd, dst.data(), 4096, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(dst.mr, nullptr);
}

TEST_F(ReregTest, PdChangeMakesTheQpOfTheOldPdFail) {
  Buffer& src = buffer(4096);
  Buffer& dst = buffer(4096);
  ibv_pd* other = ibv_alloc_pd(ctx);
  ASSERT_NE(other, nullptr);
  ASSERT_EQ(ibv_rereg_mr(dst.mr, IBV_REREG_MR_CHANGE_PD, other, nullptr, 0, 0), 0);
  EXPECT_EQ(dst.mr->pd, other);
  EXPECT_NE(write(src, dst.mr->rkey, dst.addr(), 64, 6), IBV_WC_SUCCESS);
  reconnect();
  ASSERT_EQ(ibv_rereg_mr(dst.mr, IBV_REREG_MR_CHANGE_PD, pd, nullptr, 0, 0), 0);
  ASSERT_EQ(write(src, dst.mr->rkey, dst.addr(), 4096, 7), IBV_WC_SUCCESS);
  EXPECT_EQ(memcmp(src.data(), dst.data(), 4096), 0);
  EXPECT_EQ(ibv_dealloc_pd(other), 0);
}

TEST_F(ReregTest, BadInputLeavesTheMrAsItWas) {
  Buffer& src = buffer(4096);
  Buffer& dst = buffer(4096);
  const uint32_t rkey = dst.mr->rkey;
  errno = 0;
  EXPECT_EQ(ibv_rereg_mr(dst.mr, 0, nullptr, nullptr, 0, 0), IBV_REREG_MR_ERR_INPUT);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(ibv_rereg_mr(dst.mr, 1 << 5, nullptr, nullptr, 0, 0), IBV_REREG_MR_ERR_INPUT);
  EXPECT_EQ(ibv_rereg_mr(dst.mr, IBV_REREG_MR_CHANGE_TRANSLATION, nullptr, nullptr, 10, 0),
            IBV_REREG_MR_ERR_INPUT);
  EXPECT_EQ(ibv_rereg_mr(dst.mr, IBV_REREG_MR_CHANGE_PD, nullptr, nullptr, 0, 0),
            IBV_REREG_MR_ERR_INPUT);
  errno = 0;
  EXPECT_EQ(ibv_rereg_mr(dst.mr, IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0,
                         IBV_ACCESS_REMOTE_WRITE),
            IBV_REREG_MR_ERR_INPUT);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(dst.mr->rkey, rkey);
  ASSERT_EQ(write(src, rkey, dst.addr(), 4096, 8), IBV_WC_SUCCESS);
  EXPECT_EQ(memcmp(src.data(), dst.data(), 4096), 0);
}

// ---- ibv_resize_cq ------------------------------------------------------------------------

TEST_F(VerbsExTest, ResizeCqGrowsShrinksAndRefusesBelowWaitingCompletions) {
  ibv_cq* c = cq(3);
  EXPECT_GE(c->cqe, 3);
  ASSERT_EQ(ibv_resize_cq(c, 1), 0);
  EXPECT_GE(c->cqe, 1);
  ASSERT_EQ(ibv_resize_cq(c, 100), 0);
  EXPECT_GE(c->cqe, 100);
  ibv_qp* a = qp(c, c);
  ibv_qp* b = qp(c, c);
  connect(a, b);
  Buffer& src = buffer(64);
  Buffer& dst = buffer(64);
  ibv_sge s{src.addr(), 8, src.mr->lkey};
  for (int i = 0; i < 10; ++i) {
    ibv_send_wr wr = send_wr(IBV_WR_RDMA_WRITE, s);
    wr.wr.rdma.rkey = dst.mr->rkey;
    wr.wr.rdma.remote_addr = dst.addr();
    ibv_send_wr* bad;
    ASSERT_EQ(ibv_post_send(a, &wr, &bad), 0);
  }
  EXPECT_EQ(ibv_resize_cq(c, 4), EINVAL);
  EXPECT_EQ(ibv_resize_cq(c, 10), 0);
  EXPECT_EQ(poll(c, 10).size(), 10u);
  EXPECT_EQ(ibv_resize_cq(c, 4), 0);
  EXPECT_EQ(ibv_resize_cq(c, 0), EINVAL);
  ibv_device_attr da;
  ASSERT_EQ(ibv_query_device(ctx, &da), 0);
  EXPECT_EQ(ibv_resize_cq(c, da.max_cqe + 1), EINVAL);
  // The ring was made at creation: growing past it is refused, and the CQ stays as it was.
  int before = c->cqe;
  EXPECT_EQ(ibv_resize_cq(c, da.max_cqe), ENOMEM);
  EXPECT_EQ(c->cqe, before);
  // The largest CQ the device reports can be made; one beyond it cannot.
  ibv_cq* big = ibv_create_cq(ctx, da.max_cqe, nullptr, nullptr, 0);
  ASSERT_NE(big, nullptr) << strerror(errno);
  EXPECT_GE(big->cqe, da.max_cqe);
  EXPECT_EQ(ibv_destroy_cq(big), 0);
  errno = 0;
  EXPECT_EQ(ibv_create_cq(ctx, da.max_cqe + 1, nullptr, nullptr, 0), nullptr);
  EXPECT_EQ(errno, EINVAL);
}

// ---- SRQ limit ----------------------------------------------------------------------------

TEST_F(VerbsExTest, SrqLimitRaisesOneEventWhenReceivesFallBelowIt) {
  ibv_srq_init_attr sa{};
  sa.attr.max_wr = 16;
  sa.attr.max_sge = 1;
  ibv_srq* srq = ibv_create_srq(pd, &sa);
  ASSERT_NE(srq, nullptr);
  ibv_cq* c1 = cq();
  ibv_cq* c2 = cq();
  ibv_qp* a = qp(c1, c1);
  ibv_qp* b = qp(c2, c2, IBV_QPT_RC, srq);
  connect(a, b);
  Buffer& src = buffer(64);
  Buffer& dst = buffer(64 * 8);
  for (int i = 0; i < 8; ++i) {
    ibv_sge s{dst.addr() + 64 * i, 64, dst.mr->lkey};
    ibv_recv_wr r{};
    r.wr_id = i;
    r.sg_list = &s;
    r.num_sge = 1;
    ibv_recv_wr* bad;
    ASSERT_EQ(ibv_post_srq_recv(srq, &r, &bad), 0);
  }
  ibv_srq_attr lim{};
  lim.srq_limit = 100;
  EXPECT_EQ(ibv_modify_srq(srq, &lim, IBV_SRQ_LIMIT), EINVAL);
  lim.srq_limit = 5;
  ASSERT_EQ(ibv_modify_srq(srq, &lim, IBV_SRQ_LIMIT), 0);
  ibv_srq_attr q{};
  ASSERT_EQ(ibv_query_srq(srq, &q), 0);
  EXPECT_EQ(q.srq_limit, 5u);
  auto send = [&](int n) {
    for (int i = 0; i < n; ++i) {
      ibv_sge s{src.addr(), 16, src.mr->lkey};
      ibv_send_wr wr = send_wr(IBV_WR_SEND, s);
      ASSERT_EQ(complete_one(a, wr, c1), IBV_WC_SUCCESS);
    }
  };
  // 8 -> 5 left: not below the limit, no event.
  send(3);
  EXPECT_EQ(poll(c2, 3).size(), 3u);
  pollfd p{ctx->async_fd, POLLIN, 0};
  EXPECT_EQ(::poll(&p, 1, 100), 0);
  // 4 left: below.
  send(1);
  EXPECT_EQ(poll(c2, 1).size(), 1u);
  ibv_async_event ev;
  ASSERT_TRUE(async_event(ev));
  EXPECT_EQ(ev.event_type, IBV_EVENT_SRQ_LIMIT_REACHED);
  EXPECT_EQ(ev.element.srq, srq);
  ASSERT_EQ(ibv_query_srq(srq, &q), 0);
  EXPECT_EQ(q.srq_limit, 0u);  // disarmed
  send(1);
  EXPECT_EQ(poll(c2, 1).size(), 1u);
  EXPECT_EQ(::poll(&p, 1, 100), 0);  // once only
  ibv_destroy_qp(b);
  qps.pop_back();
  EXPECT_EQ(ibv_destroy_srq(srq), 0);
}

// ---- extended CQs -------------------------------------------------------------------------

TEST_F(VerbsExTest, ExtendedCqReadsEveryFieldOfEachCompletion) {
  const uint64_t flags = uint64_t(IBV_WC_STANDARD_FLAGS) |
                         uint64_t(IBV_WC_EX_WITH_COMPLETION_TIMESTAMP) |
                         uint64_t(IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK);
  ibv_cq_ex* sx = cq_ex(flags);
  ibv_cq_ex* rx = cq_ex(flags);
  ASSERT_TRUE(sx && rx);
  ibv_qp* a = qp(ibv_cq_ex_to_cq(sx), ibv_cq_ex_to_cq(sx));
  ibv_qp* b = qp(ibv_cq_ex_to_cq(rx), ibv_cq_ex_to_cq(rx));
  connect(a, b);
  ibv_poll_cq_attr pa{};
  EXPECT_EQ(ibv_start_poll(rx, &pa), ENOENT);

  Buffer& src = buffer(4096);
  Buffer& dst = buffer(4096);
  fill_random(src.data(), 3000, 21);
  ASSERT_EQ(post_recv(b, dst, 4096, 0xabc), 0);
  ibv_sge s{src.addr(), 3000, src.mr->lkey};
  ibv_send_wr wr = send_wr(IBV_WR_SEND_WITH_IMM, s);
  wr.wr_id = 0x1234;
  wr.imm_data = htonl(0xdeadbeef);
  const uint64_t t0 = now_ns(CLOCK_MONOTONIC), w0 = now_ns(CLOCK_REALTIME);
  ibv_send_wr* bad;
  ASSERT_EQ(ibv_post_send(a, &wr, &bad), 0);

  int rc = ENOENT;
  for (int i = 0; i < 100000 && rc == ENOENT; ++i) rc = ibv_start_poll(rx, &pa);
  ASSERT_EQ(rc, 0);
  const uint64_t t1 = now_ns(CLOCK_MONOTONIC), w1 = now_ns(CLOCK_REALTIME);
  EXPECT_EQ(rx->wr_id, 0xabcu);
  EXPECT_EQ(rx->status, IBV_WC_SUCCESS);
  EXPECT_EQ(ibv_wc_read_opcode(rx), IBV_WC_RECV);
  EXPECT_EQ(ibv_wc_read_byte_len(rx), 3000u);
  EXPECT_EQ(ntohl(ibv_wc_read_imm_data(rx)), 0xdeadbeefu);
  EXPECT_TRUE(ibv_wc_read_wc_flags(rx) & IBV_WC_WITH_IMM);
  EXPECT_EQ(ibv_wc_read_qp_num(rx), b->qp_num);
  EXPECT_EQ(ibv_wc_read_src_qp(rx), a->qp_num);
  EXPECT_EQ(ibv_wc_read_slid(rx), 0u);
  EXPECT_EQ(ibv_wc_read_sl(rx), 0u);
  EXPECT_EQ(ibv_wc_read_dlid_path_bits(rx), 0u);
  EXPECT_EQ(ibv_wc_read_vendor_err(rx), 0u);
  uint64_t ts = ibv_wc_read_completion_ts(rx), wall = ibv_wc_read_completion_wallclock_ns(rx);
  EXPECT_GE(ts, t0);
  EXPECT_LE(ts, t1);
  EXPECT_GE(wall, w0);
  EXPECT_LE(wall, w1);
  EXPECT_EQ(ibv_next_poll(rx), ENOENT);
  ibv_end_poll(rx);
  EXPECT_EQ(memcmp(src.data(), dst.data(), 3000), 0);

  rc = ENOENT;
  for (int i = 0; i < 100000 && rc == ENOENT; ++i) rc = ibv_start_poll(sx, &pa);
  ASSERT_EQ(rc, 0);
  EXPECT_EQ(sx->wr_id, 0x1234u);
  EXPECT_EQ(sx->status, IBV_WC_SUCCESS);
  EXPECT_EQ(ibv_wc_read_opcode(sx), IBV_WC_SEND);
  EXPECT_EQ(ibv_wc_read_qp_num(sx), a->qp_num);
  EXPECT_GE(ibv_wc_read_completion_ts(sx), t0);
  ibv_end_poll(sx);

  // Several completions in one polling pass, in order.
  for (int i = 0; i < 5; ++i) {
    ibv_sge w{src.addr(), 8, src.mr->lkey};
    ibv_send_wr x = send_wr(IBV_WR_RDMA_WRITE, w);
    x.wr_id = 100 + i;
    x.wr.rdma.rkey = dst.mr->rkey;
    x.wr.rdma.remote_addr = dst.addr();
    ASSERT_EQ(ibv_post_send(a, &x, &bad), 0);
  }
  std::vector<uint64_t> ids;
  uint64_t last_ts = 0;
  for (int tries = 0; tries < 100000 && ids.size() < 5; ++tries) {
    if (ibv_start_poll(sx, &pa) != 0) continue;
    do {
      EXPECT_EQ(sx->status, IBV_WC_SUCCESS);
      EXPECT_EQ(ibv_wc_read_opcode(sx), IBV_WC_RDMA_WRITE);
      EXPECT_GE(ibv_wc_read_completion_ts(sx), last_ts);
      last_ts = ibv_wc_read_completion_ts(sx);
      ids.push_back(sx->wr_id);
    } while (ibv_next_poll(sx) == 0);
    ibv_end_poll(sx);
  }
  EXPECT_EQ(ids, (std::vector<uint64_t>{100, 101, 102, 103, 104}));
  pa.comp_mask = 1;
  EXPECT_EQ(ibv_start_poll(sx, &pa), EINVAL);
}

TEST_F(VerbsExTest, ExtendedCqHasReadersOnlyForWhatItWasCreatedWith) {
  ibv_cq_ex* c = cq_ex(IBV_WC_EX_WITH_BYTE_LEN);
  ASSERT_NE(c, nullptr);
  EXPECT_NE(c->read_byte_len, nullptr);
  EXPECT_EQ(c->read_imm_data, nullptr);
  EXPECT_EQ(c->read_completion_ts, nullptr);
  EXPECT_NE(c->start_poll, nullptr);
  EXPECT_NE(c->read_opcode, nullptr);

  ibv_cq_init_attr_ex a{};
  a.cqe = 16;
  a.wc_flags = IBV_WC_EX_WITH_CVLAN;
  errno = 0;
  EXPECT_EQ(ibv_create_cq_ex(ctx, &a), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
  a.wc_flags = 1ull << 40;
  EXPECT_EQ(ibv_create_cq_ex(ctx, &a), nullptr);
  EXPECT_EQ(errno, EINVAL);
  a.wc_flags = 0;
  a.comp_mask = 1u << 7;
  EXPECT_EQ(ibv_create_cq_ex(ctx, &a), nullptr);
  EXPECT_EQ(errno, EINVAL);
  a.comp_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS;
  a.flags = IBV_CREATE_CQ_ATTR_SINGLE_THREADED;
  ibv_cq_ex* ok = ibv_create_cq_ex(ctx, &a);
  ASSERT_NE(ok, nullptr);
  cqs.push_back(ibv_cq_ex_to_cq(ok));
  a.cqe = 0;
  EXPECT_EQ(ibv_create_cq_ex(ctx, &a), nullptr);
}

// ---- extended QPs: the ibv_wr_* interface -------------------------------------------------

class QpExTest : public VerbsExTest {
 protected:
  void SetUp() override {
    VerbsExTest::SetUp();
    c1 = cq();
    c2 = cq();
    a = qp_ex(c1, c1, kAllOps);
    b = qp(c2, c2);
    ASSERT_TRUE(a && b);
    connect(a, b);
    x = ibv_qp_to_qp_ex(a);
    ASSERT_NE(x, nullptr);
  }
  ibv_cq *c1 = nullptr, *c2 = nullptr;
  ibv_qp *a = nullptr, *b = nullptr;
  ibv_qp_ex* x = nullptr;
};

TEST_F(QpExTest, EveryOperationMovesItsDataByteForByte) {
  const size_t n = 8192;
  Buffer& src = buffer(n);
  Buffer& dst = buffer(4 * n);
  Buffer& rd = buffer(n);
  Buffer& atom = buffer(64);
  fill_random(src.data(), n, 31);
  fill_random(dst.data(), 4 * n, 32);
  fill_random(rd.data(), n, 33);
  uint64_t counter = 1000, swap_target = 55;
  memcpy(dst.data() + 3 * n, &counter, 8);
  memcpy(dst.data() + 3 * n + 8, &swap_target, 8);
  // Receives: one for the send (two pieces), one for send_imm, one for write_imm.
  ibv_sge r1[2] = {{dst.addr(), 3000, dst.mr->lkey}, {dst.addr() + 5000, 3000, dst.mr->lkey}};
  ibv_recv_wr rw[3] = {};
  rw[0].wr_id = 1;
  rw[0].sg_list = r1;
  rw[0].num_sge = 2;
  ibv_sge r2{dst.addr() + n, 4096, dst.mr->lkey};
  rw[1].wr_id = 2;
  rw[1].sg_list = &r2;
  rw[1].num_sge = 1;
  rw[2].wr_id = 3;
  rw[0].next = &rw[1];
  rw[1].next = &rw[2];
  ibv_recv_wr* rbad;
  ASSERT_EQ(ibv_post_recv(b, &rw[0], &rbad), 0);

  ibv_wr_start(x);
  x->wr_flags = IBV_SEND_SIGNALED;
  x->wr_id = 10;  // send with a gather list of three entries
  ibv_wr_send(x);
  ibv_sge g[3] = {{src.addr(), 1000, src.mr->lkey},
                  {src.addr() + 2000, 2500, src.mr->lkey},
                  {src.addr() + 6000, 2000, src.mr->lkey}};
  ibv_wr_set_sge_list(x, 3, g);
  x->wr_id = 11;  // send_imm of inline data from two buffers
  ibv_wr_send_imm(x, htonl(0x5151));
  ibv_data_buf bufs[2] = {{src.data() + 100, 100}, {src.data() + 7000, 56}};
  ibv_wr_set_inline_data_list(x, 2, bufs);
  x->wr_id = 12;  // rdma_write
  ibv_wr_rdma_write(x, dst.mr->rkey, dst.addr() + 2 * n);
  ibv_wr_set_sge(x, src.mr->lkey, src.addr(), 4096);
  x->wr_id = 13;  // rdma_write_imm of inline data
  ibv_wr_rdma_write_imm(x, dst.mr->rkey, dst.addr() + 2 * n + 4096, htonl(0x7777));
  ibv_wr_set_inline_data(x, src.data() + 4096, 200);
  x->wr_id = 14;  // rdma_read
  ibv_wr_rdma_read(x, dst.mr->rkey, dst.addr() + 2 * n + 100);
  ibv_wr_set_sge(x, rd.mr->lkey, rd.addr(), 1500);
  x->wr_id = 15;  // fetch_add
  ibv_wr_atomic_fetch_add(x, dst.mr->rkey, dst.addr() + 3 * n, 7);
  ibv_wr_set_sge(x, atom.mr->lkey, atom.addr(), 8);
  x->wr_id = 16;  // cmp_swp, matching
  ibv_wr_atomic_cmp_swp(x, dst.mr->rkey, dst.addr() + 3 * n + 8, 55, 99);
  ibv_wr_set_sge(x, atom.mr->lkey, atom.addr() + 8, 8);
  x->wr_id = 17;  // cmp_swp, not matching
  ibv_wr_atomic_cmp_swp(x, dst.mr->rkey, dst.addr() + 3 * n + 8, 55, 123);
  ibv_wr_set_sge(x, atom.mr->lkey, atom.addr() + 16, 8);
  // The caller's inline buffers may change once the call returned.
  std::vector<uint8_t> inline_copy(src.data() + 4096, src.data() + 4096 + 200);
  std::vector<uint8_t> list_copy(src.data() + 100, src.data() + 200);
  list_copy.insert(list_copy.end(), src.data() + 7000, src.data() + 7056);
  ASSERT_EQ(ibv_wr_complete(x), 0);

  auto sent = poll(c1, 8);
  ASSERT_EQ(sent.size(), 8u);
  const ibv_wc_opcode want[8] = {IBV_WC_SEND,       IBV_WC_SEND,      IBV_WC_RDMA_WRITE,
                                 IBV_WC_RDMA_WRITE, IBV_WC_RDMA_READ, IBV_WC_FETCH_ADD,
                                 IBV_WC_COMP_SWAP,  IBV_WC_COMP_SWAP};
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(sent[i].status, IBV_WC_SUCCESS) << i;
    EXPECT_EQ(sent[i].wr_id, 10u + i);
    EXPECT_EQ(sent[i].opcode, want[i]) << i;
  }
  auto got = poll(c2, 3);
  ASSERT_EQ(got.size(), 3u);
  // send: 5500 gathered bytes scattered into 3000 + 2500.
  std::vector<uint8_t> gathered(src.data(), src.data() + 1000);
  gathered.insert(gathered.end(), src.data() + 2000, src.data() + 4500);
  gathered.insert(gathered.end(), src.data() + 6000, src.data() + 8000);
  EXPECT_EQ(got[0].byte_len, 5500u);
  EXPECT_EQ(memcmp(dst.data(), gathered.data(), 3000), 0);
  EXPECT_EQ(memcmp(dst.data() + 5000, gathered.data() + 3000, 2500), 0);
  EXPECT_EQ(got[1].byte_len, 156u);
  EXPECT_EQ(ntohl(got[1].imm_data), 0x5151u);
  EXPECT_EQ(memcmp(dst.data() + n, list_copy.data(), 156), 0);
  EXPECT_EQ(got[2].opcode, IBV_WC_RECV_RDMA_WITH_IMM);
  EXPECT_EQ(ntohl(got[2].imm_data), 0x7777u);
  EXPECT_EQ(memcmp(dst.data() + 2 * n, src.data(), 4096), 0);
  EXPECT_EQ(memcmp(dst.data() + 2 * n + 4096, inline_copy.data(), 200), 0);
  EXPECT_EQ(memcmp(rd.data(), dst.data() + 2 * n + 100, 1500), 0);
  uint64_t v;
  memcpy(&v, atom.data(), 8);
  EXPECT_EQ(v, 1000u);
  memcpy(&v, dst.data() + 3 * n, 8);
  EXPECT_EQ(v, 1007u);
  memcpy(&v, atom.data() + 8, 8);
  EXPECT_EQ(v, 55u);
  memcpy(&v, atom.data() + 16, 8);
  EXPECT_EQ(v, 99u);
  memcpy(&v, dst.data() + 3 * n + 8, 8);
  EXPECT_EQ(v, 99u);
}

TEST_F(QpExTest, AbortPostsNothingAndMistakesFailTheWholeBatch) {
  Buffer& src = buffer(4096);
  Buffer& dst = buffer(4096);
  ibv_wr_start(x);
  x->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_rdma_write(x, dst.mr->rkey, dst.addr());
  ibv_wr_set_sge(x, src.mr->lkey, src.addr(), 64);
  ibv_wr_abort(x);
  EXPECT_EQ(poll(c1, 1, 200).size(), 0u);

  // Inline data beyond the QP's max_inline_data.
  ibv_wr_start(x);
  ibv_wr_rdma_write(x, dst.mr->rkey, dst.addr());
  ibv_wr_set_inline_data(x, src.data(), 4096);
  EXPECT_EQ(ibv_wr_complete(x), EINVAL);
  // More entries than max_send_sge.
  ibv_wr_start(x);
  ibv_wr_rdma_write(x, dst.mr->rkey, dst.addr());
  ibv_sge many[5] = {};
  ibv_wr_set_sge_list(x, 5, many);
  EXPECT_EQ(ibv_wr_complete(x), EINVAL);
  // More requests than max_send_wr (64).
  ibv_wr_start(x);
  for (int i = 0; i < 65; ++i) {
    ibv_wr_rdma_write(x, dst.mr->rkey, dst.addr());
    ibv_wr_set_sge(x, src.mr->lkey, src.addr(), 8);
  }
  EXPECT_EQ(ibv_wr_complete(x), ENOMEM);
  // Operations this device does not have.
  ibv_wr_start(x);
  ibv_wr_local_inv(x, 5);
  EXPECT_EQ(ibv_wr_complete(x), EOPNOTSUPP);
  // A setter with no request begun.
  ibv_wr_start(x);
  ibv_wr_set_sge(x, src.mr->lkey, src.addr(), 8);
  EXPECT_EQ(ibv_wr_complete(x), EINVAL);
  EXPECT_EQ(poll(c1, 1, 200).size(), 0u);  // nothing of it was posted
  // An empty batch is fine; so is the next good one.
  ibv_wr_start(x);
  EXPECT_EQ(ibv_wr_complete(x), 0);
  fill_random(src.data(), 64, 41);
  ibv_wr_start(x);
  x->wr_flags = IBV_SEND_SIGNALED;
  x->wr_id = 9;
  ibv_wr_rdma_write(x, dst.mr->rkey, dst.addr());
  ibv_wr_set_sge(x, src.mr->lkey, src.addr(), 64);
  ASSERT_EQ(ibv_wr_complete(x), 0);
  auto w = poll(c1, 1);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0].wr_id, 9u);
  EXPECT_EQ(memcmp(src.data(), dst.data(), 64), 0);
  // A bad rkey fails as a posted request does: in its completion.
  ibv_wr_start(x);
  ibv_wr_rdma_write(x, dst.mr->rkey ^ 0x5a5a, dst.addr());
  ibv_wr_set_sge(x, src.mr->lkey, src.addr(), 64);
  ASSERT_EQ(ibv_wr_complete(x), 0);
  w = poll(c1, 1);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0].status, IBV_WC_REM_ACCESS_ERR);
}

TEST_F(VerbsExTest, OnlyQpsMadeWithSendOpsHaveTheInterface) {
  ibv_cq* c = cq();
  ibv_qp* plain = qp(c, c);
  errno = 0;
  EXPECT_EQ(ibv_qp_to_qp_ex(plain), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
  // An operation not asked for at creation fails the batch.
  ibv_qp* q = qp_ex(c, c, IBV_QP_EX_WITH_SEND);
  ASSERT_NE(q, nullptr);
  ibv_qp_ex* qx = ibv_qp_to_qp_ex(q);
  ASSERT_NE(qx, nullptr);
  ibv_wr_start(qx);
  ibv_wr_rdma_read(qx, 1, 2);
  EXPECT_EQ(ibv_wr_complete(qx), EOPNOTSUPP);

  ibv_qp_init_attr_ex a{};
  a.send_cq = c;
  a.recv_cq = c;
  a.qp_type = IBV_QPT_RC;
  a.cap.max_send_wr = a.cap.max_recv_wr = a.cap.max_send_sge = a.cap.max_recv_sge = 1;
  a.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  a.pd = pd;
  a.send_ops_flags = IBV_QP_EX_WITH_ATOMIC_WRITE;
  errno = 0;
  EXPECT_EQ(ibv_create_qp_ex(ctx, &a), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
  a.qp_type = IBV_QPT_UD;  // no RDMA on UD
  a.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE;
  EXPECT_EQ(ibv_create_qp_ex(ctx, &a), nullptr);
  EXPECT_EQ(errno, EINVAL);
  a.qp_type = IBV_QPT_RC;
  a.comp_mask = IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;  // no PD
  EXPECT_EQ(ibv_create_qp_ex(ctx, &a), nullptr);
  EXPECT_EQ(errno, EINVAL);
  a.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS;
  a.create_flags = IBV_QP_CREATE_SCATTER_FCS;
  EXPECT_EQ(ibv_create_qp_ex(ctx, &a), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
  // Without send_ops_flags: a QP like ibv_create_qp's, its caps written back.
  a.comp_mask = IBV_QP_INIT_ATTR_PD;
  a.cap.max_inline_data = 0;
  ibv_qp* basic = ibv_create_qp_ex(ctx, &a);
  ASSERT_NE(basic, nullptr);
  qps.push_back(basic);
  EXPECT_GE(a.cap.max_inline_data, 1u);
  EXPECT_EQ(ibv_qp_to_qp_ex(basic), nullptr);
}

TEST_F(VerbsExTest, UdSendsWithTheAddressOfEachRequest) {
  ibv_cq* c1 = cq();
  ibv_cq* c2 = cq();
  ibv_qp* a = qp_ex(c1, c1, IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM, IBV_QPT_UD);
  ibv_qp* b = qp(c2, c2, IBV_QPT_UD);
  ASSERT_TRUE(a && b);
  for (ibv_qp* q : {a, b}) {
    ASSERT_EQ(to_init(q), 0);
    ASSERT_EQ(to_rtr(q, 0), 0);
    ASSERT_EQ(to_rts(q), 0);
  }
  ibv_ah_attr aa{};
  aa.port_num = 1;
  aa.is_global = 1;
  ASSERT_EQ(ibv_query_gid(ctx, 1, 0, &aa.grh.dgid), 0);
  ibv_ah* ah = ibv_create_ah(pd, &aa);
  ASSERT_NE(ah, nullptr);
  Buffer& src = buffer(2048);
  Buffer& dst = buffer(2 * (40 + 2048));
  fill_random(src.data(), 2048, 51);
  ASSERT_EQ(post_recv(b, dst, 40 + 2048, 1), 0);
  ibv_sge s2{dst.addr() + 40 + 2048, 40 + 2048, dst.mr->lkey};
  ibv_recv_wr r2{};
  r2.wr_id = 2;
  r2.sg_list = &s2;
  r2.num_sge = 1;
  ibv_recv_wr* rbad;
  ASSERT_EQ(ibv_post_recv(b, &r2, &rbad), 0);

  ibv_qp_ex* x = ibv_qp_to_qp_ex(a);
  ASSERT_NE(x, nullptr);
  ibv_wr_start(x);
  x->wr_flags = IBV_SEND_SIGNALED;
  x->wr_id = 1;
  ibv_wr_send(x);
  ibv_wr_set_ud_addr(x, ah, b->qp_num, 0x11111111);
  ibv_wr_set_sge(x, src.mr->lkey, src.addr(), 2048);
  x->wr_id = 2;
  ibv_wr_send_imm(x, htonl(42));
  ibv_wr_set_ud_addr(x, ah, b->qp_num, 0x22222222);  // wrong qkey: dropped
  ibv_wr_set_sge(x, src.mr->lkey, src.addr(), 100);
  ASSERT_EQ(ibv_wr_complete(x), 0);
  EXPECT_EQ(poll(c1, 2).size(), 2u);
  auto got = poll(c2, 2, 500);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].wr_id, 1u);
  EXPECT_EQ(got[0].byte_len, 40u + 2048u);
  EXPECT_EQ(memcmp(dst.data() + 40, src.data(), 2048), 0);
  EXPECT_EQ(ibv_destroy_ah(ah), 0);
}

}  // namespace
}  // namespace vrdma::testing

namespace vrdma::testing {
namespace {

// Two MRs on one page (as small allocations are), one the receive buffer moved to another PD:
// the receive fails (LOC_PROT_ERR, the sender REM_OP_ERR), the other MR stays whole.
TEST_F(ReregTest, ReceiveIntoAnMrMovedToAnotherPdFails) {
  void* page = nullptr;
  ASSERT_EQ(posix_memalign(&page, 4096, 4096), 0);
  auto* base = static_cast<uint8_t*>(page);
  fill_random(base, 4096, 61);
  ibv_mr* mine = ibv_reg_mr(pd, base, 1024, IBV_ACCESS_LOCAL_WRITE);
  ibv_mr* theirs = ibv_reg_mr(pd, base + 1024, 1024, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_TRUE(mine && theirs);
  ibv_pd* other = ibv_alloc_pd(ctx);
  ASSERT_NE(other, nullptr);
  auto exchange = [&](int seed) {
    ibv_sge r{reinterpret_cast<uint64_t>(base + 1024), 1024, theirs->lkey};
    ibv_recv_wr rw{};
    rw.sg_list = &r;
    rw.num_sge = 1;
    ibv_recv_wr* rbad;
    EXPECT_EQ(ibv_post_recv(b, &rw, &rbad), 0);
    fill_random(base, 512, seed);
    ibv_sge s{reinterpret_cast<uint64_t>(base), 512, mine->lkey};
    ibv_send_wr wr = send_wr(IBV_WR_SEND, s);
    return complete_one(a, wr, c1);
  };
  ASSERT_EQ(ibv_rereg_mr(theirs, IBV_REREG_MR_CHANGE_PD, other, nullptr, 0, 0), 0);
  EXPECT_EQ(exchange(62), IBV_WC_REM_OP_ERR);
  auto w = poll(c2, 1);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0].status, IBV_WC_LOC_PROT_ERR);
  reconnect();
  ASSERT_EQ(ibv_rereg_mr(theirs, IBV_REREG_MR_CHANGE_PD, pd, nullptr, 0, 0), 0);
  ASSERT_EQ(exchange(63), IBV_WC_SUCCESS);
  w = poll(c2, 1);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(memcmp(base, base + 1024, 512), 0);
  EXPECT_EQ(ibv_dereg_mr(mine), 0);
  EXPECT_EQ(ibv_dereg_mr(theirs), 0);
  EXPECT_EQ(ibv_dealloc_pd(other), 0);
  free(page);
}

}  // namespace
}  // namespace vrdma::testing

namespace vrdma::testing {
namespace {

// Moving a QP to RESET removes its completions that still wait in its CQs (and only its own).
TEST_F(ReregTest, ResetRemovesTheQpsWaitingCompletions) {
  Buffer& src = buffer(64);
  Buffer& dst = buffer(64);
  ibv_qp* bystander = qp(c1, c1);
  ASSERT_EQ(post_recv(a, dst, 64, 7), 0);
  ASSERT_EQ(to_err(a), 0);  // flushes the receive into c1
  ASSERT_EQ(to_init(bystander), 0);
  ASSERT_EQ(post_recv(bystander, dst, 64, 8), 0);
  ASSERT_EQ(to_err(bystander), 0);
  reconnect();
  auto w = poll(c1, 2, 300);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0].wr_id, 8u);
  EXPECT_EQ(w[0].status, IBV_WC_WR_FLUSH_ERR);
  ASSERT_EQ(write(src, dst.mr->rkey, dst.addr(), 64, 9), IBV_WC_SUCCESS);
  EXPECT_EQ(memcmp(src.data(), dst.data(), 64), 0);
}

}  // namespace
}  // namespace vrdma::testing

namespace vrdma::testing {
namespace {

// One side brought back from ERR before the other was reset (as rdma-core's tests restate a
// pair): its connection follows the peer's reset to the new object.
TEST_F(ReregTest, ASideRestatedBeforeItsPeerReachesThePeerAfterItsReset) {
  Buffer& src = buffer(4096);
  Buffer& dst = buffer(4096);
  ibv_qp_attr st{};
  st.qp_state = IBV_QPS_ERR;
  ASSERT_EQ(ibv_modify_qp(a, &st, IBV_QP_STATE), 0);
  ASSERT_EQ(ibv_modify_qp(b, &st, IBV_QP_STATE), 0);
  st.qp_state = IBV_QPS_RESET;
  ASSERT_EQ(ibv_modify_qp(a, &st, IBV_QP_STATE), 0);
  ASSERT_EQ(to_init(a), 0);
  ASSERT_EQ(to_rtr(a, b->qp_num), 0);  // b is still in ERR, with its old object
  ASSERT_EQ(to_rts(a), 0);
  ASSERT_EQ(ibv_modify_qp(b, &st, IBV_QP_STATE), 0);
  ASSERT_EQ(to_init(b), 0);
  ASSERT_EQ(to_rtr(b, a->qp_num), 0);
  ASSERT_EQ(to_rts(b), 0);
  ASSERT_EQ(write(src, dst.mr->rkey, dst.addr(), 4096, 71), IBV_WC_SUCCESS);
  EXPECT_EQ(memcmp(src.data(), dst.data(), 4096), 0);
  // And sends into b's new receive queue.
  ASSERT_EQ(post_recv(b, dst, 4096, 5), 0);
  fill_random(src.data(), 1000, 72);
  ibv_sge s{src.addr(), 1000, src.mr->lkey};
  ibv_send_wr wr = send_wr(IBV_WR_SEND, s);
  ASSERT_EQ(complete_one(a, wr, c1), IBV_WC_SUCCESS);
  auto w = poll(c2, 1);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0].wr_id, 5u);
  EXPECT_EQ(memcmp(src.data(), dst.data(), 1000), 0);
}

}  // namespace
}  // namespace vrdma::testing
