"""Quality of service across hosts: senders in containers of h0 run ib_write_bw -D to
receivers on h1, all through h0's router on the one link between the two hosts (vrdmad
--no-direct-path: vrdmad enforces its QoS on the routed path, which a container with a rule
takes; these rules come at run time, after the pairs connected). Shares are read
from h0's `vrdma status` (bytes each container's flows sent, per class) over the same window
of one run, with the rules set at run time by `vrdma qos set`:
- weights 1 and 3: bytes within 10 % of 1:3;
- a container limited to 100 MB/s (rate=100M, 10^8 bytes/s) gets it within 10 %;
- 8 equal senders: Jain's fairness index >= 0.95;
- an ib_write_lat pair in the latency class (--sl 1) has a link of its own between the hosts,
  and its writes go in that class while a bulk pair saturates the main link (its p99 against
  the idle p99 is a timing: the benchmark measures it);
- the router threads run in the real-time class while their work comes in bursts, and a flood
  or a stream sends them back to the normal class (near half a core of work, a thread may
  alternate between the two while it lasts).
VRDMA_QOS_SECONDS sets each measured window (default 6 s)."""

import os
import re
import subprocess
import time
import unittest

import conftest_path  # noqa: F401
from vrdma_py.bench_proc import thread_stats
from vrdma_py.perftest_output import bw_rows, lat_rows
from vrdma_py.sandbox import ROUTED, Sandbox, container_ip, vrdma

PAIRS = 8
WINDOW = float(os.environ.get("VRDMA_QOS_SECONDS", "6"))
WARMUP = 3.0
METRICS_PORT = 19465
SB = Sandbox(hosts=2, containers=PAIRS,
             extra_args=[*ROUTED, f"--daemon-arg=--metrics-listen=127.0.0.1:{METRICS_PORT}"])
setUpModule = SB.up
tearDownModule = SB.down


def qos_bytes():
    """{container address: bytes its flows sent} from h0's status."""
    out = {}
    for f in SB.status("h0").get("qos", []):
        out[f["container"]] = out.get(f["container"], 0) + f["bytes"]
    return out


def qos_metric(name, ip):
    """The value of a vrdma_qos_* series of h0's metrics page for a container's bulk class."""
    netns = SB.state()["hosts"][0]["netns"]
    code = ("import sys, urllib.request\n"
            "sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())\n")
    page = subprocess.run(["ip", "netns", "exec", netns, "python3", "-c", code,
                           f"http://127.0.0.1:{METRICS_PORT}/metrics"],
                          capture_output=True, text=True, timeout=10, check=True).stdout
    m = re.search(rf'^{name}{{[^}}]*ip="{re.escape(ip)}"[^}}]*class="bulk"}} (\S+)$', page, re.M)
    if not m:
        raise AssertionError(f"no {name} for {ip} on the metrics page:\n{page}")
    return float(m.group(1))


def sample_during(read, start=2.0, count=6, every=0.2):
    """`count` readings of `read()`, `every` seconds apart, from `start` seconds on (inside a
    6-second run started just before). A router thread that a flood keeps awake about half the
    time may come back to the real-time class between two readings, and status and the
    kernel's view are read one after the other: one reading in which both say normal shows
    the demotion, where a single reading could catch it just promoted again."""
    time.sleep(start)
    out = []
    for _ in range(count):
        out.append(read())
        time.sleep(every)
    return out


def jain(xs):
    return sum(xs) ** 2 / (len(xs) * sum(x * x for x in xs))


class Qos(unittest.TestCase):
    def setUp(self):
        self.procs = []
        # Every test starts from the defaults.
        for i in range(PAIRS):
            vrdma("qos", "set", "--host", "h0", f"container={container_ip(f'h0c{i}')}")

    def tearDown(self):
        for p in self.procs:
            p.kill()
            try:
                p.popen.communicate(timeout=5)
            except Exception:
                pass

    def start_bulk(self, pairs, seconds):
        """ib_write_bw -D from h0c<i> to h1c<i> for each i in pairs."""
        servers = {}
        for i in pairs:
            servers[i] = SB.start(f"h1c{i}", "ib_write_bw", "-F", "-D", str(seconds))
            self.procs.append(servers[i])
        for i in pairs:
            self.assertTrue(SB.wait_listening(f"h1c{i}", 18515, timeout=20),
                            f"ib_write_bw server on h1c{i} never listened")
        clients = {}
        for i in pairs:
            clients[i] = SB.start(f"h0c{i}", "ib_write_bw", "-F", "-D", str(seconds),
                                  container_ip(f"h1c{i}"))
            self.procs.append(clients[i])
        return servers, clients

    def wait_all(self, procs, timeout):
        for p in procs:
            rc = p.wait(timeout)
            self.assertEqual(rc, 0, f"{p.name} failed:\n{p.out}\n{p.err}")

    def measure(self, pairs):
        """Bytes each sender's container sent in WINDOW seconds, after WARMUP."""
        seconds = int(WARMUP + WINDOW + 3)
        servers, clients = self.start_bulk(pairs, seconds)
        time.sleep(WARMUP)
        t0, b0 = time.monotonic(), qos_bytes()
        time.sleep(WINDOW)
        t1, b1 = time.monotonic(), qos_bytes()
        self.wait_all([*clients.values(), *servers.values()], seconds + 60)
        out = {}
        for i in pairs:
            ip = container_ip(f"h0c{i}")
            out[i] = (b1.get(ip, 0) - b0.get(ip, 0)) / (t1 - t0)
        return out

    def test_weights_one_and_three(self):
        vrdma("qos", "set", "--host", "h0", f"container={container_ip('h0c0')}:weight=1",
              f"container={container_ip('h0c1')}:weight=3")
        rates = self.measure([0, 1])
        ratio = rates[1] / rates[0]
        print(f"weights 1:3 -> {rates[0] / 1e6:.1f} MB/s : {rates[1] / 1e6:.1f} MB/s = 1:{ratio:.3f}")
        self.assertAlmostEqual(ratio, 3.0, delta=0.3, msg=f"rates {rates}")

    def test_rate_limit(self):
        # Alone on the link, so that the limit, not the neighbours, is what holds it back.
        vrdma("qos", "set", "--host", "h0", f"container={container_ip('h0c2')}:rate=100M")
        rates = self.measure([2])
        print(f"limit 100 MB/s -> {rates[2] / 1e6:.1f} MB/s")
        self.assertAlmostEqual(rates[2] / 1e8, 1.0, delta=0.1, msg=f"rates {rates}")
        show = vrdma("qos", "show", "--host", "h0").stdout
        self.assertIn(f"container={container_ip('h0c2')}:weight=1,rate=100M", show)
        # The metrics page carries the same flow: its rule, its bytes (at least what status
        # counted just before), and the holds of its limit.
        ip = container_ip("h0c2")
        status_bytes = qos_bytes()[ip]
        self.assertEqual(qos_metric("vrdma_qos_rate_limit_bytes_per_second", ip), 1e8)
        self.assertGreaterEqual(qos_metric("vrdma_qos_tx_bytes_total", ip), status_bytes)
        self.assertGreater(qos_metric("vrdma_qos_tx_messages_total", ip), 0)
        self.assertGreater(qos_metric("vrdma_qos_holds_total", ip), 0)
        self.assertGreater(qos_metric("vrdma_qos_queue_delay_seconds_total", ip), 0)

    def test_eight_equal_senders(self):
        rates = self.measure(list(range(PAIRS)))
        j = jain(list(rates.values()))
        print("8 equal senders (MB/s): " + " ".join(f"{r / 1e6:.1f}" for r in rates.values()) +
              f"; Jain's index {j:.4f}")
        self.assertGreaterEqual(j, 0.95, f"rates {rates}")

    def latency_p99(self, extra=(), sl=1):
        srv = SB.start("h1c5", "ib_write_lat", "-F", "--sl", str(sl), "-n", "1000", "-s", "8",
                       *extra)
        self.procs.append(srv)
        self.assertTrue(SB.wait_listening("h1c5", 18515, timeout=20))
        cli = SB.start("h0c5", "ib_write_lat", "-F", "--sl", str(sl), "-n", "1000", "-s", "8",
                       *extra, container_ip("h1c5"))
        self.procs.append(cli)
        self.wait_all([cli, srv], 120)
        rows = lat_rows(cli.out)
        self.assertTrue(rows, cli.out)
        return rows[0][7]  # 99% percentile, usec

    def test_latency_class_has_its_own_link(self):
        # An ib_write_lat pair with SL 1: its QPs connect on links of the latency lane, which
        # both routers opened and authenticated over mutual TLS as any link (the sandbox's
        # routers run TLS).
        self.latency_p99()
        for host, direction in (("h0", "out"), ("h1", "in"), ("h1", "out"), ("h0", "in")):
            links = SB.status(host)["daemon"]["router"]["links"]
            lat = [l for l in links if l["lane"] == "latency" and l["direction"] == direction]
            self.assertEqual(len(lat), 1, f"{host}: {links}")
            self.assertTrue(lat[0]["connected"], f"{host}: {links}")
            self.assertIn(lat[0]["security"], ("tls", "ktls"), f"{host}: {links}")
            self.assertGreater(lat[0]["bytes_in"] + lat[0]["bytes_out"], 1000, f"{host}: {links}")

    def latency_thread(self, host):
        """The latency thread's scheduling as status says it, and as the kernel does (its
        policy: 0 normal, 1 SCHED_FIFO)."""
        status = SB.status(host)["daemon"]
        lt = status["router"]["latency_thread"]
        stat = thread_stats(status["pid"]).get("vrdmad-router1")  # the last of two threads
        return lt["scheduling"], lt["realtime_demotions"], int(stat[38]) if stat else None

    def test_latency_thread_is_real_time_and_a_flood_sends_it_back(self):
        # Woken by a frame, the latency class's router thread takes a core at once (the
        # sandbox's vrdmad runs as root, with CAP_SYS_NICE): SCHED_FIFO.
        self.latency_p99()
        for h in ("h0", "h1"):
            sched, _, policy = self.latency_thread(h)
            self.assertEqual((sched, policy), ("realtime", 1), h)
            # Above the bulk thread's real-time priority (proc(5) field 40): a bulk pass on a
            # busy core does not hold the latency thread back.
            stats = thread_stats(SB.status(h)["daemon"]["pid"], "vrdmad-router")
            self.assertEqual(int(stats["vrdmad-router1"][37]), 2, h)
            self.assertEqual(int(stats["vrdmad-router0"][37]), 1, h)
        before = {h: self.latency_thread(h)[1] for h in ("h0", "h1")}
        # A container floods the latency class (ib_write_bw with SL 1): its routers' latency
        # threads run dry of real-time budget within milliseconds and are scheduled as any
        # other thread while it lasts, on both hosts.
        srv = SB.start("h1c5", "ib_write_bw", "-F", "--sl", "1", "-D", "6")
        self.procs.append(srv)
        self.assertTrue(SB.wait_listening("h1c5", 18515, timeout=20))
        cli = SB.start("h0c5", "ib_write_bw", "-F", "--sl", "1", "-D", "6", container_ip("h1c5"))
        self.procs.append(cli)
        during = sample_during(lambda: {h: self.latency_thread(h) for h in ("h0", "h1")})
        self.wait_all([cli, srv], 60)
        rows = bw_rows(cli.out)
        self.assertTrue(rows and rows[0][3] > 50, cli.out)  # MB/s: it did flood
        for h in ("h0", "h1"):
            seen = [d[h] for d in during]
            self.assertGreater(seen[-1][1], before[h], f"{h}: {seen}")
            self.assertIn(("normal", 0), [(s, p) for s, _, p in seen], f"{h}: {seen}")
        # Once it stops, latency traffic has the real-time class back.
        self.latency_p99()
        for h in ("h0", "h1"):
            self.assertEqual(self.latency_thread(h)[0::2], ("realtime", 1), h)
        text = vrdma("status", "--host", "h0").stdout
        self.assertRegex(text, r"latency thread real-time \(\d+ demotions?\)")

    def bulk_threads(self, host):
        """The bulk threads as status says (real-time now, how many, demotions) and the kernel's
        policy of the first, vrdmad-router0 (0 normal, 1 SCHED_FIFO)."""
        status = SB.status(host)["daemon"]
        bt = status["router"]["bulk_threads"]
        stat = thread_stats(status["pid"]).get("vrdmad-router0")
        return (bt["realtime"], bt["threads"], bt["realtime_demotions"],
                int(stat[38]) if stat else None)

    def test_bulk_threads_are_real_time_until_a_stream_sends_them_back(self):
        # Ping-pong in the bulk class (ib_write_lat, SL 0, both programs spinning on memory):
        # the bulk threads take a core at once when a frame or a doorbell wakes them.
        self.latency_p99(sl=0)
        for h in ("h0", "h1"):
            realtime, threads, _, policy = self.bulk_threads(h)
            self.assertEqual((realtime, threads, policy), (1, 1, 1), h)
        before = {h: self.bulk_threads(h)[2] for h in ("h0", "h1")}
        # A stream (ib_write_bw) keeps them awake: their budget runs dry within milliseconds and
        # they are scheduled as any thread while it lasts, on both hosts.
        servers, clients = self.start_bulk([0], 6)
        during = sample_during(lambda: {h: self.bulk_threads(h) for h in ("h0", "h1")})
        self.wait_all([*clients.values(), *servers.values()], 60)
        rows = bw_rows(clients[0].out)
        self.assertTrue(rows and rows[0][3] > 50, clients[0].out)  # MB/s: it did stream
        for h in ("h0", "h1"):
            self.assertGreater(during[-1][h][2], before[h], f"{h}: {during}")
        # The sender's router works all the time.
        h0 = [d["h0"] for d in during]
        self.assertIn((0, 0), [(r, p) for r, _, _, p in h0], f"h0: {h0}")
        # Once it stops, ping-pong has the real-time class back.
        self.latency_p99(sl=0)
        for h in ("h0", "h1"):
            realtime, threads, _, policy = self.bulk_threads(h)
            self.assertEqual((realtime, policy), (threads, 1), h)
        text = vrdma("status", "--host", "h0").stdout
        self.assertRegex(text, r"bulk threads real-time 1/1 \(\d+ demotions?\)")

    # The latency class under a saturating bulk pair on the same link: its writes go in the
    # latency class, on its own lane, and every round trip completes while the bulk pair keeps
    # the link loaded. How its p99 compares with the idle p99 (the target: within 2x) is a
    # timing, measured by the benchmark (bench/qos_fairness.py and vrdma bench's QoS section,
    # three rounds of each), not asserted here: on a 2-core host, where the CPU and not the link
    # sets these figures, it straddles the bar. The history, for reference: one router thread
    # gave ratios of 10.9 to 12.3; the latency lane on a thread of its own 2.4 to 3.0; that
    # thread at nice -10 cut the loaded p99 from a median 16.0 ms to 5.5 ms; the bulk program
    # napping while its router streams (engine/poll_backoff.h) raised the bulk pair from about
    # 400 to 470-729 MB/s with the loaded p99 at 2.7 to 8.0 ms; the idle p99 itself ranged from
    # 0.2 to 2 ms from run to run, and single rounds came out anywhere from 1.2x to 40x. The
    # latency thread in the real-time class brought the idle p99 to 51-79 us; loaded, two
    # spinning perftest processes and two bulk router threads share two cores, and the p99
    # (0.1 to 5.5 ms) is a spinner waiting for a scheduler tick.
    def test_latency_class_under_bulk(self):
        def h0c5_msgs(cls):
            return sum(f["msgs"] for f in SB.status("h0")["qos"]
                       if f["container"] == container_ip("h0c5") and f["class"] == cls)
        # (Other tests send bulk traffic from h0c5 too: only what this one adds counts.)
        bulk_before, latency_before = h0c5_msgs("bulk"), h0c5_msgs("latency")
        idle = sorted(self.latency_p99() for _ in range(3))[1]
        servers, clients = self.start_bulk([4], 40)
        time.sleep(WARMUP)
        before = qos_bytes().get(container_ip("h0c4"), 0)
        t0 = time.monotonic()
        loaded = [self.latency_p99() for _ in range(3)]
        bulk = (qos_bytes().get(container_ip("h0c4"), 0) - before) / (time.monotonic() - t0)
        for p in (*clients.values(), *servers.values()):
            p.kill()
        print(f"ib_write_lat p99: idle {idle:.2f} us (median of 3), under a bulk pair at "
              f"{bulk / 1e6:.0f} MB/s " + ", ".join(f"{x:.2f} us ({x / idle:.2f}x)" for x in loaded))
        # The latency pair's writes (6 runs of 1000) went in the latency class, none in bulk.
        self.assertGreaterEqual(h0c5_msgs("latency") - latency_before, 6000, SB.status("h0")["qos"])
        self.assertEqual(h0c5_msgs("bulk"), bulk_before, SB.status("h0")["qos"])
        self.assertGreater(bulk, 50e6, "the bulk pair did not load the link")


class SameHost(unittest.TestCase):
    """Rate limits between containers of one host, kept by the senders' library in pages
    vrdmad shares with each container (no router in the path)."""

    SRC, DST = "h0c6", "h0c7"

    def tearDown(self):
        vrdma("qos", "set", "--host", "h0", f"container={container_ip(self.SRC)}")

    def bw(self, *extra, clients=1, seconds=4):
        """The BW average (bytes/s) and message rate (msg/s) each client reports."""
        servers, procs = [], []
        try:
            for k in range(clients):
                srv = SB.start(self.DST, "ib_write_bw", "-F", "-D", str(seconds), "-p",
                               str(18515 + k), *extra)
                procs.append(srv)
                servers.append(srv)
                self.assertTrue(SB.wait_listening(self.DST, 18515 + k, timeout=20))
            clis = [SB.start(self.SRC, "ib_write_bw", "-F", "-D", str(seconds), "-p",
                             str(18515 + k), *extra, container_ip(self.DST))
                    for k in range(clients)]
            procs += clis
            out = []
            for p in (*clis, *servers):
                rc = p.wait(seconds + 60)
                self.assertEqual(rc, 0, f"{p.name} failed:\n{p.out}\n{p.err}")
            for c in clis:
                rows = bw_rows(c.out)
                self.assertTrue(rows, c.out)
                out.append((rows[0][3] * 1024 * 1024, rows[0][4] * 1e6))
            return out
        finally:
            for p in procs:
                p.kill()

    def test_byte_rate_limit_shared_by_the_containers_processes(self):
        vrdma("qos", "set", "--host", "h0", f"container={container_ip(self.SRC)}:rate=100M")
        one = self.bw()[0][0]
        two = [b for b, _ in self.bw(clients=2)]
        vrdma("qos", "set", "--host", "h0", f"container={container_ip(self.SRC)}")
        free = self.bw(seconds=2)[0][0]
        print(f"same host, limit 100 MB/s: one process {one / 1e6:.1f} MB/s, two processes "
              f"{two[0] / 1e6:.1f} + {two[1] / 1e6:.1f} MB/s; without the limit {free / 1e6:.0f} MB/s")
        self.assertAlmostEqual(one / 1e8, 1.0, delta=0.1)
        self.assertAlmostEqual(sum(two) / 1e8, 1.0, delta=0.1)
        self.assertGreater(free, 3e8, "without the limit the same pair should be far faster")

    def test_message_rate_limit(self):
        vrdma("qos", "set", "--host", "h0", f"container={container_ip(self.SRC)}:msgs=20k")
        _, rate = self.bw("-s", "8")[0]
        print(f"same host, limit 20 k messages/s: {rate / 1e3:.1f} k messages/s")
        self.assertAlmostEqual(rate / 2e4, 1.0, delta=0.1)


if __name__ == "__main__":
    unittest.main()
