// WriteHold: another thread's writes to pages that move (a copy, then an mremap over them) wait
// for the move and land in the new pages; where seccomp refuses userfaultfd(2), as container
// engines' default profiles do, the hold comes from /dev/userfaultfd; where neither is allowed,
// the move still keeps the contents.
#include "engine/write_hold.h"

#include <errno.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <string>
#include <thread>

#include "common/mremap_fixed.h"
#include "counter_writer.h"

namespace vrdma {
namespace {

using vrdma::testing::CounterWriter;

constexpr size_t kPage = 4096;
constexpr size_t kPages = 4;

// Moves [p, p + len) to fresh anonymous pages, contents kept, holding writes when `hold`.
// Returns whether the hold was active.
bool move_pages(uint8_t* p, size_t len, bool hold) {
  void* fresh = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (fresh == MAP_FAILED) return false;
  WriteHold h;
  bool active = hold && h.hold(reinterpret_cast<uint64_t>(p), reinterpret_cast<uint64_t>(p) + len);
  memcpy(fresh, p, len);
  EXPECT_NE(mremap_fixed(fresh, len, len, p), MAP_FAILED) << strerror(errno);
  h.release();
  return active;
}

struct MoveRun {
  long lost = 0;       // writes the writer found gone
  bool kept = false;   // the contents of a page nobody wrote survived every move
  bool active = true;  // every move held the writes
  uint64_t bumps = 0;  // writes made while the pages moved
};

// A thread bumps a counter in the first page and checks each time that its last value is still
// there, while the pages move `moves` times.
MoveRun moves_under_writes(bool hold, int moves) {
  MoveRun r;
  auto* region = static_cast<uint8_t*>(
      ::mmap(nullptr, kPages * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  if (region == MAP_FAILED) return r;
  auto* counter = reinterpret_cast<volatile uint64_t*>(region + 128);
  memset(region + 2 * kPage, 0x5a, kPage);
  CounterWriter writer(counter);
  uint64_t before = writer.bumps();
  for (int i = 0; i < moves; ++i) r.active &= move_pages(region, kPages * kPage, hold);
  r.bumps = writer.bumps() - before;
  writer.stop();
  r.lost = writer.lost();
  r.kept = true;
  for (size_t i = 0; i < kPage; ++i) r.kept &= region[2 * kPage + i] == 0x5a;
  ::munmap(region, kPages * kPage);
  return r;
}

// Makes userfaultfd(2) fail with EPERM in this process, as podman's default profile does.
bool refuse_userfaultfd_syscall() {
  sock_filter prog[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_userfaultfd, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  sock_fprog fprog{static_cast<unsigned short>(sizeof(prog) / sizeof(prog[0])), prog};
  return ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 &&
         ::syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &fprog) == 0;
}

// Runs the disabled test WriteHoldChild.DISABLED_<body> in a new process of this program, with
// userfaultfd(2) refused by seccomp and, when `drop_root`, as nobody: a process that looks for
// its userfaultfd for the first time under those rules. Returns its exit status (0: passed).
int in_child(const char* body, bool drop_root) {
  pid_t pid = ::fork();
  if (pid == 0) {
    if (!refuse_userfaultfd_syscall()) ::_exit(100);
    if (drop_root && (::setgid(65534) != 0 || ::setuid(65534) != 0)) ::_exit(101);
    std::string filter = std::string("--gtest_filter=WriteHoldChild.DISABLED_") + body;
    ::execl("/proc/self/exe", "engine_test", filter.c_str(), "--gtest_also_run_disabled_tests",
            static_cast<char*>(nullptr));
    ::_exit(102);
  }
  int status = 0;
  if (pid < 0 || ::waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

TEST(WriteHold, WritesMadeWhilePagesMoveLandInTheNewPages) {
  MoveRun r = moves_under_writes(true, 300);
  EXPECT_TRUE(r.active);
  EXPECT_TRUE(r.kept);
  EXPECT_GT(r.bumps, 0u);
  EXPECT_EQ(r.lost, 0) << "of " << r.bumps << " writes";
}

TEST(WriteHold, ARangeUserfaultfdCannotProtectIsHeldByStoppingTheOtherThreads) {
  WriteHold h;
  // Not mapped at all: userfaultfd has nothing to register; the other threads stop instead.
  void* p = ::mmap(nullptr, kPage, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  ::munmap(p, kPage);
  EXPECT_TRUE(h.hold(reinterpret_cast<uint64_t>(p), reinterpret_cast<uint64_t>(p) + kPage));
  EXPECT_TRUE(h.active());
  h.release();
  EXPECT_FALSE(h.active());
  EXPECT_FALSE(h.hold(4096, 4096));  // empty
}

TEST(WriteHold, ComesFromTheDeviceWhereSeccompRefusesTheSystemCall) {
  if (::access("/dev/userfaultfd", F_OK) != 0)
    GTEST_SKIP() << "this kernel has no /dev/userfaultfd (Linux 6.1 and later have it)";
  EXPECT_EQ(in_child("FromTheDevice", false), 0);
}

TEST(WriteHold, WithoutEitherTheOtherThreadsStop) {
  EXPECT_EQ(in_child("WithoutEither", true), 0);
}

// The bodies of the two tests above, run only in their child processes.
TEST(WriteHoldChild, DISABLED_FromTheDevice) {
  errno = 0;
  EXPECT_LT(::syscall(SYS_userfaultfd, O_CLOEXEC), 0);
  EXPECT_EQ(errno, EPERM);
  EXPECT_EQ(WriteHold::source(), WriteHold::Source::kDevice);
  MoveRun r = moves_under_writes(true, 300);
  EXPECT_TRUE(r.active);
  EXPECT_TRUE(r.kept);
  EXPECT_EQ(r.lost, 0) << "of " << r.bumps << " writes";
}

TEST(WriteHoldChild, DISABLED_WithoutEither) {
  EXPECT_NE(::getuid(), 0u);
  EXPECT_EQ(WriteHold::source(), WriteHold::Source::kThreads);
  // The other threads stop instead: nothing they write is lost.
  MoveRun r = moves_under_writes(true, 300);
  EXPECT_TRUE(r.active);
  EXPECT_TRUE(r.kept);
  EXPECT_GT(r.bumps, 0u);
  EXPECT_EQ(r.lost, 0) << "of " << r.bumps << " writes";
}

// A thread read(2)s blocks from a pipe into the pages while they move: each block is whole
// where the reader finds it, the system call's copy either done before the move or made again
// into the new pages.
TEST(WriteHoldChild, DISABLED_ReadsIntoMovingPages) {
  EXPECT_EQ(WriteHold::source(), WriteHold::Source::kThreads);
  constexpr size_t kBlock = 6000;
  auto* region = static_cast<uint8_t*>(
      ::mmap(nullptr, kPages * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(region, MAP_FAILED);
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  std::atomic<bool> stop{false};
  std::atomic<long> blocks{0}, torn{0};
  auto fill = [](uint8_t* b, long n) {
    for (size_t i = 0; i < kBlock; ++i) b[i] = static_cast<uint8_t>(n * 31 + i);
  };
  std::thread feeder([&] {
    uint8_t b[kBlock];
    for (long n = 0; !stop; ++n) {
      fill(b, n);
      if (::write(fds[1], b, kBlock) != static_cast<ssize_t>(kBlock)) break;
    }
    ::close(fds[1]);
  });
  std::thread reader([&] {
    uint8_t* dst = region + kPage / 2;
    uint8_t want[kBlock];
    for (long n = 0;; ++n) {
      size_t off = 0;
      while (off < kBlock) {
        ssize_t got = ::read(fds[0], dst + off, kBlock - off);
        if (got <= 0) return;
        off += static_cast<size_t>(got);
      }
      fill(want, n);
      if (memcmp(dst, want, kBlock) != 0) ++torn;
      ++blocks;
    }
  });
  while (blocks == 0) std::this_thread::yield();
  const long before = blocks;
  bool active = true;
  for (int i = 0; i < 300; ++i) active &= move_pages(region, kPages * kPage, true);
  const long during = blocks - before;
  stop = true;
  feeder.join();
  reader.join();
  ::close(fds[0]);
  ::munmap(region, kPages * kPage);
  EXPECT_TRUE(active);
  EXPECT_GT(during, 0);
  EXPECT_EQ(torn, 0) << "of " << blocks << " blocks";
}

TEST(WriteHold, ReadsIntoMovingPagesWithoutUserfaultfd) {
  EXPECT_EQ(in_child("ReadsIntoMovingPages", true), 0);
}

}  // namespace
}  // namespace vrdma
