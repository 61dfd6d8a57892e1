"""Several router threads (vrdmad --router-threads 3 --router-links 2, on the routed path:
--no-direct-path): each lane's links belong
to one thread, bulk link k to thread k mod 2 and the latency class's link to the last, on the
host that opens them and on the host that accepts them (thread 0 accepts every link and hands
each, once its Hello authenticated it, to its lane's thread). Four container pairs run
vrdma_stress across hosts at once (every opcode, every byte checked) over the two bulk links,
while a latency-class pair (ib_write_lat --sl 1) runs on the third: no error, no corruption,
no loss, and each of the three threads of both hosts did work. A container limited to
100 MB/s whose two QPs ride the two bulk links (two threads) gets 100 MB/s in all: the
threads' schedulers share its token buckets.

VRDMA_STRESS names the vrdma_stress binary (set by CTest)."""

import time
import unittest

import conftest_path  # noqa: F401
from test_cross_host_load import StressPairs, find_stress
from vrdma_py.bench_proc import thread_stats
from vrdma_py.sandbox import ROUTED, Sandbox, container_ip, vrdma

PAIRS = 4
THREADS = 3
SECONDS = 8
SB = Sandbox(hosts=2, containers=PAIRS + 1,
             extra_args=[*ROUTED, "--daemon-arg=--router-links=2",
                         f"--daemon-arg=--router-threads={THREADS}"])
setUpModule = SB.up
tearDownModule = SB.down


def thread_cpu(pid):
    """CPU ticks (user + system) of each of vrdmad's router threads, by name."""
    return {name: int(f[11]) + int(f[12])
            for name, f in thread_stats(pid, "vrdmad-router").items()}


class RouterThreads(unittest.TestCase):
    def links(self, host, direction):
        return {l["lane"]: l for l in SB.status(host)["daemon"]["router"]["links"]
                if l["direction"] == direction}

    def test_lanes_on_their_threads_with_every_byte_checked(self):
        for h in ("h0", "h1"):
            self.assertEqual(SB.status(h)["daemon"]["router"]["threads"], THREADS)
        pids = {h: SB.status(h)["daemon"]["pid"] for h in ("h0", "h1")}
        before = {h: thread_cpu(pid) for h, pid in pids.items()}
        for h, ticks in before.items():
            self.assertEqual(sorted(ticks), [f"vrdmad-router{i}" for i in range(THREADS)], h)
        stress = find_stress()
        lat = f"h0c{PAIRS}", f"h1c{PAIRS}"
        pairs = StressPairs(SB, stress, PAIRS, SECONDS)
        lat_procs = []
        try:
            pairs.start_servers(self)
            lat_srv = SB.start(lat[1], "ib_write_lat", "-F", "--sl", "1", "-n", "20000", "-s",
                               "64")
            lat_procs.append(lat_srv)
            self.assertTrue(SB.wait_listening(lat[1], 18515, timeout=30))
            pairs.start_clients()
            lat_cli = SB.start(lat[0], "ib_write_lat", "-F", "--sl", "1", "-n", "20000", "-s",
                               "64", container_ip(lat[1]))
            lat_procs.append(lat_cli)
            results = pairs.wait()
            self.assertEqual(lat_cli.wait(120), 0, lat_cli.out)
            self.assertEqual(lat_srv.wait(30), 0, lat_srv.out)
        finally:
            pairs.kill()
            for p in lat_procs:
                p.kill()
        pairs.check(self, results)
        # Both ends of each lane's link on the lane's thread; each carried its traffic.
        want = {"main": 0, "bulk1": 1, "latency": THREADS - 1}
        for host, direction, key in (("h0", "out", "bytes_out"), ("h1", "in", "bytes_in")):
            got = self.links(host, direction)
            print(f"\n  {host} {direction}: " + ", ".join(
                f"{lane} thread {l['thread']} {l[key] / 1e6:.1f} MB"
                for lane, l in sorted(got.items())), flush=True)
            self.assertEqual(sorted(got), sorted(want), got)
            for lane, l in got.items():
                self.assertEqual(l["thread"], want[lane], f"{host} {lane}: {l}")
                self.assertGreater(l[key], 1 << 20 if lane != "latency" else 20000 * 64,
                                   f"{host} {lane} carried too little: {l}")
        # Every router thread of both hosts worked (ticks of CPU time while the pairs ran).
        for h, pid in pids.items():
            after = thread_cpu(pid)
            used = {n: after[n] - before[h][n] for n in after}
            print(f"  {h} router threads' CPU ticks: {used}", flush=True)
            for n, t in used.items():
                self.assertGreater(t, 0, f"{h}: {n} did nothing: {used}")

    def test_rate_limit_is_one_budget_over_the_threads(self):
        src, dst = "h0c0", "h1c0"
        ip = container_ip(src)
        vrdma("qos", "set", "--host", "h0", f"container={ip}:rate=100M")
        seconds, warmup, window = 10, 2.0, 5.0

        def sent():
            st = SB.status("h0")
            flows = [f for f in st.get("qos", []) if f["container"] == ip]
            links = {l["lane"]: l["bytes_out"] for l in st["daemon"]["router"]["links"]
                     if l["direction"] == "out"}
            return sum(f["bytes"] for f in flows), links, flows

        srv = SB.start(dst, "ib_write_bw", "-F", "-q", "2", "-D", str(seconds))
        procs = [srv]
        try:
            self.assertTrue(SB.wait_listening(dst, 18515, timeout=20))
            cli = SB.start(src, "ib_write_bw", "-F", "-q", "2", "-D", str(seconds),
                           container_ip(dst))
            procs.append(cli)
            time.sleep(warmup)
            t0, (b0, l0, _) = time.monotonic(), sent()
            time.sleep(window)
            t1, (b1, l1, flows) = time.monotonic(), sent()
            self.assertEqual(cli.wait(seconds + 60), 0, cli.out)
            self.assertEqual(srv.wait(30), 0, srv.out)
        finally:
            for p in procs:
                p.kill()
            vrdma("qos", "set", "--host", "h0", f"container={ip}")
        rate = (b1 - b0) / (t1 - t0)
        per_link = {lane: (l1.get(lane, 0) - l0.get(lane, 0)) / 1e6 for lane in ("main", "bulk1")}
        print(f"\n  limit 100 MB/s over two threads: {rate / 1e6:.1f} MB/s "
              f"(links: {per_link})", flush=True)
        # One flow per class in status, summed over the threads.
        self.assertEqual(len([f for f in flows if f["class"] == "bulk"]), 1, flows)
        for lane, mb in per_link.items():
            self.assertGreater(mb, 10, f"the {lane} link (its own thread) carried no share")
        self.assertAlmostEqual(rate / 1e8, 1.0, delta=0.1)


if __name__ == "__main__":
    unittest.main()
