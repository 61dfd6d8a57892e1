// Verbs semantics through the drop-in libibverbs: device attributes, every
// opcode with data checked, and the error completions hardware gives.
#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <linux/userfaultfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include <nlohmann/json.hpp>

#include "counter_writer.h"
#include "verbs_fixture.h"

namespace vrdma::testing {
namespace {

TEST_F(VerbsTest, DeviceReportsRoceV2PortAndMappedGid) {
  ibv_device_attr da;
  ASSERT_EQ(ibv_query_device(ctx, &da), 0);
  EXPECT_EQ(da.vendor_id, 0xFFFFFFu);
  EXPECT_EQ(da.vendor_part_id, 0u);
  EXPECT_GT(da.max_qp_rd_atom, 0);
  EXPECT_EQ(da.phys_port_cnt, 1);
  ibv_port_attr pa;
  ASSERT_EQ(ibv_query_port(ctx, 1, &pa), 0);
  EXPECT_EQ(pa.state, IBV_PORT_ACTIVE);
  EXPECT_EQ(pa.active_mtu, IBV_MTU_4096);
  EXPECT_EQ(pa.link_layer, IBV_LINK_LAYER_ETHERNET);
  ibv_gid gid;
  ASSERT_EQ(ibv_query_gid(ctx, 1, 0, &gid), 0);
  EXPECT_EQ(gid.raw[10], 0xff);
  EXPECT_EQ(gid.raw[11], 0xff);
  uint32_t ip;
  memcpy(&ip, gid.raw + 12, 4);
  EXPECT_EQ(ip, daemon::testing::expected_ipv4());
  ibv_gid_entry e;
  ASSERT_EQ(ibv_query_gid_ex(ctx, 1, 0, &e, 0), 0);
  EXPECT_EQ(e.gid_type, IBV_GID_TYPE_ROCE_V2);
  EXPECT_EQ(ibv_query_gid_ex(ctx, 1, 1, &e, 0), ENODATA);
}

TEST_F(VerbsTest, QpnsAreUniqueAndKeysDiffer) {
  ibv_cq* c = cq();
  ibv_qp* a = qp(c, c);
  ibv_qp* b = qp(c, c);
  EXPECT_NE(a->qp_num, b->qp_num);
  Buffer& x = buffer(4096);
  Buffer& y = buffer(4096);
  EXPECT_NE(x.mr->rkey, y.mr->rkey);
  EXPECT_EQ(x.mr->lkey, x.mr->rkey);
}

TEST_F(VerbsTest, RegisteredMemoryKeepsItsContents) {
  std::vector<uint8_t> mem(3 * 4096 + 123);
  fill_random(mem.data(), mem.size(), 7);
  std::vector<uint8_t> copy = mem;
  ibv_mr* mr = ibv_reg_mr(pd, mem.data() + 5, mem.size() - 10, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  EXPECT_EQ(mem, copy);
  // Overlapping registrations share the backing.
  ibv_mr* mr2 = ibv_reg_mr(pd, mem.data() + 4096, 4096, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr2, nullptr);
  EXPECT_EQ(mem, copy);
  EXPECT_EQ(ibv_dereg_mr(mr2), 0);
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
  EXPECT_EQ(mem, copy);
}

// Memory that cannot be read (a page not mapped, or mapped PROT_NONE, inside the range) is not
// registered: EFAULT, as the kernel answers for pages it cannot pin, and nothing around it
// moves or changes. Small ranges and large ones are checked in different ways (the kernel copies
// a small one; the process's mappings are read for a large one): both sizes.
TEST_F(VerbsTest, UnreadableMemoryIsNotRegistered) {
  constexpr size_t kPage = 4096;
  for (size_t pages : {4, 64}) {
    SCOPED_TRACE(pages);
    const size_t len = pages * kPage;
    auto* base = static_cast<uint8_t*>(
        ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    ASSERT_NE(base, MAP_FAILED);
    fill_random(base, len, static_cast<int>(pages));
    std::vector<uint8_t> copy(base, base + len);
    uint8_t* mid = base + (pages / 2) * kPage;
    ASSERT_EQ(::mprotect(mid, kPage, PROT_NONE), 0);
    errno = 0;
    EXPECT_EQ(ibv_reg_mr(pd, base, len, IBV_ACCESS_LOCAL_WRITE), nullptr);
    EXPECT_EQ(errno, EFAULT);
    ASSERT_EQ(::munmap(mid, kPage), 0);  // a hole
    errno = 0;
    EXPECT_EQ(ibv_reg_mr(pd, base, len, IBV_ACCESS_LOCAL_WRITE), nullptr);
    EXPECT_EQ(errno, EFAULT);
    // The readable part on either side registers, its contents kept.
    ibv_mr* before = ibv_reg_mr(pd, base, mid - base, IBV_ACCESS_LOCAL_WRITE);
    ibv_mr* after = ibv_reg_mr(pd, mid + kPage, len - (mid + kPage - base), IBV_ACCESS_LOCAL_WRITE);
    ASSERT_NE(before, nullptr) << strerror(errno);
    ASSERT_NE(after, nullptr) << strerror(errno);
    EXPECT_EQ(0, memcmp(base, copy.data(), mid - base));
    EXPECT_EQ(0,
              memcmp(mid + kPage, copy.data() + (mid + kPage - base), len - (mid + kPage - base)));
    EXPECT_EQ(ibv_dereg_mr(before), 0);
    EXPECT_EQ(ibv_dereg_mr(after), 0);
    EXPECT_EQ(0, memcmp(base, copy.data(), mid - base));
    ::munmap(base, mid - base);
    ::munmap(mid + kPage, len - (mid + kPage - base));
  }
}

// A registration moves whole pages, and the objects around a buffer share them: another thread
// of the process writing its own data in those pages while they move must lose nothing. Here a
// thread bumps a counter in the first page of the range and checks each time that its last
// value is still there, while the main thread registers and deregisters the buffer next to it
// (each of which moves the pages).
TEST_F(VerbsTest, WritesOfOtherThreadsToPagesBeingMovedAreKept) {
  // The hold needs userfaultfd (the system call, or /dev/userfaultfd); without it the moves are
  // unprotected, as documented, and such writes can be lost.
  int probe = static_cast<int>(::syscall(SYS_userfaultfd, O_CLOEXEC));
  if (probe < 0) probe = ::open("/dev/userfaultfd", O_RDWR | O_CLOEXEC);
  if (probe < 0) GTEST_SKIP() << "no userfaultfd here: " << strerror(errno);
  ::close(probe);
  constexpr size_t kPages = 4;
  auto* region = static_cast<uint8_t*>(::mmap(nullptr, kPages * 4096, PROT_READ | PROT_WRITE,
                                              MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(region, MAP_FAILED);
  CounterWriter writer(reinterpret_cast<volatile uint64_t*>(region));
  for (int i = 0; i < 200; ++i) {
    ibv_mr* mr = ibv_reg_mr(pd, region + 64, 3 * 4096, IBV_ACCESS_LOCAL_WRITE);
    ASSERT_NE(mr, nullptr) << strerror(errno);
    ASSERT_EQ(ibv_dereg_mr(mr), 0);
  }
  writer.stop();
  EXPECT_EQ(writer.lost(), 0) << "of " << writer.bumps() << " writes";
  ::munmap(region, kPages * 4096);
}

// vrdma status tells the operator how each process keeps its other threads' writes while its
// pages move: the library says so when it opens the device, as the write hold found it.
TEST_F(VerbsTest, StatusSaysHowThisProcessKeepsWritesWhilePagesMove) {
  // What the library should have found, in its order: the system call with faults taken in the
  // kernel too, /dev/userfaultfd, the system call for user mode only; each offering
  // write-protect faults.
  auto offers_wp = [](int fd) {
    if (fd < 0) return false;
    uffdio_api api{};
    api.api = UFFD_API;
    bool ok = ::ioctl(fd, UFFDIO_API, &api) == 0 && (api.features & UFFD_FEATURE_PAGEFAULT_FLAG_WP);
    ::close(fd);
    return ok;
  };
  const char* expected = "none";
  int dev = ::open("/dev/userfaultfd", O_RDWR | O_CLOEXEC);
  if (offers_wp(static_cast<int>(::syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK))))
    expected = "userfaultfd";
  else if (dev >= 0 && offers_wp(::ioctl(dev, _IO(0xAA, 0x00), O_CLOEXEC | O_NONBLOCK)))
    expected = "/dev/userfaultfd";
  else if (offers_wp(static_cast<int>(
               ::syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY))))
    expected = "userfaultfd-user-only";
  if (dev >= 0) ::close(dev);
  auto cli = daemon::testing::Conn::open(shared_daemon().socket());
  cli.hello(proto::ClientKind::kCli);
  auto s = nlohmann::json::parse(cli.status());
  int verbs_clients = 0;
  for (const auto& c : s["clients"]) {
    if (c["pid"] != ::getpid() || c["kind"] != "verbs") continue;
    EXPECT_EQ(c["page_move_guard"], expected);
    ++verbs_clients;
  }
  EXPECT_GE(verbs_clients, 1);
}

// A peer's RDMA writes into an MR while its owner registers and deregisters another MR over the
// same pages (which moves them to new backings): every write lands where the owner sees it.
TEST_F(VerbsTest, PeerWritesDuringANeighboursRegistrationAreKept) {
  ibv_cq* c = cq();
  ibv_qp* a = qp(c, c);
  ibv_qp* b = qp(c, c);
  connect(a, b);
  constexpr size_t kPages = 4;
  auto* region = static_cast<uint8_t*>(::mmap(nullptr, kPages * 4096, PROT_READ | PROT_WRITE,
                                              MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(region, MAP_FAILED);
  // x covers pages 0..2; the neighbour comes and goes over pages 2..3.
  ibv_mr* x = ibv_reg_mr(pd, region, 3 * 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  ASSERT_NE(x, nullptr);
  Buffer& src = buffer(8);
  constexpr int kSlots = 256;
  auto* slots = reinterpret_cast<volatile uint64_t*>(region + 2 * 4096);
  std::atomic<bool> stop{false};
  std::atomic<int> failed{0};
  std::vector<uint64_t> last(kSlots, 0);
  std::thread writer([&] {
    for (uint64_t i = 1; !stop.load(std::memory_order_relaxed) && i < 2'000'000; ++i) {
      int slot = static_cast<int>(i % kSlots);
      memcpy(src.data(), &i, 8);
      ibv_sge sg{src.addr(), 8, src.mr->lkey};
      ibv_send_wr wr = send_wr(IBV_WR_RDMA_WRITE, sg);
      wr.wr.rdma.remote_addr = reinterpret_cast<uint64_t>(region + 2 * 4096) + slot * 8;
      wr.wr.rdma.rkey = x->rkey;
      ibv_wc_status st = complete_one(a, wr, c);
      if (st != IBV_WC_SUCCESS) {
        failed.fetch_add(1);
        ADD_FAILURE() << "write " << i << ": " << ibv_wc_status_str(st);
        return;
      }
      last[slot] = i;
    }
  });
  for (int i = 0; i < 100; ++i) {
    ibv_mr* y = ibv_reg_mr(pd, region + 2 * 4096 + 512, 4096, IBV_ACCESS_LOCAL_WRITE);
    ASSERT_NE(y, nullptr) << strerror(errno);
    ASSERT_EQ(ibv_dereg_mr(y), 0);
  }
  stop = true;
  writer.join();
  EXPECT_EQ(failed.load(), 0);
  int lost = 0;
  for (int s = 0; s < kSlots; ++s) lost += slots[s] != last[s];
  EXPECT_EQ(lost, 0) << "slots whose last write is not there";
  EXPECT_EQ(ibv_dereg_mr(x), 0);
  ::munmap(region, kPages * 4096);
}

TEST_F(VerbsTest, RemoteWriteWithoutLocalWriteIsRejected) {
  std::vector<uint8_t> mem(4096);
  errno = 0;
  EXPECT_EQ(ibv_reg_mr(pd, mem.data(), mem.size(), IBV_ACCESS_REMOTE_WRITE), nullptr);
  EXPECT_EQ(errno, EINVAL);
}

struct OpCase {
  ibv_wr_opcode op;
  size_t size;
  int nsge;
};

class OpcodeTest : public VerbsTest, public ::testing::WithParamInterface<OpCase> {};

TEST_P(OpcodeTest, DataArrivesByteForByte) {
  const OpCase& p = GetParam();
  ibv_cq* c1 = cq();
  ibv_cq* c2 = cq();
  ibv_qp* a = qp(c1, c1);
  ibv_qp* b = qp(c2, c2);
  connect(a, b);
  Buffer& src = buffer(p.size + 64);
  Buffer& dst = buffer(p.size + 64);
  fill_random(src.data(), p.size, static_cast<uint32_t>(p.size * 31 + p.op));
  fill_random(dst.data(), p.size, 99);
  bool read = p.op == IBV_WR_RDMA_READ;
  bool recv = p.op == IBV_WR_SEND || p.op == IBV_WR_SEND_WITH_IMM ||
              p.op == IBV_WR_RDMA_WRITE_WITH_IMM;
  if (recv) {
    // The receive side scatters into as many pieces as the sender gathers from.
    ibv_sge rs[4];
    size_t piece = p.size / p.nsge;
    for (int i = 0; i < p.nsge; ++i)
      rs[i] = {dst.addr() + i * piece, static_cast<uint32_t>(i + 1 == p.nsge ? p.size - i * piece : piece),
               dst.mr->lkey};
    ibv_recv_wr rwr{};
    rwr.wr_id = 77;
    rwr.sg_list = rs;
    rwr.num_sge = p.op == IBV_WR_RDMA_WRITE_WITH_IMM ? 0 : p.nsge;
    ibv_recv_wr* bad;
    ASSERT_EQ(ibv_post_recv(b, &rwr, &bad), 0);
  }
  Buffer& local = read ? dst : src;
  Buffer& remote = read ? src : dst;
  ibv_sge sg[4];
  size_t piece = p.size / p.nsge;
  for (int i = 0; i < p.nsge; ++i)
    sg[i] = {local.addr() + i * piece,
             static_cast<uint32_t>(i + 1 == p.nsge ? p.size - i * piece : piece), local.mr->lkey};
  ibv_send_wr wr{};
  wr.wr_id = 42;
  wr.opcode = p.op;
  wr.sg_list = sg;
  wr.num_sge = p.nsge;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.imm_data = htonl(0xabcdef);
  wr.wr.rdma.remote_addr = remote.addr();
  wr.wr.rdma.rkey = remote.mr->rkey;
  ibv_send_wr* bad;
  ASSERT_EQ(ibv_post_send(a, &wr, &bad), 0);
  auto wcs = poll(c1, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS) << ibv_wc_status_str(wcs[0].status);
  EXPECT_EQ(wcs[0].wr_id, 42u);
  EXPECT_EQ(wcs[0].qp_num, a->qp_num);
  EXPECT_EQ(memcmp(src.data(), dst.data(), p.size), 0);
  if (recv) {
    auto r = poll(c2, 1);
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0].status, IBV_WC_SUCCESS);
    EXPECT_EQ(r[0].wr_id, 77u);
    EXPECT_EQ(r[0].byte_len, p.size);
    EXPECT_EQ(r[0].src_qp, a->qp_num);
    bool imm = p.op != IBV_WR_SEND;
    EXPECT_EQ(!!(r[0].wc_flags & IBV_WC_WITH_IMM), imm);
    if (imm) {
      EXPECT_EQ(ntohl(r[0].imm_data), 0xabcdefu);
    }
    EXPECT_EQ(r[0].opcode, p.op == IBV_WR_RDMA_WRITE_WITH_IMM ? IBV_WC_RECV_RDMA_WITH_IMM
                                                               : IBV_WC_RECV);
  } else {
    EXPECT_TRUE(poll(c2, 1, 50).empty());
  }
}

std::vector<OpCase> op_cases() {
  std::vector<OpCase> v;
  for (ibv_wr_opcode op : {IBV_WR_SEND, IBV_WR_SEND_WITH_IMM, IBV_WR_RDMA_WRITE,
                           IBV_WR_RDMA_WRITE_WITH_IMM, IBV_WR_RDMA_READ})
    for (size_t size : {1ul, 4096ul, 65536ul, 1ul << 20})
      for (int nsge : {1, 3}) {
        if (nsge > static_cast<int>(size)) continue;
        v.push_back({op, size, nsge});
      }
  return v;
}

INSTANTIATE_TEST_SUITE_P(AllOps, OpcodeTest, ::testing::ValuesIn(op_cases()),
                         [](const auto& info) {
                           return std::string(info.param.op == IBV_WR_SEND            ? "Send"
                                              : info.param.op == IBV_WR_SEND_WITH_IMM ? "SendImm"
                                              : info.param.op == IBV_WR_RDMA_WRITE    ? "Write"
                                              : info.param.op == IBV_WR_RDMA_READ     ? "Read"
                                                                                      : "WriteImm") +
                                  "_" + std::to_string(info.param.size) + "B_" +
                                  std::to_string(info.param.nsge) + "sge";
                         });

TEST_F(VerbsTest, AtomicsReturnTheOldValue) {
  ibv_cq* c1 = cq();
  ibv_cq* c2 = cq();
  ibv_qp* a = qp(c1, c1);
  ibv_qp* b = qp(c2, c2);
  connect(a, b);
  Buffer& target = buffer(64);
  Buffer& result = buffer(64);
  uint64_t v = 1000;
  memcpy(target.data() + 8, &v, 8);
  ibv_sge sg{result.addr(), 8, result.mr->lkey};
  ibv_send_wr wr{};
  wr.sg_list = &sg;
  wr.num_sge = 1;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
  wr.wr.atomic.remote_addr = target.addr() + 8;
  wr.wr.atomic.rkey = target.mr->rkey;
  wr.wr.atomic.compare_add = 5;
  ibv_send_wr* bad;
  ASSERT_EQ(ibv_post_send(a, &wr, &bad), 0);
  auto w = poll(c1, 1);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(w[0].opcode, IBV_WC_FETCH_ADD);
  uint64_t got;
  memcpy(&got, result.data(), 8);
  EXPECT_EQ(got, 1000u);
  memcpy(&got, target.data() + 8, 8);
  EXPECT_EQ(got, 1005u);
  // Compare-and-swap: a wrong compare value leaves memory alone.
  wr.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
  wr.wr.atomic.compare_add = 1;
  wr.wr.atomic.swap = 7;
  ASSERT_EQ(ibv_post_send(a, &wr, &bad), 0);
  ASSERT_EQ(poll(c1, 1).size(), 1u);
  memcpy(&got, target.data() + 8, 8);
  EXPECT_EQ(got, 1005u);
  wr.wr.atomic.compare_add = 1005;
  ASSERT_EQ(ibv_post_send(a, &wr, &bad), 0);
  w = poll(c1, 1);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0].opcode, IBV_WC_COMP_SWAP);
  memcpy(&got, target.data() + 8, 8);
  EXPECT_EQ(got, 7u);
  memcpy(&got, result.data(), 8);
  EXPECT_EQ(got, 1005u);
  // Misaligned target.
  wr.wr.atomic.remote_addr = target.addr() + 3;
  ASSERT_EQ(ibv_post_send(a, &wr, &bad), 0);
  w = poll(c1, 1);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0].status, IBV_WC_REM_INV_REQ_ERR);
}

TEST_F(VerbsTest, InlineSendNeedsNoRegisteredBuffer) {
  ibv_cq* c1 = cq();
  ibv_cq* c2 = cq();
  ibv_qp* a = qp(c1, c1, IBV_QPT_RC, nullptr, 256);
  ibv_qp* b = qp(c2, c2);
  connect(a, b);
  Buffer& dst = buffer(256);
  ASSERT_EQ(post_recv(b, dst, 256), 0);
  char msg[200];
  fill_random(reinterpret_cast<uint8_t*>(msg), sizeof(msg), 5);
  ibv_sge sg{reinterpret_cast<uint64_t>(msg), sizeof(msg), 0};
  ibv_send_wr wr = send_wr(IBV_WR_SEND, sg, IBV_SEND_INLINE | IBV_SEND_SIGNALED);
  ibv_send_wr* bad;
  ASSERT_EQ(ibv_post_send(a, &wr, &bad), 0);
  ASSERT_EQ(poll(c1, 1).size(), 1u);
  auto r = poll(c2, 1);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].byte_len, sizeof(msg));
  EXPECT_EQ(memcmp(dst.data(), msg, sizeof(msg)), 0);
  // Larger than the QP's inline capacity: rejected at post time.
  char big[1024] = {};
  sg = {reinterpret_cast<uint64_t>(big), sizeof(big), 0};
  EXPECT_EQ(ibv_post_send(a, &wr, &bad), EINVAL);
  EXPECT_EQ(bad, &wr);
}

TEST_F(VerbsTest, UnsignaledSendsCompleteSilently) {
  ibv_cq* c1 = cq();
  ibv_cq* c2 = cq();
  ibv_qp* a = qp(c1, c1);
  ibv_qp* b = qp(c2, c2);
  connect(a, b);
  Buffer& src = buffer(4096);
  Buffer& dst = buffer(4096);
  ibv_sge sg{src.addr(), 64, src.mr->lkey};
  ibv_send_wr wr[4] = {};
  for (int i = 0; i < 4; ++i) {
    wr[i].wr_id = i;
    wr[i].opcode = IBV_WR_RDMA_WRITE;
    wr[i].sg_list = &sg;
    wr[i].num_sge = 1;
    wr[i].wr.rdma.remote_addr = dst.addr();
    wr[i].wr.rdma.rkey = dst.mr->rkey;
    wr[i].next = i < 3 ? &wr[i + 1] : nullptr;
  }
  wr[3].send_flags = IBV_SEND_SIGNALED;
  ibv_send_wr* bad;
  ASSERT_EQ(ibv_post_send(a, wr, &bad), 0);
  auto w = poll(c1, 4, 200);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0].wr_id, 3u);
}

TEST_F(VerbsTest, PostingInWrongStateFails) {
  ibv_cq* c = cq();
  ibv_qp* a = qp(c, c);
  Buffer& src = buffer(64);
  ibv_sge sg{src.addr(), 8, src.mr->lkey};
  ibv_send_wr wr = send_wr(IBV_WR_SEND, sg, 0);
  ibv_send_wr* bad = nullptr;
  EXPECT_EQ(ibv_post_send(a, &wr, &bad), EINVAL);  // RESET
  EXPECT_EQ(bad, &wr);
  ibv_recv_wr rwr{};
  ibv_recv_wr* rbad;
  EXPECT_EQ(ibv_post_recv(a, &rwr, &rbad), EINVAL);  // RESET
  ASSERT_EQ(to_init(a), 0);
  EXPECT_EQ(ibv_post_send(a, &wr, &bad), EINVAL);  // INIT
  EXPECT_EQ(ibv_post_recv(a, &rwr, &rbad), 0);      // receives may be posted in INIT
  // Illegal transitions and missing attributes.
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_RTS;
  EXPECT_EQ(ibv_modify_qp(a, &attr, IBV_QP_STATE), EINVAL);
  attr.qp_state = IBV_QPS_RTR;
  EXPECT_EQ(ibv_modify_qp(a, &attr, IBV_QP_STATE), EINVAL);
  EXPECT_EQ(a->state, IBV_QPS_INIT);
}

class ErrorTest : public VerbsTest {
 protected:
  void SetUp() override {
    VerbsTest::SetUp();
    c1 = cq();
    c2 = cq();
    a = qp(c1, c1);
    b = qp(c2, c2);
  }
  ibv_send_wr write_wr(ibv_sge& sg, uint64_t raddr, uint32_t rkey) {
    ibv_send_wr wr{};
    wr.wr_id = 9;
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.sg_list = &sg;
    wr.num_sge = 1;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = raddr;
    wr.wr.rdma.rkey = rkey;
    return wr;
  }
  ibv_qp_state state(ibv_qp* q) {
    ibv_qp_attr attr;
    ibv_qp_init_attr init;
    ibv_query_qp(q, &attr, IBV_QP_STATE, &init);
    return attr.qp_state;
  }
  ibv_cq *c1, *c2;
  ibv_qp *a, *b;
};

TEST_F(ErrorTest, BadRkeyIsRemoteAccessErrorAndFlushesTheRest) {
  connect(a, b);
  Buffer& src = buffer(4096);
  Buffer& dst = buffer(4096);
  ibv_sge sg{src.addr(), 64, src.mr->lkey};
  ibv_send_wr wr = write_wr(sg, dst.addr(), dst.mr->rkey ^ 0x1000);
  ibv_send_wr wr2 = write_wr(sg, dst.addr(), dst.mr->rkey);
  wr2.wr_id = 10;
  ibv_send_wr* bad;
  ASSERT_EQ(ibv_post_send(a, &wr, &bad), 0);
  auto w = poll(c1, 1);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0].status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(state(a), IBV_QPS_ERR);
  ASSERT_EQ(ibv_post_send(a, &wr2, &bad), 0);
  w = poll(c1, 1);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(w[0].wr_id, 10u);
}

TEST_F(ErrorTest, OutOfBoundsIsRemoteAccessError) {
  connect(a, b);
  Buffer& src = buffer(8192);
  Buffer& dst = buffer(4096);
  ibv_sge sg{src.addr(), 128, src.mr->lkey};
  ibv_send_wr wr = write_wr(sg, dst.addr() + 4096 - 64, dst.mr->rkey);
  EXPECT_EQ(complete_one(a, wr, c1), IBV_WC_REM_ACCESS_ERR);
}

TEST_F(ErrorTest, MissingRemoteRightsIsRemoteAccessError) {
  connect(a, b);
  Buffer& src = buffer(4096);
  Buffer& ro = buffer(4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
  ibv_sge sg{src.addr(), 64, src.mr->lkey};
  ibv_send_wr wr = write_wr(sg, ro.addr(), ro.mr->rkey);
  EXPECT_EQ(complete_one(a, wr, c1), IBV_WC_REM_ACCESS_ERR);
}

TEST_F(ErrorTest, BadLkeyIsLocalProtectionError) {
  connect(a, b);
  Buffer& src = buffer(4096);
  Buffer& dst = buffer(4096);
  ibv_sge sg{src.addr(), 64, src.mr->lkey + 1};
  ibv_send_wr wr = write_wr(sg, dst.addr(), dst.mr->rkey);
  ibv_send_wr* bad;
  ASSERT_EQ(ibv_post_send(a, &wr, &bad), 0);
  auto w = poll(c1, 1);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0].status, IBV_WC_LOC_PROT_ERR);
  EXPECT_EQ(state(a), IBV_QPS_ERR);
}

TEST_F(ErrorTest, NoReceiveExhaustsRnrRetries) {
  connect(a, b, /*rnr_retry=*/2, /*min_rnr_timer=*/1);
  Buffer& src = buffer(4096);
  ibv_sge sg{src.addr(), 64, src.mr->lkey};
  ibv_send_wr wr = send_wr(IBV_WR_SEND, sg);
  EXPECT_EQ(complete_one(a, wr, c1), IBV_WC_RNR_RETRY_EXC_ERR);
}

TEST_F(ErrorTest, InfiniteRnrRetryWaitsForTheReceive) {
  connect(a, b, /*rnr_retry=*/7, /*min_rnr_timer=*/1);
  Buffer& src = buffer(4096);
  Buffer& dst = buffer(4096);
  fill_random(src.data(), 100, 3);
  ibv_sge sg{src.addr(), 100, src.mr->lkey};
  ibv_send_wr wr = send_wr(IBV_WR_SEND, sg);
  ibv_send_wr* bad;
  ASSERT_EQ(ibv_post_send(a, &wr, &bad), 0);
  // No completion while nothing is posted: the sender waits.
  EXPECT_TRUE(poll(c1, 1, 100).empty());
  ASSERT_EQ(post_recv(b, dst, 4096), 0);
  // The progress thread delivers it without the sender polling its CQ in a loop.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  auto r = poll(c2, 1);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].byte_len, 100u);
  EXPECT_EQ(memcmp(src.data(), dst.data(), 100), 0);
  auto w = poll(c1, 1);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0].status, IBV_WC_SUCCESS);
}

TEST_F(ErrorTest, UnknownDestinationTimesOutWithRetryExceeded) {
  ASSERT_EQ(to_init(a), 0);
  ASSERT_EQ(to_rtr(a, 0xfffff0), 0);
  ASSERT_EQ(to_rts(a, 7, /*timeout=*/8, /*retry=*/2), 0);
  Buffer& src = buffer(4096);
  ibv_sge sg{src.addr(), 64, src.mr->lkey};
  ibv_send_wr wr = write_wr(sg, 0x1000, 1234);
  EXPECT_EQ(complete_one(a, wr, c1), IBV_WC_RETRY_EXC_ERR);
}

TEST_F(ErrorTest, ErrorStateFlushesPostedReceives) {
  connect(a, b);
  Buffer& dst = buffer(4096);
  ibv_sge rs{dst.addr(), 4096, dst.mr->lkey};
  ibv_recv_wr rwr[3] = {};
  for (int i = 0; i < 3; ++i) {
    rwr[i].wr_id = 100 + i;
    rwr[i].sg_list = &rs;
    rwr[i].num_sge = 1;
    rwr[i].next = i < 2 ? &rwr[i + 1] : nullptr;
  }
  ibv_recv_wr* rbad;
  ASSERT_EQ(ibv_post_recv(b, rwr, &rbad), 0);
  ASSERT_EQ(to_err(b), 0);
  auto w = poll(c2, 3);
  ASSERT_EQ(w.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(w[i].status, IBV_WC_WR_FLUSH_ERR);
    EXPECT_EQ(w[i].wr_id, 100u + i);
  }
}

// Messages that arrived before the error and were not polled yet complete as they arrived, ahead
// of the flushes (a peer that sends and dies leaves exactly this behind), and only the receives
// nobody filled are flushed.
TEST_F(ErrorTest, ArrivedReceivesCompleteBeforeTheFlushes) {
  connect(a, b);
  Buffer& src = buffer(4096);
  Buffer& dst = buffer(3 * 4096);
  fill_random(src.data(), 4096, 3);
  for (int i = 0; i < 4; ++i) {
    ibv_sge rs{dst.addr() + uint64_t(i % 3) * 4096, 4096, dst.mr->lkey};
    ibv_recv_wr rwr{};
    rwr.wr_id = 100 + i;
    rwr.sg_list = &rs;
    rwr.num_sge = 1;
    ibv_recv_wr* rbad;
    ASSERT_EQ(ibv_post_recv(b, &rwr, &rbad), 0);
  }
  for (int i = 0; i < 2; ++i) {
    ibv_sge sg{src.addr(), 1000u + i, src.mr->lkey};
    ibv_send_wr wr = send_wr(IBV_WR_SEND, sg);
    wr.wr_id = i;
    ASSERT_EQ(complete_one(a, wr, c1), IBV_WC_SUCCESS);
  }
  // Both sends are in b's receive queue, unpolled; then b fails.
  ASSERT_EQ(to_err(b), 0);
  auto w = poll(c2, 4);
  ASSERT_EQ(w.size(), 4u);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(w[i].status, IBV_WC_SUCCESS) << i;
    EXPECT_EQ(w[i].wr_id, 100u + i);
    EXPECT_EQ(w[i].opcode, IBV_WC_RECV);
    EXPECT_EQ(w[i].byte_len, 1000u + i);
    EXPECT_EQ(memcmp(dst.data() + i * 4096, src.data(), 1000 + i), 0) << i;
  }
  for (int i = 2; i < 4; ++i) {
    EXPECT_EQ(w[i].status, IBV_WC_WR_FLUSH_ERR) << i;
    EXPECT_EQ(w[i].wr_id, 100u + i);
  }
  EXPECT_TRUE(poll(c2, 1, 100).empty());  // nothing twice
}

TEST_F(ErrorTest, ReceiveTooSmallIsLengthError) {
  connect(a, b);
  Buffer& src = buffer(4096);
  Buffer& dst = buffer(4096);
  ASSERT_EQ(post_recv(b, dst, 16), 0);
  ibv_sge sg{src.addr(), 64, src.mr->lkey};
  ibv_send_wr wr = send_wr(IBV_WR_SEND, sg);
  ibv_send_wr* bad;
  ASSERT_EQ(ibv_post_send(a, &wr, &bad), 0);
  auto w = poll(c1, 1);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0].status, IBV_WC_REM_INV_REQ_ERR);
  auto r = poll(c2, 1);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].status, IBV_WC_LOC_LEN_ERR);
}

TEST_F(VerbsTest, CqOverflowRaisesCqError) {
  ibv_cq* small = cq(4);
  ibv_cq* other = cq();
  ibv_qp* a = qp(small, small);
  ibv_qp* b = qp(other, other);
  connect(a, b);
  Buffer& src = buffer(4096);
  Buffer& dst = buffer(4096);
  ibv_sge sg{src.addr(), 8, src.mr->lkey};
  ibv_send_wr wr = send_wr(IBV_WR_RDMA_WRITE, sg);
  wr.wr.rdma.remote_addr = dst.addr();
  wr.wr.rdma.rkey = dst.mr->rkey;
  ibv_send_wr* bad;
  for (int i = 0; i < 8; ++i) ASSERT_EQ(ibv_post_send(a, &wr, &bad), 0);
  pollfd pfd{ctx->async_fd, POLLIN, 0};
  ASSERT_EQ(::poll(&pfd, 1, 2000), 1);
  ibv_async_event ev;
  ASSERT_EQ(ibv_get_async_event(ctx, &ev), 0);
  EXPECT_EQ(ev.event_type, IBV_EVENT_CQ_ERR);
  EXPECT_EQ(ev.element.cq, small);
  ibv_ack_async_event(&ev);
  EXPECT_EQ(poll(small, 16, 100).size(), 4u);
}

TEST_F(VerbsTest, CompletionChannelSignalsOnlyWhenArmed) {
  ibv_comp_channel* ch = ibv_create_comp_channel(ctx);
  ASSERT_NE(ch, nullptr);
  ibv_cq* rcq = cq(64, ch);
  ibv_cq* scq = cq();
  ibv_qp* a = qp(scq, scq);
  ibv_qp* b = qp(rcq, rcq);
  connect(a, b);
  Buffer& src = buffer(4096);
  Buffer& dst = buffer(4096);
  ibv_sge sg{src.addr(), 32, src.mr->lkey};
  ibv_send_wr wr = send_wr(IBV_WR_SEND, sg, 0);
  ibv_send_wr* bad;
  // Not armed: a completion arrives but the channel stays quiet.
  ASSERT_EQ(post_recv(b, dst, 4096), 0);
  ASSERT_EQ(ibv_post_send(a, &wr, &bad), 0);
  pollfd pfd{ch->fd, POLLIN, 0};
  EXPECT_EQ(::poll(&pfd, 1, 100), 0);
  EXPECT_EQ(poll(rcq, 1).size(), 1u);
  // Armed: exactly one event.
  ASSERT_EQ(ibv_req_notify_cq(rcq, 0), 0);
  ASSERT_EQ(post_recv(b, dst, 4096), 0);
  ASSERT_EQ(post_recv(b, dst, 4096), 0);
  ASSERT_EQ(ibv_post_send(a, &wr, &bad), 0);
  ASSERT_EQ(ibv_post_send(a, &wr, &bad), 0);
  ASSERT_EQ(::poll(&pfd, 1, 2000), 1);
  ibv_cq* got;
  void* cq_ctx;
  ASSERT_EQ(ibv_get_cq_event(ch, &got, &cq_ctx), 0);
  EXPECT_EQ(got, rcq);
  EXPECT_EQ(::poll(&pfd, 1, 50), 0);
  ibv_ack_cq_events(rcq, 1);
  EXPECT_EQ(poll(rcq, 2).size(), 2u);
  EXPECT_EQ(ibv_destroy_comp_channel(ch), EBUSY);  // a CQ still uses it
  ibv_destroy_qp(b);
  qps.erase(std::find(qps.begin(), qps.end(), b));
  ibv_destroy_cq(rcq);
  cqs.erase(std::find(cqs.begin(), cqs.end(), rcq));
  EXPECT_EQ(ibv_destroy_comp_channel(ch), 0);
}

TEST_F(VerbsTest, UdDeliversWithGrhAndQkeyCheck) {
  ibv_cq* c1 = cq();
  ibv_cq* c2 = cq();
  ibv_qp* a = qp(c1, c1, IBV_QPT_UD);
  ibv_qp* b = qp(c2, c2, IBV_QPT_UD);
  for (ibv_qp* q : {a, b}) {
    ASSERT_EQ(to_init(q), 0);
    ASSERT_EQ(to_rtr(q, 0), 0);
    ASSERT_EQ(to_rts(q), 0);
  }
  Buffer& src = buffer(4096);
  Buffer& dst = buffer(4096);
  fill_random(src.data(), 500, 11);
  ASSERT_EQ(post_recv(b, dst, 4096, 5), 0);
  ibv_ah_attr ah_attr{};
  ah_attr.is_global = 1;
  ibv_query_gid(ctx, 1, 0, &ah_attr.grh.dgid);
  ah_attr.port_num = 1;
  ibv_ah* ah = ibv_create_ah(pd, &ah_attr);
  ASSERT_NE(ah, nullptr);
  ibv_sge sg{src.addr(), 500, src.mr->lkey};
  ibv_send_wr wr = send_wr(IBV_WR_SEND_WITH_IMM, sg);
  wr.imm_data = htonl(a->qp_num);
  wr.wr.ud.ah = ah;
  wr.wr.ud.remote_qpn = b->qp_num;
  wr.wr.ud.remote_qkey = 0x22222222;  // wrong: dropped
  ibv_send_wr* bad;
  ASSERT_EQ(ibv_post_send(a, &wr, &bad), 0);
  ASSERT_EQ(poll(c1, 1).size(), 1u);
  EXPECT_TRUE(poll(c2, 1, 50).empty());
  wr.wr.ud.remote_qkey = 0x11111111;
  ASSERT_EQ(ibv_post_send(a, &wr, &bad), 0);
  ASSERT_EQ(poll(c1, 1).size(), 1u);
  auto r = poll(c2, 1);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].byte_len, 540u);
  EXPECT_TRUE(r[0].wc_flags & IBV_WC_GRH);
  EXPECT_EQ(r[0].src_qp, a->qp_num);
  EXPECT_EQ(memcmp(dst.data() + 40, src.data(), 500), 0);
  ibv_ah* reply = ibv_create_ah_from_wc(pd, &r[0], reinterpret_cast<ibv_grh*>(dst.data()), 1);
  ASSERT_NE(reply, nullptr);
  ibv_destroy_ah(reply);
  ibv_destroy_ah(ah);
}

TEST_F(VerbsTest, SrqFeedsSeveralQps) {
  ibv_srq_init_attr sa{};
  sa.attr.max_wr = 16;
  sa.attr.max_sge = 1;
  ibv_srq* srq = ibv_create_srq(pd, &sa);
  ASSERT_NE(srq, nullptr);
  ibv_cq* sc = cq();
  ibv_cq* rc = cq();
  ibv_qp* s1 = qp(sc, sc);
  ibv_qp* s2 = qp(sc, sc);
  ibv_qp* r1 = qp(rc, rc, IBV_QPT_RC, srq);
  ibv_qp* r2 = qp(rc, rc, IBV_QPT_RC, srq);
  connect(s1, r1);
  connect(s2, r2);
  Buffer& src = buffer(4096);
  Buffer& dst = buffer(4096);
  for (int i = 0; i < 2; ++i) {
    ibv_sge rs{dst.addr() + i * 1024, 1024, dst.mr->lkey};
    ibv_recv_wr rwr{};
    rwr.wr_id = i;
    rwr.sg_list = &rs;
    rwr.num_sge = 1;
    ibv_recv_wr* rbad;
    ASSERT_EQ(ibv_post_srq_recv(srq, &rwr, &rbad), 0);
  }
  ibv_sge sg{src.addr(), 10, src.mr->lkey};
  ibv_send_wr wr = send_wr(IBV_WR_SEND, sg, 0);
  ibv_send_wr* bad;
  ASSERT_EQ(ibv_post_send(s1, &wr, &bad), 0);
  ASSERT_EQ(ibv_post_send(s2, &wr, &bad), 0);
  auto r = poll(rc, 2);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].qp_num, r1->qp_num);
  EXPECT_EQ(r[1].qp_num, r2->qp_num);
  for (ibv_qp* q : {s1, s2, r1, r2}) {
    ibv_destroy_qp(q);
    qps.erase(std::find(qps.begin(), qps.end(), q));
  }
  EXPECT_EQ(ibv_destroy_srq(srq), 0);
}

}  // namespace
}  // namespace vrdma::testing
