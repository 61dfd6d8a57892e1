/* mpi_check: an MPI program that checks its data, for two ranks.
 *
 *   mpi_check                 point-to-point of several sizes, collectives, MPI_Put/MPI_Get
 *                             (fence and passive target); every byte checked. Prints one
 *                             "ok <what>" line per part and "mpi_check: all checks passed".
 *   mpi_check pingpong SIZE ITERS
 *                             ping-pong of SIZE bytes, ITERS round trips after a warm-up (a
 *                             tenth as many, and at least half a second);
 *                             prints "pingpong size=S iters=N lat_us=L bw_MBps=B p50_us=M
 *                             p99_us=P max_us=X" (lat_us: the mean one-way latency; the
 *                             others: of half of each round trip, timed by rank 0).
 *
 * Each rank first prints "rank R of 2 runs in <where>" ($VRDMA_SANDBOX_NAME or the host name).
 * Any mismatch prints what differed and aborts the job with a non-zero status. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int rank, nranks;

static void fail(const char* what, size_t at, unsigned got, unsigned want) {
  fprintf(stderr, "mpi_check: rank %d: %s: byte %zu is 0x%02x, expected 0x%02x\n", rank, what, at,
          got, want);
  MPI_Abort(MPI_COMM_WORLD, 2);
}

/* A pattern that differs per size, round and direction, so a stale or misplaced buffer shows. */
static unsigned char pattern(size_t i, size_t size, int round, int dir) {
  uint32_t x = (uint32_t)(i * 2654435761u) ^ (uint32_t)(size * 40503u) ^
               (uint32_t)(round * 977 + dir * 131);
  return (unsigned char)(x ^ (x >> 11) ^ (x >> 23));
}

static void fill(unsigned char* b, size_t size, int round, int dir) {
  for (size_t i = 0; i < size; ++i) b[i] = pattern(i, size, round, dir);
}

/* On a mismatch, says where the wrong bytes are (how many, the first and the last, where the
 * buffer starts within its page) before failing at the first. */
static void check(const char* what, const unsigned char* b, size_t size, int round, int dir) {
  size_t bad = 0, first = 0, last = 0;
  for (size_t i = 0; i < size; ++i)
    if (b[i] != pattern(i, size, round, dir)) {
      if (!bad++) first = i;
      last = i;
    }
  if (!bad) return;
  fprintf(stderr, "mpi_check: rank %d: %s (round %d): %zu of %zu bytes wrong in [%zu, %zu], "
          "buffer at page offset %zu\n", rank, what, round, bad, size, first, last,
          (size_t)((uintptr_t)b & 4095));
  fail(what, first, b[first], pattern(first, size, round, dir));
}

static void* xmalloc(size_t n) {
  void* p = malloc(n ? n : 1);
  if (!p) {
    fprintf(stderr, "mpi_check: out of memory (%zu bytes)\n", n);
    MPI_Abort(MPI_COMM_WORLD, 3);
  }
  return p;
}

static void point_to_point(void) {
  static const size_t sizes[] = {1, 7, 64, 1000, 4096, 8193, 65536, 262144, 1048576, 4194304};
  const int rounds = 5;
  for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; ++s) {
    size_t size = sizes[s];
    unsigned char* buf = xmalloc(size);
    for (int r = 0; r < rounds; ++r) {
      if (rank == 0) {
        fill(buf, size, r, 0);
        MPI_Send(buf, (int)size, MPI_BYTE, 1, r, MPI_COMM_WORLD);
        memset(buf, 0, size);
        MPI_Recv(buf, (int)size, MPI_BYTE, 1, r, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        check("reply", buf, size, r, 1);
      } else if (rank == 1) {
        MPI_Status st;
        memset(buf, 0, size);
        MPI_Recv(buf, (int)size, MPI_BYTE, 0, r, MPI_COMM_WORLD, &st);
        int count = 0;
        MPI_Get_count(&st, MPI_BYTE, &count);
        if ((size_t)count != size) fail("message length", (size_t)count, 0, 0);
        check("message", buf, size, r, 0);
        fill(buf, size, r, 1);
        MPI_Send(buf, (int)size, MPI_BYTE, 0, r, MPI_COMM_WORLD);
      }
    }
    free(buf);
    if (rank == 0) printf("ok point-to-point %zu bytes x %d each way\n", size, rounds);
  }
  /* Non-blocking, both directions at once, several in flight. */
  const size_t size = 100000;
  const int inflight = 8;
  unsigned char* out = xmalloc(size * inflight);
  unsigned char* in = xmalloc(size * inflight);
  MPI_Request req[16];
  int peer = 1 - rank;
  for (int i = 0; i < inflight; ++i) {
    fill(out + i * size, size, i, rank);
    MPI_Irecv(in + i * size, (int)size, MPI_BYTE, peer, 100 + i, MPI_COMM_WORLD, &req[i]);
  }
  for (int i = 0; i < inflight; ++i)
    MPI_Isend(out + i * size, (int)size, MPI_BYTE, peer, 100 + i, MPI_COMM_WORLD,
              &req[inflight + i]);
  MPI_Waitall(2 * inflight, req, MPI_STATUSES_IGNORE);
  for (int i = 0; i < inflight; ++i) check("non-blocking", in + i * size, size, i, peer);
  free(out);
  free(in);
  if (rank == 0) printf("ok non-blocking exchange %d x %zu bytes each way\n", inflight, size);
}

static void collectives(void) {
  const int n = 250000;
  int64_t* v = xmalloc(n * sizeof *v);
  int64_t* sum = xmalloc(n * sizeof *sum);
  for (int i = 0; i < n; ++i) v[i] = (int64_t)i * (rank + 1) + rank * 1000003;
  MPI_Allreduce(v, sum, n, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  for (int i = 0; i < n; ++i) {
    int64_t want = 0;
    for (int r = 0; r < nranks; ++r) want += (int64_t)i * (r + 1) + r * 1000003;
    if (sum[i] != want) {
      fprintf(stderr, "mpi_check: rank %d: allreduce[%d] = %lld, expected %lld\n", rank, i,
              (long long)sum[i], (long long)want);
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
  }
  free(v);
  free(sum);
  if (rank == 0) printf("ok allreduce of %d int64\n", n);

  size_t size = 3 * 1000 * 1000 + 17;
  unsigned char* b = xmalloc(size);
  if (rank == 0) fill(b, size, 42, 2);
  else memset(b, 0, size);
  MPI_Bcast(b, (int)size, MPI_BYTE, 0, MPI_COMM_WORLD);
  check("bcast", b, size, 42, 2);
  free(b);
  if (rank == 0) printf("ok bcast of %zu bytes\n", size);

  int block = 70000;
  unsigned char* a_out = xmalloc((size_t)block * nranks);
  unsigned char* a_in = xmalloc((size_t)block * nranks);
  for (int r = 0; r < nranks; ++r) fill(a_out + (size_t)r * block, block, rank * 16 + r, 3);
  MPI_Alltoall(a_out, block, MPI_BYTE, a_in, block, MPI_BYTE, MPI_COMM_WORLD);
  for (int r = 0; r < nranks; ++r) check("alltoall", a_in + (size_t)r * block, block, r * 16 + rank, 3);
  free(a_out);
  free(a_in);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) printf("ok alltoall of %d bytes per rank, barrier\n", block);
}

static void one_sided(void) {
  static const size_t sizes[] = {8, 4096, 65536, 1048576};
  const size_t max = 1048576;
  unsigned char* base;
  MPI_Win win;
  MPI_Win_allocate((MPI_Aint)max, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
  unsigned char* local = xmalloc(max);
  int peer = 1 - rank;
  for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; ++s) {
    size_t size = sizes[s];
    /* MPI_Put with fences: each rank writes its pattern into the other's window. */
    MPI_Win_fence(0, win);
    memset(base, 0, max);
    MPI_Win_fence(0, win);
    fill(local, size, (int)s, 10 + rank);
    MPI_Put(local, (int)size, MPI_BYTE, peer, 0, (int)size, MPI_BYTE, win);
    MPI_Win_fence(0, win);
    check("put (fence)", base, size, (int)s, 10 + peer);
    /* MPI_Get with fences: each rank reads back what it put, from the other's window. */
    memset(local, 0, size);
    MPI_Get(local, (int)size, MPI_BYTE, peer, 0, (int)size, MPI_BYTE, win);
    MPI_Win_fence(0, win);
    check("get (fence)", local, size, (int)s, 10 + rank);
  }
  if (rank == 0) printf("ok MPI_Put/MPI_Get with fences, 8 B .. 1 MiB\n");

  /* Passive target: rank 0 locks rank 1's window, puts at an offset, gets it back. */
  MPI_Win_fence(0, win);
  memset(base, 0, max);
  MPI_Win_fence(0, win);
  if (rank == 0) {
    size_t size = 300000, off = 4096;
    fill(local, size, 77, 20);
    MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 1, 0, win);
    MPI_Put(local, (int)size, MPI_BYTE, 1, (MPI_Aint)off, (int)size, MPI_BYTE, win);
    MPI_Win_flush(1, win);
    memset(local, 0, size);
    MPI_Get(local, (int)size, MPI_BYTE, 1, (MPI_Aint)off, (int)size, MPI_BYTE, win);
    MPI_Win_unlock(1, win);
    check("get (lock)", local, size, 77, 20);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 1) {
    for (size_t i = 0; i < 4096; ++i)
      if (base[i]) fail("window before the put's offset", i, base[i], 0);
    MPI_Win_lock(MPI_LOCK_SHARED, 1, 0, win); /* local load after the epoch */
    check("put (lock)", base + 4096, 300000, 77, 20);
    MPI_Win_unlock(1, win);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) printf("ok MPI_Put/MPI_Get under MPI_Win_lock\n");
  free(local);
  MPI_Win_free(&win);
}

static int by_value(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

/* One exchange of the ping-pong: rank 0 sends, then receives the answer. */
static void round_trip(unsigned char* b, long size) {
  int peer = 1 - rank;
  if (rank == 0) {
    MPI_Send(b, (int)size, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
    MPI_Recv(b, (int)size, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  } else {
    MPI_Recv(b, (int)size, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Send(b, (int)size, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
  }
}

/* Rank 0 times every round trip: the mean says what the run took in all, the median what a
 * typical message took (a few slow round trips move the mean of a short run, not the
 * median). */
static int pingpong(long size, long iters) {
  unsigned char* b = xmalloc((size_t)size);
  double* rtt = rank == 0 ? xmalloc((size_t)iters * sizeof(double)) : NULL;
  memset(b, rank, (size_t)size);
  /* Warm-up: iters / 10 round trips, and at least kWarmSeconds of them, so that what a
   * transport sets up lazily (a connection it opens on the first messages and uses once it is
   * up, as UCX does) is done before the timing starts. Rank 0 says when it is over. */
  const double kWarmSeconds = 0.5;
  const long warm = iters / 10 + 1;
  const double warm_start = MPI_Wtime();
  for (long i = 0;; ++i) {
    if (i >= warm && i % 100 == 0) {
      int over = rank == 0 && MPI_Wtime() - warm_start >= kWarmSeconds;
      MPI_Bcast(&over, 1, MPI_INT, 0, MPI_COMM_WORLD);
      if (over) break;
    }
    round_trip(b, size);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  double start = MPI_Wtime();
  for (long i = 0; i < iters; ++i) {
    double t0 = MPI_Wtime();
    round_trip(b, size);
    if (rank == 0) rtt[i] = MPI_Wtime() - t0;
  }
  double t = MPI_Wtime() - start;
  if (rank == 0) {
    qsort(rtt, (size_t)iters, sizeof(double), by_value);
    /* One way: half a round trip. */
    double p50 = rtt[iters / 2] / 2 * 1e6, p99 = rtt[(iters * 99) / 100] / 2 * 1e6;
    printf("pingpong size=%ld iters=%ld lat_us=%.3f bw_MBps=%.3f p50_us=%.3f p99_us=%.3f "
           "max_us=%.3f\n",
           size, iters, t / iters / 2 * 1e6, 2.0 * size * iters / t / 1e6, p50, p99,
           rtt[iters - 1] / 2 * 1e6);
  }
  free(rtt);
  free(b);
  return 0;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  if (nranks != 2) {
    if (rank == 0) fprintf(stderr, "mpi_check: needs exactly 2 ranks (has %d)\n", nranks);
    MPI_Finalize();
    return 1;
  }
  if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
    if (rank == 0)
      printf("usage: mpi_check            checked point-to-point, collectives, one-sided\n"
             "       mpi_check pingpong SIZE ITERS\n");
    MPI_Finalize();
    return 0;
  }
  if (argc > 1 && !strcmp(argv[1], "pingpong")) {
    char* end1 = NULL;
    char* end2 = NULL;
    long size = argc > 2 ? strtol(argv[2], &end1, 10) : 8;
    long iters = argc > 3 ? strtol(argv[3], &end2, 10) : 1000;
    if ((end1 && *end1) || (end2 && *end2) || size < 1 || size > (1L << 30) || iters < 1) {
      if (rank == 0) fprintf(stderr, "mpi_check: pingpong SIZE (1..2^30) ITERS (>= 1)\n");
      MPI_Finalize();
      return 1;
    }
    pingpong(size, iters);
    MPI_Finalize();
    return 0;
  }
  if (argc > 1) {
    if (rank == 0) fprintf(stderr, "mpi_check: unknown argument %s (--help)\n", argv[1]);
    MPI_Finalize();
    return 1;
  }
  /* Where each rank runs: the sandbox container's name when there is one, else the host's. */
  char where[256] = "";
  const char* sandbox = getenv("VRDMA_SANDBOX_NAME");
  if (sandbox) snprintf(where, sizeof where, "%s", sandbox);
  else gethostname(where, sizeof where - 1);
  printf("rank %d of %d runs in %s\n", rank, nranks, where);
  fflush(stdout);
  MPI_Barrier(MPI_COMM_WORLD);
  point_to_point();
  collectives();
  one_sided();
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) printf("mpi_check: all checks passed\n");
  MPI_Finalize();
  return 0;
}
