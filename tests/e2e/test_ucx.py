"""UCX (Debian's ucx-utils 1.13, unmodified) over vrdma between two containers, on one host or
on two (topology.py): ucx_info finds the device and its verbs transports, and ucx_perftest runs
the UCP tests with UCX's verbs transports (UCX_TLS, as on any RDMA device; UCX picks the device
itself) — with RC for data and UD for wire-up, and with UD alone — and with UCX's defaults
(which add its shared-memory transports: the sandbox's hosts share one machine). UCP's own report
of the transports it chose, and the QPs `vrdma status` shows in the containers, say the traffic
went through vrdma. (ucx_perftest 1.13 has no data check; the Open MPI suite checks data carried
by UCX over vrdma.)"""

import re
import unittest

import conftest_path  # noqa: F401
from vrdma_py.sandbox import container_ip

from topology import CLIENT, CROSS, SB, SERVER  # noqa: E402
from vrdma_py.ucx_run import DEVICE, StatusSampler, final_row, lanes, perftest_pair  # noqa: E402

setUpModule = SB.up
tearDownModule = SB.down

TLS = {"rc_ud": "rc_verbs,ud_verbs,self", "ud": "ud_verbs,self"}
# (test, message size, iterations, warm-up). Across hosts every message crosses two routers.
TESTS = [
    ("tag_lat", 8, 2000, 200),
    ("tag_bw", 65536, 500, 50),
    ("tag_bw", 1 << 20, 100, 10),   # rendezvous: the receiver reads the sender's buffer
    ("ucp_put_bw", 65536, 500, 50),
    ("ucp_get", 65536, 500, 50),
    ("stream_bw", 65536, 500, 50),
]
if CROSS:
    TESTS = [(t, s, max(20, n // 5), max(5, w // 5)) for t, s, n, w in TESTS]


def host_of(container):
    return re.match(r"(h\d+)c\d+", container).group(1)


class UcxInfo(unittest.TestCase):
    def test_device_and_its_verbs_transports(self):
        rc, out, err = SB.run(CLIENT, "ucx_info", "-d", timeout=60)
        self.assertEqual(rc, 0, err)
        # The vrdma memory domain's section: from its header to the next domain's.
        m = re.search(r"# Memory domain: vrdma0\n(.*?)(?=# Memory domain:|\Z)", out, re.S)
        self.assertIsNotNone(m, f"no vrdma0 memory domain in ucx_info -d:\n{out}")
        section = m.group(1)
        for tl in ("rc_verbs", "ud_verbs"):
            self.assertRegex(section, rf"Transport: {tl}\n#\s+Device: {DEVICE}\n", section)


class Perftest(unittest.TestCase):
    port = 13500

    def run_matrix(self, tls_name):
        tls = TLS[tls_name]
        allowed = set(tls.split(","))
        ip = container_ip(SERVER)
        for test, size, iters, warm in TESTS:
            with self.subTest(tls=tls, test=test, size=size):
                Perftest.port += 1
                (src, sout), (crc, cout) = perftest_pair(SB, SERVER, CLIENT, ip, tls, test, size,
                                                         iters, Perftest.port, warmup=warm)
                self.assertEqual(crc, 0, f"client failed:\n{cout}\nserver:\n{sout}")
                self.assertEqual(src, 0, f"server failed:\n{sout}")
                row = final_row(cout)
                self.assertIsNotNone(row, f"no Final row:\n{cout}")
                self.assertEqual(row["iters"], iters, cout)
                self.assertGreater(row["lat_avg_us"], 0.0, cout)
                if test != "tag_lat":
                    self.assertGreater(row["bw_overall_MBps"], 0.0, cout)
                # UCP's endpoints used vrdma's transports on vrdma's device, nothing else.
                used = lanes(cout) | lanes(sout)
                self.assertTrue(used, f"UCP reported no endpoint configuration:\n{cout}")
                remote = {(t, d) for t, d in used if t != "self"}
                self.assertTrue(remote, f"no transport to the peer in {used}")
                for t, d in remote:
                    self.assertIn(t, allowed, used)
                    self.assertEqual(d, DEVICE, used)
                if tls_name == "ud":
                    self.assertEqual({t for t, _ in remote}, {"ud_verbs"}, used)
                else:
                    self.assertIn("rc_verbs", {t for t, _ in remote}, used)

    def test_rc_with_ud(self):
        self.run_matrix("rc_ud")

    def test_ud_alone(self):
        self.run_matrix("ud")

    def test_ucx_defaults(self):
        # Nothing set: UCX registers its System V and POSIX shared memory with vrdma too, and
        # both must go on working (the pages of a segment stay the segment's).
        ip = container_ip(SERVER)
        for test, size in (("tag_bw", 1 << 20), ("ucp_put_bw", 65536), ("ucp_get", 65536),
                           ("stream_bw", 65536), ("ucp_am_bw", 65536), ("ucp_fadd", 8)):
            with self.subTest(test=test):
                Perftest.port += 1
                (src, sout), (crc, cout) = perftest_pair(SB, SERVER, CLIENT, ip, None, test, size,
                                                         200, Perftest.port, warmup=20)
                self.assertEqual(crc, 0, f"client failed:\n{cout}\nserver:\n{sout}")
                self.assertEqual(src, 0, f"server failed:\n{sout}")
                row = final_row(cout)
                self.assertIsNotNone(row, f"no Final row:\n{cout}")
                self.assertEqual(row["iters"], 200, cout)
                for text in (cout, sout):
                    self.assertNotIn(" UCX  ERROR", text)
                    self.assertNotIn("Unable to detach shared memory", text)

    def test_vrdma_status_shows_the_qps(self):
        # A longer run, sampled by `vrdma status` on the client's host: the client's QPs of
        # the transport UCX chose carry the traffic. Long enough (about a second at the
        # fastest) for the sampler to see the QPs while they work: RC on one host moves
        # 64 KiB messages at tens of GB/s.
        ip = container_ip(SERVER)
        for tls_name, qp_type, n in (("rc_ud", "RC", 20000 if CROSS else 200000),
                                     ("ud", "UD", 4000 if CROSS else 40000)):
            with self.subTest(tls=tls_name):
                Perftest.port += 1
                with StatusSampler(SB, host_of(CLIENT), [CLIENT], period=0.05) as sampler:
                    (src, sout), (crc, cout) = perftest_pair(
                        SB, SERVER, CLIENT, ip, TLS[tls_name], "tag_bw", 65536, n,
                        Perftest.port, warmup=n // 10)
                self.assertEqual(crc, 0, cout)
                self.assertEqual(src, 0, sout)
                self.assertGreater(sampler.seen.get((CLIENT, qp_type), 0), 0,
                                   f"no {qp_type} QP with traffic in {CLIENT}: {sampler.seen}")

    def test_peer_gone_fails_the_client_in_bounded_time(self):
        # The server is killed before the client connects its UCP endpoint: the client's
        # out-of-band connection fails and it exits non-zero; nothing hangs.
        Perftest.port += 1
        rc, out, err = SB.run(CLIENT, "ucx_perftest", container_ip(SERVER), "-p",
                              str(Perftest.port), "-t", "tag_lat", timeout=60)
        self.assertNotEqual(rc, 0, out + err)


if __name__ == "__main__":
    unittest.main()
