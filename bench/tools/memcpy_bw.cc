// vrdma-bench-memcpy: single-thread memcpy bandwidth for each message size, the
// limit for any transport that copies once on one host. One JSON line per size:
//   {"size": 65536, "mb_s": 12345.6, "bytes": ..., "seconds": ...}
// Usage: vrdma-bench-memcpy [--ms MILLISECONDS] SIZE...
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace {

double now() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// Called through a volatile pointer so the compiler cannot see (and drop) the copies.
void* (*volatile copy_fn)(void*, const void*, size_t) = memcpy;

int usage() {
  std::fprintf(stderr, "usage: vrdma-bench-memcpy [--ms MILLISECONDS] SIZE...\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  double ms = 200;
  std::vector<size_t> sizes;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--ms" && i + 1 < argc) {
      ms = std::atof(argv[++i]);
    } else if (!a.empty() && a[0] != '-') {
      char* end = nullptr;
      unsigned long long v = std::strtoull(a.c_str(), &end, 10);
      if (*end || v == 0) return usage();
      sizes.push_back(v);
    } else {
      return usage();
    }
  }
  if (sizes.empty() || ms <= 0) return usage();

  for (size_t size : sizes) {
    void* src = nullptr;
    void* dst = nullptr;
    if (posix_memalign(&src, 4096, size) || posix_memalign(&dst, 4096, size)) {
      std::fprintf(stderr, "vrdma-bench-memcpy: cannot allocate 2 x %zu bytes\n", size);
      return 1;
    }
    memset(src, 0x5a, size);
    memset(dst, 0, size);
    // Check the clock about every 4 MiB copied (at least every copy).
    uint64_t batch = size >= (4u << 20) ? 1 : (4u << 20) / size;
    for (uint64_t i = 0; i < batch; ++i) copy_fn(dst, src, size);  // warm-up
    uint64_t copies = 0;
    double start = now(), end = start, limit = ms / 1000.0;
    do {
      for (uint64_t i = 0; i < batch; ++i) copy_fn(dst, src, size);
      copies += batch;
      end = now();
    } while (end - start < limit);
    double secs = end - start;
    double bytes = static_cast<double>(copies) * size;
    std::printf("{\"size\": %zu, \"mb_s\": %.2f, \"bytes\": %.0f, \"seconds\": %.6f}\n", size,
                bytes / secs / 1e6, bytes, secs);
    std::fflush(stdout);
    free(src);
    free(dst);
  }
  return 0;
}
