// vrdma-bench-reg: the cost of registering memory against its floor, for the evaluation suite
// (vrdma bench). Linked against vrdma's drop-in libibverbs.so.1; runs inside a sandbox
// container.
//
//   vrdma-bench-reg [--reps N] SIZE...
//
// For each size (bytes, rounded up to pages), N times each: the first touch of that many fresh
// anonymous pages (one write per page: what any use of new memory costs at least), and
// ibv_reg_mr then ibv_dereg_mr of as many pages already touched. Prints one JSON line per size
// with the medians in microseconds. Failures exit 1 with a message on stderr.
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace {

constexpr size_t kPage = 4096;

[[noreturn]] void die(const std::string& what, int err = 0) {
  if (err)
    std::fprintf(stderr, "vrdma-bench-reg: %s: %s\n", what.c_str(), strerror(err));
  else
    std::fprintf(stderr, "vrdma-bench-reg: %s\n", what.c_str());
  std::exit(1);
}

double now_us() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

uint8_t* fresh(size_t len) {
  void* p = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) die("mmap", errno);
  return static_cast<uint8_t*>(p);
}

void touch(uint8_t* p, size_t len) {
  for (size_t i = 0; i < len; i += kPage) p[i] = static_cast<uint8_t>(i >> 12 | 1);
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 5;
  std::vector<size_t> sizes;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--reps" && i + 1 < argc) {
      reps = std::atoi(argv[++i]);
      if (reps < 1 || reps > 10000) die("--reps: 1 to 10000");
    } else if (a == "-h" || a == "--help") {
      std::printf("usage: vrdma-bench-reg [--reps N] SIZE...\n");
      return 0;
    } else {
      char* end = nullptr;
      unsigned long long v = std::strtoull(a.c_str(), &end, 10);
      if (!end || *end || v == 0 || v > (1ull << 34)) die("bad size: " + a);
      sizes.push_back((v + kPage - 1) / kPage * kPage);
    }
  }
  if (sizes.empty()) die("no size given (--help)");
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (!list || n == 0) die("no RDMA device");
  ibv_context* ctx = ibv_open_device(list[0]);
  if (!ctx) die("ibv_open_device", errno);
  ibv_pd* pd = ibv_alloc_pd(ctx);
  if (!pd) die("ibv_alloc_pd", errno);
  const int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  for (size_t len : sizes) {
    std::vector<double> floor, reg, dereg;
    for (int r = 0; r < reps; ++r) {
      uint8_t* p = fresh(len);
      double t0 = now_us();
      touch(p, len);
      floor.push_back(now_us() - t0);
      ::munmap(p, len);
      p = fresh(len);
      touch(p, len);
      t0 = now_us();
      ibv_mr* mr = ibv_reg_mr(pd, p, len, access);
      double t1 = now_us();
      if (!mr) die("ibv_reg_mr", errno);
      if (int e = ibv_dereg_mr(mr)) die("ibv_dereg_mr", e);
      double t2 = now_us();
      reg.push_back(t1 - t0);
      dereg.push_back(t2 - t1);
      ::munmap(p, len);
    }
    std::printf("{\"size\": %zu, \"reps\": %d, \"first_touch_us\": %.1f, \"reg_us\": %.1f, "
                "\"dereg_us\": %.1f}\n",
                len, reps, median(floor), median(reg), median(dereg));
    std::fflush(stdout);
  }
  ibv_dealloc_pd(pd);
  ibv_close_device(ctx);
  ibv_free_device_list(list);
  return 0;
}
