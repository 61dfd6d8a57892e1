// vrdma_reg_writes: registers and deregisters a buffer over and over while other threads of the
// program write into it, and checks that no write is lost.
//
//   vrdma_reg_writes [--iterations N] [--seconds S]
//
// The buffer (64 pages of private anonymous memory) is written by:
//   - two threads that each bump a counter in their own page with plain stores, and check
//     before every bump that their last value is still there;
//   - a thread that read(2)s 6 KiB blocks from a pipe into the buffer (across a page boundary)
//     and checks every byte of each block against the pattern its feeder thread wrote.
// Meanwhile the main thread runs ibv_reg_mr + ibv_dereg_mr on the whole buffer N times (2000 by
// default) or until S seconds pass (60 by default), whichever comes first. It prints
//   reg_writes: registrations R store_writes W lost L pipe_blocks B torn T us_per_registration U
// (U: the mean time of one ibv_reg_mr + ibv_dereg_mr)
// and exits 0 when L and T are 0 and every thread wrote while registrations ran; 1 otherwise
// (2 for bad arguments or no device).
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

namespace {

constexpr size_t kPage = 4096;
constexpr size_t kPages = 64;
constexpr size_t kBlock = 6144;  // a pipe block: more than a page, so reads cross a boundary

std::atomic<bool> g_stop{false};

// Bumps the counter at `c`, checking that its last value is still there.
void store_writer(volatile uint64_t* c, std::atomic<uint64_t>& writes,
                  std::atomic<uint64_t>& lost) {
  uint64_t last = 0;
  *c = 0;
  while (!g_stop.load(std::memory_order_relaxed)) {
    if (*c != last) lost.fetch_add(1, std::memory_order_relaxed);
    *c = ++last;
    writes.fetch_add(1, std::memory_order_relaxed);
  }
}

uint8_t pattern(uint64_t block, size_t i) {
  return static_cast<uint8_t>(block * 131 + i * 7 + 1);
}

// Writes numbered blocks into the pipe until told to stop (then closes it).
void feeder(int fd) {
  uint8_t buf[kBlock];
  for (uint64_t b = 0; !g_stop.load(std::memory_order_relaxed); ++b) {
    for (size_t i = 0; i < kBlock; ++i) buf[i] = pattern(b, i);
    size_t off = 0;
    while (off < kBlock) {
      ssize_t n = ::write(fd, buf + off, kBlock - off);
      if (n <= 0) {
        ::close(fd);
        return;
      }
      off += static_cast<size_t>(n);
    }
  }
  ::close(fd);
}

// Reads the blocks straight into `dst` (in the registered buffer) and checks each.
void pipe_reader(int fd, uint8_t* dst, std::atomic<uint64_t>& blocks, std::atomic<uint64_t>& torn) {
  for (uint64_t b = 0;; ++b) {
    size_t off = 0;
    while (off < kBlock) {
      ssize_t n = ::read(fd, dst + off, kBlock - off);
      if (n <= 0) return;  // the feeder stopped
      off += static_cast<size_t>(n);
    }
    for (size_t i = 0; i < kBlock; ++i)
      if (dst[i] != pattern(b, i)) {
        torn.fetch_add(1, std::memory_order_relaxed);
        break;
      }
    blocks.fetch_add(1, std::memory_order_relaxed);
  }
}

long arg_value(int& i, int argc, char** argv) {
  if (i + 1 >= argc) {
    std::fprintf(stderr, "reg_writes: %s needs a value\n", argv[i]);
    std::exit(2);
  }
  char* end = nullptr;
  long v = std::strtol(argv[++i], &end, 10);
  if (*end != '\0' || v <= 0) {
    std::fprintf(stderr, "reg_writes: bad value for %s: %s\n", argv[i - 1], argv[i]);
    std::exit(2);
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  long iterations = 2000, seconds = 60;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--iterations") {
      iterations = arg_value(i, argc, argv);
    } else if (a == "--seconds") {
      seconds = arg_value(i, argc, argv);
    } else if (a == "-h" || a == "--help") {
      std::printf("usage: vrdma_reg_writes [--iterations N] [--seconds S]\n");
      return 0;
    } else {
      std::fprintf(stderr, "reg_writes: unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  int num = 0;
  ibv_device** list = ibv_get_device_list(&num);
  if (!list || num == 0) {
    std::fprintf(stderr, "reg_writes: no RDMA device\n");
    return 2;
  }
  ibv_context* ctx = ibv_open_device(list[0]);
  ibv_pd* pd = ctx ? ibv_alloc_pd(ctx) : nullptr;
  if (!pd) {
    std::fprintf(stderr, "reg_writes: cannot open %s\n", ibv_get_device_name(list[0]));
    return 2;
  }
  const size_t len = kPages * kPage;
  auto* buf = static_cast<uint8_t*>(
      ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  if (buf == MAP_FAILED) return 2;
  std::memset(buf, 0, len);
  int fds[2];
  if (::pipe(fds) != 0) return 2;

  std::atomic<uint64_t> writes[2] = {0, 0}, lost{0}, blocks{0}, torn{0};
  std::thread w0(store_writer, reinterpret_cast<volatile uint64_t*>(buf + 3 * kPage + 64),
                 std::ref(writes[0]), std::ref(lost));
  std::thread w1(store_writer, reinterpret_cast<volatile uint64_t*>(buf + 40 * kPage + 8),
                 std::ref(writes[1]), std::ref(lost));
  std::thread feed(feeder, fds[1]);
  std::thread reader(pipe_reader, fds[0], buf + 20 * kPage - kBlock / 2, std::ref(blocks),
                     std::ref(torn));

  // Every thread writes before and while registrations run.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while ((writes[0] == 0 || writes[1] == 0 || blocks == 0) &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::yield();
  const uint64_t before[3] = {writes[0].load(), writes[1].load(), blocks.load()};
  long done = 0, failed = 0;
  const auto t0 = std::chrono::steady_clock::now();
  const int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  while (done < iterations && std::chrono::steady_clock::now() < deadline) {
    ibv_mr* mr = ibv_reg_mr(pd, buf, len, access);
    if (!mr) {
      std::fprintf(stderr, "reg_writes: ibv_reg_mr: %s\n", std::strerror(errno));
      ++failed;
      break;
    }
    if (ibv_dereg_mr(mr) != 0) {
      std::fprintf(stderr, "reg_writes: ibv_dereg_mr failed\n");
      ++failed;
      break;
    }
    ++done;
  }
  const double us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  const bool all_wrote = writes[0] > before[0] && writes[1] > before[1] && blocks > before[2];
  g_stop = true;
  w0.join();
  w1.join();
  feed.join();  // its last write may wait for the reader: it reads until the feeder closes
  reader.join();
  ::close(fds[0]);
  std::printf(
      "reg_writes: registrations %ld store_writes %llu lost %llu pipe_blocks %llu torn %llu "
      "us_per_registration %.1f\n",
      done, static_cast<unsigned long long>(writes[0] + writes[1]),
      static_cast<unsigned long long>(lost.load()), static_cast<unsigned long long>(blocks.load()),
      static_cast<unsigned long long>(torn.load()), done ? us / done : 0.0);
  ibv_dealloc_pd(pd);
  ibv_close_device(ctx);
  ibv_free_device_list(list);
  if (failed || !all_wrote) {
    if (!all_wrote) std::fprintf(stderr, "reg_writes: a thread made no write meanwhile\n");
    return 1;
  }
  return lost == 0 && torn == 0 ? 0 : 1;
}
