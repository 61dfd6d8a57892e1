"""Unmodified perftest programs between two containers on one host; every
result row is parsed and checked for sanity."""

import unittest

import conftest_path  # noqa: F401
from vrdma_py.perftest_output import bw_rows, lat_rows
from vrdma_py.sandbox import container_ip

from topology import CLIENT, SB, SERVER
setUpModule = SB.up
tearDownModule = SB.down


def run_pair(test, prog, *args, timeout=240):
    server = [prog, *args]
    client = [prog, *args, container_ip(SERVER)]
    (src, sout, serr), (crc, cout, cerr) = SB.pair(server, client, SERVER, CLIENT, timeout=timeout)
    test.assertEqual(src, 0, f"{prog} server failed:\n{sout}\n{serr}")
    test.assertEqual(crc, 0, f"{prog} client failed:\n{cout}\n{cerr}")
    return sout, cout


class Bandwidth(unittest.TestCase):
    def check_bw(self, out, expect_sizes=None):
        r = bw_rows(out)
        self.assertTrue(r, f"no result rows in:\n{out}")
        for size, iters, peak, avg, rate in r:
            self.assertGreater(iters, 0)
            self.assertGreater(avg, 0.0, f"zero bandwidth at {size} B:\n{out}")
            self.assertGreater(rate, 0.0)
            self.assertLess(avg, 1e6, "implausible bandwidth")
        if expect_sizes:
            self.assertEqual([x[0] for x in r], expect_sizes)
        return r

    def test_default_options(self):
        for prog in ("ib_write_bw", "ib_read_bw", "ib_send_bw"):
            with self.subTest(prog=prog):
                sout, cout = run_pair(self, prog)
                self.check_bw(cout, [65536])

    def test_all_sizes(self):
        # Every size from 2 B to 8 MiB works and reports sane figures; 1 000 iterations per
        # size (perftest's default is 5 000: 84 GB in all, which measures the host, not
        # correctness; bench/ measures throughput).
        sizes = [2 ** i for i in range(1, 24)]
        for prog in ("ib_write_bw", "ib_read_bw", "ib_send_bw"):
            with self.subTest(prog=prog):
                sout, cout = run_pair(self, prog, "-a", "-n", "1000")
                self.check_bw(cout, sizes)

    def test_atomics(self):
        for kind in ("CMP_AND_SWAP", "FETCH_AND_ADD"):
            with self.subTest(kind=kind):
                sout, cout = run_pair(self, "ib_atomic_bw", "-A", kind)
                self.check_bw(cout, [8])

    def test_unreliable_transports_and_several_qps(self):
        cases = [("ib_send_bw", ["-c", "UD"], [4096]),  # UD: one MTU
                 ("ib_send_bw", ["-c", "UC"], [65536]),
                 ("ib_write_bw", ["-c", "UC"], [65536]),
                 ("ib_write_bw", ["-q", "4"], [65536])]
        for prog, args, sizes in cases:
            with self.subTest(prog=prog, args=args):
                sout, cout = run_pair(self, prog, *args)
                self.check_bw(cout, sizes)


    def test_many_qps_finish_together(self):
        # perftest stops polling once the completions it counted (100 per signalled one) reach
        # its total, and with 3 125 writes per QP the last QPs' count short of it: a QP served
        # far behind its siblings never finishes. Each QP must get its turns, as on a NIC.
        sout, cout = run_pair(self, "ib_write_bw", "-q", "32", "-s", "4096", "-n", "3125",
                              timeout=120)
        r = self.check_bw(cout, [4096])
        self.assertEqual(r[0][1], 32 * 3125)


class Latency(unittest.TestCase):
    def check_lat(self, out, expect_sizes=None):
        r = lat_rows(out)
        self.assertTrue(r, f"no result rows in:\n{out}")
        for size, iters, tmin, tmax, typ, avg, stdev, p99, p999 in r:
            self.assertGreater(iters, 0)
            self.assertGreater(typ, 0.0)
            self.assertLessEqual(tmin, typ)
            self.assertLessEqual(typ, tmax)
            self.assertLess(typ, 1e5, "implausible latency")
        if expect_sizes:
            self.assertEqual([x[0] for x in r], expect_sizes)

    def test_default_options(self):
        for prog in ("ib_write_lat", "ib_read_lat", "ib_send_lat"):
            with self.subTest(prog=prog):
                sout, cout = run_pair(self, prog)
                self.check_lat(cout, [2])

    def test_all_sizes(self):
        sizes = [2 ** i for i in range(1, 24)]
        for prog in ("ib_write_lat", "ib_read_lat", "ib_send_lat"):
            with self.subTest(prog=prog):
                sout, cout = run_pair(self, prog, "-a")
                self.check_lat(cout, sizes)

    def test_atomics(self):
        for kind in ("CMP_AND_SWAP", "FETCH_AND_ADD"):
            with self.subTest(kind=kind):
                sout, cout = run_pair(self, "ib_atomic_lat", "-A", kind)
                self.check_lat(cout, [8])

    def test_ud(self):
        sout, cout = run_pair(self, "ib_send_lat", "-c", "UD")
        self.check_lat(cout, [2])


if __name__ == "__main__":
    unittest.main()
