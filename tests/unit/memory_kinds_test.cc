// The kinds of memory a program can hand to ibv_reg_mr, each registered, written and read by a
// peer QP with RDMA WRITE and READ, and deregistered, with the results rdma-core gives on a real
// device: anonymous, heap, a private file mapping, a shared memfd, a System V segment (whose
// pages stay the segment's: a second attachment sees what the peer wrote, and the segment
// detaches and goes away as the program expects), memory remapped while registered, and the
// refusals (unmapped pages, a read-only mapping registered for local writes).
#include <fcntl.h>
#include <sys/ipc.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>

#include "verbs_fixture.h"

namespace vrdma::testing {
namespace {

constexpr size_t kLen = 16 * 4096;
constexpr int kAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

// One kind of memory: where it is, and how it goes away.
struct Region {
  uint8_t* base = nullptr;
  std::function<void()> release;
  // Another view of the same pages (a second attachment or mapping), or nullptr when the kind
  // has none.
  uint8_t* alias = nullptr;
};

class MemoryKindsTest : public PairTest {
 protected:
  void SetUp() override {
    VerbsTest::SetUp();
    connect_pair();
    peer.mem.resize(kLen);
    peer.mr = ibv_reg_mr(pd, peer.data(), kLen, kAccess);
    ASSERT_NE(peer.mr, nullptr);
  }
  void TearDown() override {
    if (peer.mr) ibv_dereg_mr(peer.mr);
    VerbsTest::TearDown();
  }

  ibv_wc_status rdma(ibv_wr_opcode op, uint64_t raddr, uint32_t rkey, uint32_t len) {
    return rdma_on(b, cb, op, peer.addr(), peer.mr->lkey, len, raddr, rkey);
  }

  // Registers the region (at an odd offset, an odd length), has the peer write it and read it
  // back, checks every byte and the alias, deregisters, checks the contents stayed.
  void use(Region& r, const char* what) {
    SCOPED_TRACE(what);
    uint8_t* at = r.base + 100;
    const uint32_t len = kLen - 300;
    fill_random(r.base, kLen, 3);
    std::vector<uint8_t> before(r.base, r.base + kLen);
    ibv_mr* mr = ibv_reg_mr(pd, at, len, kAccess);
    ASSERT_NE(mr, nullptr) << strerror(errno);
    EXPECT_EQ(0, memcmp(r.base, before.data(), kLen)) << "registration changed the contents";
    fill_random(peer.data(), len, 4);
    std::vector<uint8_t> sent(peer.data(), peer.data() + len);
    ASSERT_EQ(rdma(IBV_WR_RDMA_WRITE, reinterpret_cast<uint64_t>(at), mr->rkey, len),
              IBV_WC_SUCCESS);
    EXPECT_EQ(0, memcmp(at, sent.data(), len)) << "the WRITE did not land in the program's pages";
    EXPECT_EQ(0, memcmp(r.base, before.data(), 100)) << "bytes before the MR changed";
    if (r.alias) {
      EXPECT_EQ(0, memcmp(r.alias + 100, sent.data(), len)) << "the other view lost the WRITE";
    }
    // The program writes; the peer reads what it wrote.
    fill_random(at, len, 5);
    std::vector<uint8_t> mine(at, at + len);
    memset(peer.data(), 0, len);
    ASSERT_EQ(rdma(IBV_WR_RDMA_READ, reinterpret_cast<uint64_t>(at), mr->rkey, len),
              IBV_WC_SUCCESS);
    EXPECT_EQ(0, memcmp(peer.data(), mine.data(), len)) << "the READ did not see the pages";
    std::vector<uint8_t> last(r.base, r.base + kLen);
    ASSERT_EQ(ibv_dereg_mr(mr), 0);
    EXPECT_EQ(0, memcmp(r.base, last.data(), kLen)) << "deregistration changed the contents";
    if (r.alias) {
      // Still one set of pages after deregistration.
      r.base[kLen / 2] ^= 0xff;
      EXPECT_EQ(r.alias[kLen / 2], r.base[kLen / 2]);
    }
    if (r.release) r.release();
  }

  Buffer peer;
};

uint8_t* map(int prot, int flags, int fd = -1, off_t off = 0) {
  void* p = ::mmap(nullptr, kLen, prot, flags, fd, off);
  return p == MAP_FAILED ? nullptr : static_cast<uint8_t*>(p);
}

TEST_F(MemoryKindsTest, AnonymousAndHeap) {
  Region anon{map(PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS)};
  ASSERT_NE(anon.base, nullptr);
  anon.release = [&] { ::munmap(anon.base, kLen); };
  use(anon, "private anonymous");
  std::vector<uint8_t> heap(kLen);
  Region h{heap.data()};
  use(h, "heap");
}

TEST_F(MemoryKindsTest, PrivateFileMapping) {
  char path[] = "/tmp/vrdma-kinds-XXXXXX";
  int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  ::unlink(path);
  ASSERT_EQ(::ftruncate(fd, kLen), 0);
  Region r{map(PROT_READ | PROT_WRITE, MAP_PRIVATE, fd)};
  ASSERT_NE(r.base, nullptr);
  r.release = [&] { ::munmap(r.base, kLen); };
  use(r, "private file mapping");
  ::close(fd);
}

TEST_F(MemoryKindsTest, SystemVSegmentStaysShared) {
  int id = ::shmget(IPC_PRIVATE, kLen, IPC_CREAT | 0600);
  ASSERT_GE(id, 0) << strerror(errno);
  Region r;
  r.base = static_cast<uint8_t*>(::shmat(id, nullptr, 0));
  r.alias = static_cast<uint8_t*>(::shmat(id, nullptr, 0));
  // Marked for removal while attached, as UCX does: it goes away with its last detachment, so a
  // registration that detached it would destroy it under the other users.
  ASSERT_EQ(::shmctl(id, IPC_RMID, nullptr), 0);
  ASSERT_NE(r.base, reinterpret_cast<uint8_t*>(-1));
  ASSERT_NE(r.alias, reinterpret_cast<uint8_t*>(-1));
  if (::geteuid() != 0)
    GTEST_SKIP() << "vrdmad opens a segment's file through /proc/PID/map_files: needs root";
  use(r, "System V segment");
  // Both attachments are still the segment's: each detaches.
  EXPECT_EQ(::shmdt(r.base), 0) << strerror(errno);
  EXPECT_EQ(::shmdt(r.alias), 0) << strerror(errno);
}

TEST_F(MemoryKindsTest, SystemVSegmentRegisteredTwiceAndInParts) {
  if (::geteuid() != 0)
    GTEST_SKIP() << "vrdmad opens a segment's file through /proc/PID/map_files: needs root";
  int id = ::shmget(IPC_PRIVATE, kLen, IPC_CREAT | 0600);
  ASSERT_GE(id, 0);
  auto* p = static_cast<uint8_t*>(::shmat(id, nullptr, 0));
  auto* q = static_cast<uint8_t*>(::shmat(id, nullptr, 0));
  ASSERT_EQ(::shmctl(id, IPC_RMID, nullptr), 0);
  // Overlapping registrations cut the backing; the cuts stay the segment's.
  ibv_mr* whole = ibv_reg_mr(pd, p, kLen, kAccess);
  ibv_mr* middle = ibv_reg_mr(pd, p + 4096 * 3, 4096 * 5, kAccess);
  ASSERT_TRUE(whole && middle) << strerror(errno);
  fill_random(peer.data(), 4096, 9);
  ASSERT_EQ(rdma(IBV_WR_RDMA_WRITE, reinterpret_cast<uint64_t>(p + 4096 * 4), middle->rkey, 4096),
            IBV_WC_SUCCESS);
  ASSERT_EQ(rdma(IBV_WR_RDMA_WRITE, reinterpret_cast<uint64_t>(p + 4096 * 12), whole->rkey, 4096),
            IBV_WC_SUCCESS);
  EXPECT_EQ(0, memcmp(q + 4096 * 4, peer.data(), 4096));
  EXPECT_EQ(0, memcmp(q + 4096 * 12, peer.data(), 4096));
  EXPECT_EQ(ibv_dereg_mr(whole), 0);
  ASSERT_EQ(rdma(IBV_WR_RDMA_READ, reinterpret_cast<uint64_t>(p + 4096 * 3), middle->rkey, 4096),
            IBV_WC_SUCCESS);
  EXPECT_EQ(0, memcmp(peer.data(), q + 4096 * 3, 4096));
  EXPECT_EQ(ibv_dereg_mr(middle), 0);
  EXPECT_EQ(::shmdt(p), 0);
  EXPECT_EQ(::shmdt(q), 0);
}

TEST_F(MemoryKindsTest, SharedMemfdMapping) {
  int fd = ::memfd_create("kinds", MFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, kLen), 0);
  Region r{map(PROT_READ | PROT_WRITE, MAP_SHARED, fd)};
  ASSERT_NE(r.base, nullptr);
  r.release = [&] { ::munmap(r.base, kLen); };
  use(r, "shared memfd");
  ::close(fd);
}

TEST_F(MemoryKindsTest, MemoryRemappedWhileRegisteredKeepsTheMrPages) {
  // The MR keeps the pages it was registered with, as pinned pages do on a device: the
  // program maps something else there and the peer's WRITE goes to the old pages, not the new.
  uint8_t* base = map(PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS);
  ASSERT_NE(base, nullptr);
  ibv_mr* mr = ibv_reg_mr(pd, base, kLen, kAccess);
  ASSERT_NE(mr, nullptr);
  ASSERT_EQ(
      ::mmap(base, kLen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0),
      base);
  fill_random(peer.data(), 4096, 6);
  EXPECT_EQ(rdma(IBV_WR_RDMA_WRITE, reinterpret_cast<uint64_t>(base), mr->rkey, 4096),
            IBV_WC_SUCCESS);
  std::vector<uint8_t> zero(4096, 0);
  EXPECT_EQ(0, memcmp(base, zero.data(), 4096)) << "the new mapping took the WRITE";
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
  EXPECT_EQ(0, memcmp(base, zero.data(), 4096)) << "deregistration touched the new mapping";
  ::munmap(base, kLen);
}

TEST_F(MemoryKindsTest, HundredsOfDeregistrationsInARowKeepTheDeviceAlive) {
  // Deregistration does not wait for vrdmad's answers; unread answers must never pile up
  // until vrdmad finds the process's socket full and drops it.
  constexpr int kMrs = 600;  // each holds a descriptor: within the default 1024
  std::vector<uint8_t> mem(kMrs * 4096);
  std::vector<ibv_mr*> mrs;
  for (int i = 0; i < kMrs; ++i) {
    ibv_mr* mr = ibv_reg_mr(pd, mem.data() + size_t(i) * 4096, 4096, IBV_ACCESS_LOCAL_WRITE);
    ASSERT_NE(mr, nullptr) << i << ": " << strerror(errno);
    mrs.push_back(mr);
  }
  for (ibv_mr* mr : mrs) ASSERT_EQ(ibv_dereg_mr(mr), 0);
  // Still served: a registration and a WRITE through it.
  Region r{mem.data()};
  use(r, "after the deregistrations");
}

// Reserves `n` more huge pages of the default size for its lifetime (root), where fewer are
// free; the count is put back after.
class HugePageReserve {
 public:
  explicit HugePageReserve(long n) {
    const long free_pages = meminfo("HugePages_Free:");
    if (free_pages >= n) {
      ok_ = true;
      return;
    }
    before_ = read_nr();
    if (before_ < 0 || !write_nr(before_ + n - free_pages)) return;
    ok_ = meminfo("HugePages_Free:") >= n;
  }
  ~HugePageReserve() {
    if (before_ >= 0) write_nr(before_);
  }
  bool ok() const { return ok_; }

 private:
  static long meminfo(const char* key) {
    FILE* f = std::fopen("/proc/meminfo", "re");
    if (!f) return -1;
    char line[128];
    long v = -1;
    while (std::fgets(line, sizeof(line), f))
      if (std::strncmp(line, key, std::strlen(key)) == 0) v = std::atol(line + std::strlen(key));
    std::fclose(f);
    return v;
  }
  static long read_nr() {
    FILE* f = std::fopen("/proc/sys/vm/nr_hugepages", "re");
    long v = -1;
    if (f && std::fscanf(f, "%ld", &v) != 1) v = -1;
    if (f) std::fclose(f);
    return v;
  }
  static bool write_nr(long v) {
    FILE* f = std::fopen("/proc/sys/vm/nr_hugepages", "we");
    if (!f) return false;
    const bool ok = std::fprintf(f, "%ld", v) > 0;
    return std::fclose(f) == 0 && ok;
  }
  long before_ = -1;
  bool ok_ = false;
};

// Huge pages (MAP_HUGETLB) a device pins as they are: vrdma moves them whole (the MR's pages
// and the rest of each huge page they touch) into ordinary shared pages. Reserving pages needs
// root; the test command runs as root.
TEST_F(MemoryKindsTest, HugePages) {
  HugePageReserve reserve(2);
  if (!reserve.ok()) GTEST_SKIP() << "no huge page free, and none can be reserved (not root)";
  constexpr size_t kHuge = 4 << 20;
  Region r{static_cast<uint8_t*>(::mmap(nullptr, kHuge, PROT_READ | PROT_WRITE,
                                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0))};
  ASSERT_NE(r.base, MAP_FAILED) << strerror(errno);
  use(r, "huge pages");
  // An MR across the boundary of the two huge pages: both move.
  Region across{r.base + (2 << 20) - kLen / 2};
  use(across, "huge pages, across two");
  EXPECT_EQ(::munmap(r.base, kHuge), 0);
}

TEST_F(MemoryKindsTest, Refusals) {
  // Unmapped pages: EFAULT.
  uint8_t* base = map(PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS);
  ASSERT_NE(base, nullptr);
  ASSERT_EQ(::munmap(base, kLen), 0);
  errno = 0;
  EXPECT_EQ(ibv_reg_mr(pd, base, kLen, IBV_ACCESS_LOCAL_WRITE), nullptr);
  EXPECT_EQ(errno, EFAULT);
  // A read-only mapping registered for writes: the device could not pin it writable (EFAULT);
  // registered for remote reads only, it is accepted and read.
  uint8_t* ro = map(PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS);
  ASSERT_NE(ro, nullptr);
  errno = 0;
  EXPECT_EQ(ibv_reg_mr(pd, ro, kLen, IBV_ACCESS_LOCAL_WRITE), nullptr);
  EXPECT_EQ(errno, EFAULT);
  ibv_mr* mr = ibv_reg_mr(pd, ro, kLen, IBV_ACCESS_REMOTE_READ);
  ASSERT_NE(mr, nullptr) << strerror(errno);
  memset(peer.data(), 0xaa, 4096);
  EXPECT_EQ(rdma(IBV_WR_RDMA_READ, reinterpret_cast<uint64_t>(ro), mr->rkey, 4096), IBV_WC_SUCCESS);
  std::vector<uint8_t> zero(4096, 0);
  EXPECT_EQ(0, memcmp(peer.data(), zero.data(), 4096));
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
  ::munmap(ro, kLen);
}

}  // namespace
}  // namespace vrdma::testing
