// Every opcode through two routers over the fake transport: the data arrives byte for byte,
// and both sides' completions say what happened; many requests stay in order.
#include <arpa/inet.h>

#include <cstring>

#include "router_fake.h"

namespace vrdma::daemon::testing {
namespace {

TEST_F(RoutedRc, SendScattersIntoTheReceiveAndCompletesBothSides) {
  auto data = random_bytes(3000, 1);
  memcpy(m1->ptr + 100, data.data(), data.size());
  // Gathered from two pieces, scattered into three others.
  b->post_recv(77, {m2->sge(0, 1000), m2->sge(5000, 1500), m2->sge(9000, 4000)});
  ibv_sge sge[2] = {m1->sge(100, 1200), m1->sge(1300, 1800)};
  a->post_send(make_wr(11, IBV_WR_SEND, sge, 2));
  auto wcs = send_completions(*a, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].wr_id, 11u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wcs[0].opcode, IBV_WC_SEND);
  EXPECT_EQ(wcs[0].qp_num, a->qpn);
  auto rcs = recv_completions(*b, 1);
  ASSERT_EQ(rcs.size(), 1u);
  EXPECT_EQ(rcs[0].wr_id, 77u);
  EXPECT_EQ(rcs[0].status, shm::kRecvOk);
  EXPECT_EQ(rcs[0].opcode, shm::kRecvSend);
  EXPECT_EQ(rcs[0].byte_len, 3000u);
  EXPECT_EQ(rcs[0].src_qp, a->qpn);
  EXPECT_EQ(rcs[0].flags & shm::kRecvImm, 0);
  EXPECT_EQ(memcmp(m2->ptr, data.data(), 1000), 0);
  EXPECT_EQ(memcmp(m2->ptr + 5000, data.data() + 1000, 1500), 0);
  EXPECT_EQ(memcmp(m2->ptr + 9000, data.data() + 2500, 500), 0);
  EXPECT_EQ(m2->ptr[9500], 0) << "nothing past the message";
  EXPECT_EQ(b->obj->rx_ops.load(), 1u);
  EXPECT_EQ(a->shared->counters.tx_bytes.load(), 3000u);
}

TEST_F(RoutedRc, SendWithImmediateAndInlineSend) {
  auto data = random_bytes(48, 2);
  memcpy(m1->ptr, data.data(), data.size());
  b->post_recv(1, {m2->sge(0, 64)});
  b->post_recv(2, {m2->sge(64, 64)});
  ibv_sge sge = m1->sge(0, 48);
  ibv_send_wr imm = make_wr(5, IBV_WR_SEND_WITH_IMM, &sge, 1);
  imm.imm_data = htonl(0xfeedbeef);
  a->post_send(imm);
  a->post_send(make_wr(6, IBV_WR_SEND, &sge, 1, IBV_SEND_SIGNALED | IBV_SEND_INLINE));
  // The inline copy was taken when posted: changing the buffer now changes nothing.
  memset(m1->ptr, 0xee, 48);
  auto wcs = send_completions(*a, 2);
  ASSERT_EQ(wcs.size(), 2u);
  EXPECT_EQ(wcs[0].wr_id, 5u);
  EXPECT_EQ(wcs[1].wr_id, 6u);
  EXPECT_EQ(wcs[1].status, IBV_WC_SUCCESS);
  auto rcs = recv_completions(*b, 2);
  ASSERT_EQ(rcs.size(), 2u);
  EXPECT_EQ(rcs[0].wr_id, 1u);
  EXPECT_NE(rcs[0].flags & shm::kRecvImm, 0);
  EXPECT_EQ(rcs[0].imm_data, htonl(0xfeedbeef));
  EXPECT_EQ(rcs[1].wr_id, 2u);
  EXPECT_EQ(rcs[1].flags & shm::kRecvImm, 0);
  EXPECT_EQ(rcs[1].byte_len, 48u);
  EXPECT_EQ(memcmp(m2->ptr + 64, data.data(), 48), 0) << "the inline data is what was posted";
}

TEST_F(RoutedRc, RdmaWriteOfOneMebibyteLandsExactly) {
  const size_t n = 1 << 20;
  auto data = random_bytes(n, 3);
  memcpy(m1->ptr, data.data(), n);
  memset(m2->ptr, 0x5c, 2 << 20);
  ibv_sge sge = m1->sge(0, n);
  ibv_send_wr wr = make_wr(9, IBV_WR_RDMA_WRITE, &sge, 1);
  wr.wr.rdma.remote_addr = m2->addr() + 4096 + 3;
  wr.wr.rdma.rkey = m2->key;
  a->post_send(wr);
  auto wcs = send_completions(*a, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wcs[0].opcode, IBV_WC_RDMA_WRITE);
  EXPECT_EQ(memcmp(m2->ptr + 4099, data.data(), n), 0);
  EXPECT_EQ(m2->ptr[4098], 0x5c);
  EXPECT_EQ(m2->ptr[4099 + n], 0x5c);
  EXPECT_TRUE(b->poll_recv().empty()) << "a WRITE consumes no receive";
  EXPECT_EQ(b->obj->rx_bytes.load(), n);
}

TEST_F(RoutedRc, RdmaWriteWithImmediateConsumesAReceive) {
  auto data = random_bytes(20000, 4);
  memcpy(m1->ptr, data.data(), data.size());
  b->post_recv(31, {});
  ibv_sge sge = m1->sge(0, 20000);
  ibv_send_wr wr = make_wr(8, IBV_WR_RDMA_WRITE_WITH_IMM, &sge, 1);
  wr.imm_data = htonl(1234);
  wr.wr.rdma.remote_addr = m2->addr() + 100;
  wr.wr.rdma.rkey = m2->key;
  a->post_send(wr);
  auto wcs = send_completions(*a, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wcs[0].opcode, IBV_WC_RDMA_WRITE);
  auto rcs = recv_completions(*b, 1);
  ASSERT_EQ(rcs.size(), 1u);
  EXPECT_EQ(rcs[0].wr_id, 31u);
  EXPECT_EQ(rcs[0].opcode, shm::kRecvWriteImm);
  EXPECT_EQ(rcs[0].imm_data, htonl(1234));
  EXPECT_EQ(rcs[0].byte_len, 20000u);
  EXPECT_EQ(memcmp(m2->ptr + 100, data.data(), data.size()), 0);
}

TEST_F(RoutedRc, RdmaReadBringsTheRemoteBytesBack) {
  const size_t n = 300000;
  auto data = random_bytes(n, 5);
  memcpy(m2->ptr + 7, data.data(), n);
  // Scattered into two pieces.
  ibv_sge sge[2] = {m1->sge(0, 100000), m1->sge(500000, n - 100000)};
  ibv_send_wr wr = make_wr(4, IBV_WR_RDMA_READ, sge, 2);
  wr.wr.rdma.remote_addr = m2->addr() + 7;
  wr.wr.rdma.rkey = m2->key;
  a->post_send(wr);
  auto wcs = send_completions(*a, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].wr_id, 4u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wcs[0].opcode, IBV_WC_RDMA_READ);
  EXPECT_EQ(wcs[0].byte_len, n);
  EXPECT_EQ(memcmp(m1->ptr, data.data(), 100000), 0);
  EXPECT_EQ(memcmp(m1->ptr + 500000, data.data() + 100000, n - 100000), 0);
}

TEST_F(RoutedRc, AtomicsReturnTheOldValueAndChangeTheTarget) {
  uint64_t* target = reinterpret_cast<uint64_t*>(m2->ptr + 64);
  *target = 1000;
  ibv_sge r0 = m1->sge(0, 8), r1 = m1->sge(8, 8), r2 = m1->sge(16, 8);
  auto atomic = [&](uint64_t id, ibv_wr_opcode op, ibv_sge* s, uint64_t cmp_add, uint64_t swap) {
    ibv_send_wr wr = make_wr(id, op, s, 1);
    wr.wr.atomic.remote_addr = m2->addr() + 64;
    wr.wr.atomic.rkey = m2->key;
    wr.wr.atomic.compare_add = cmp_add;
    wr.wr.atomic.swap = swap;
    a->post_send(wr);
  };
  atomic(1, IBV_WR_ATOMIC_FETCH_AND_ADD, &r0, 5, 0);    // 1000 -> 1005
  atomic(2, IBV_WR_ATOMIC_CMP_AND_SWP, &r1, 1005, 77);  // 1005 -> 77
  atomic(3, IBV_WR_ATOMIC_CMP_AND_SWP, &r2, 1005, 99);  // no match: stays 77
  auto wcs = send_completions(*a, 3);
  ASSERT_EQ(wcs.size(), 3u);
  EXPECT_EQ(wcs[0].opcode, IBV_WC_FETCH_ADD);
  EXPECT_EQ(wcs[1].opcode, IBV_WC_COMP_SWAP);
  for (auto& wc : wcs) {
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.byte_len, 8u);
  }
  uint64_t old[3];
  memcpy(old, m1->ptr, sizeof(old));
  EXPECT_EQ(old[0], 1000u);
  EXPECT_EQ(old[1], 1005u);
  EXPECT_EQ(old[2], 77u);
  EXPECT_EQ(*target, 77u);
}

TEST_F(RoutedRc, SendsWithMoreQueuedBehindThemSaySoToTheReceiver) {
  // Three sends posted at once: the first two had more of the QP's requests behind them when
  // the router carried them, the last had none; the receiver's poller reads that as a hint
  // (engine/poll_backoff.h). A send posted alone, later, has none either.
  for (int i = 0; i < 4; ++i) b->post_recv(100 + i, {m2->sge(uint64_t(i) * 64, 64)});
  ibv_sge sge = m1->sge(0, 8);
  for (int i = 0; i < 3; ++i) a->post_send(make_wr(i, IBV_WR_SEND, &sge, 1));
  auto rcs = recv_completions(*b, 3);
  ASSERT_EQ(rcs.size(), 3u);
  EXPECT_EQ(rcs[0].flags & shm::kRecvMore, shm::kRecvMore);
  EXPECT_EQ(rcs[1].flags & shm::kRecvMore, shm::kRecvMore);
  EXPECT_EQ(rcs[2].flags & shm::kRecvMore, 0);
  EXPECT_EQ(send_completions(*a, 3).size(), 3u);
  a->post_send(make_wr(3, IBV_WR_SEND, &sge, 1));
  rcs = recv_completions(*b, 1);
  ASSERT_EQ(rcs.size(), 1u);
  EXPECT_EQ(rcs[0].flags & shm::kRecvMore, 0);
}

TEST_F(RoutedRc, ManyRequestsStayInOrder) {
  // 600 requests through a queue of 64: WRITEs of a counter into successive slots, and every
  // tenth a SEND carrying its number; completions come back in posting order.
  const int kCount = 600;
  for (int i = 0; i < 64; ++i) b->post_recv(1000 + i, {m2->sge(1 << 20 | uint64_t(i) * 64, 64)});
  int posted = 0, completed = 0, sends = 0, received = 0;
  uint64_t next_recv = 64;
  bool order_ok = true;
  std::vector<uint32_t> recv_values;
  ASSERT_TRUE(run_until(
      [&] {
        for (auto& wc : a->poll_send()) {
          order_ok &= wc.wr_id == uint64_t(completed) && wc.status == IBV_WC_SUCCESS;
          ++completed;
        }
        for (auto& rc : b->poll_recv()) {
          uint32_t v;
          memcpy(&v, m2->ptr + (1 << 20) + (rc.wr_id - 1000) % 64 * 64, 4);
          recv_values.push_back(v);
          ++received;
          b->post_recv(1000 + next_recv, {m2->sge(1 << 20 | (next_recv % 64) * 64, 64)});
          ++next_recv;
        }
        while (posted < kCount && a->outstanding() < 64) {
          uint32_t v = static_cast<uint32_t>(posted);
          memcpy(m1->ptr + uint64_t(posted) * 4, &v, 4);
          ibv_sge sge = m1->sge(uint64_t(posted) * 4, 4);
          if (posted % 10 == 9) {
            a->post_send(make_wr(posted, IBV_WR_SEND, &sge, 1));
            ++sends;
          } else {
            ibv_send_wr wr = make_wr(posted, IBV_WR_RDMA_WRITE, &sge, 1);
            wr.wr.rdma.remote_addr = m2->addr() + uint64_t(posted) * 4;
            wr.wr.rdma.rkey = m2->key;
            a->post_send(wr);
          }
          ++posted;
        }
        return completed == kCount && received == sends;
      },
      200000));
  EXPECT_TRUE(order_ok);
  ASSERT_EQ(recv_values.size(), size_t(kCount / 10));
  for (size_t i = 0; i < recv_values.size(); ++i) EXPECT_EQ(recv_values[i], i * 10 + 9);
  for (int i = 0; i < kCount; ++i) {
    if (i % 10 == 9) continue;
    uint32_t v;
    memcpy(&v, m2->ptr + uint64_t(i) * 4, 4);
    ASSERT_EQ(v, uint32_t(i)) << i;
  }
}

TEST_F(RoutedRc, UnsignaledRequestsFreeTheirSlotsWithoutACompletion) {
  ibv_sge sge = m1->sge(0, 8);
  for (int i = 0; i < 10; ++i) {
    ibv_send_wr wr = make_wr(i, IBV_WR_RDMA_WRITE, &sge, 1, i == 9 ? IBV_SEND_SIGNALED : 0);
    wr.wr.rdma.remote_addr = m2->addr();
    wr.wr.rdma.rkey = m2->key;
    a->post_send(wr);
  }
  auto wcs = send_completions(*a, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].wr_id, 9u);
  EXPECT_EQ(a->outstanding(), 0u);
  run(100);
  EXPECT_TRUE(a->poll_send().empty());
}

}  // namespace
}  // namespace vrdma::daemon::testing
