"""Implicit on-demand paging with an unmodified program: ibv_rc_pingpong -O registers one MR
over its whole address space (ibv_reg_mr(pd, NULL, SIZE_MAX, ON_DEMAND)) and posts its sends
and receives through it; -P prefetches the buffer first (ibv_advise_mr), -o is explicit ODP
beside it. Between two containers on one host, and with VRDMA_E2E_TOPOLOGY=cross across two
hosts (the router places the data into the ranges the owners registered on demand). -c checks
every byte received."""

import unittest

import conftest_path  # noqa: F401
from vrdma_py.sandbox import container_ip

from topology import CLIENT, GID, SB, SERVER
setUpModule = SB.up
tearDownModule = SB.down


class RcPingpongOdp(unittest.TestCase):
    def pingpong(self, size, *extra, iters=100):
        server = ["ibv_rc_pingpong", "-s", str(size), "-n", str(iters), "-c", *GID, *extra]
        client = server + [container_ip(SERVER)]
        (src, sout, serr), (crc, cout, cerr) = SB.pair(server, client, SERVER, CLIENT, timeout=60)
        self.assertEqual(src, 0, f"server failed:\n{sout}\n{serr}")
        self.assertEqual(crc, 0, f"client failed:\n{cout}\n{cerr}")
        for out, err in ((sout, serr), (cout, cerr)):
            self.assertRegex(out, rf"{size * iters * 2} bytes in [\d.]+ seconds")
            self.assertNotIn("not supported", out + err)
        self.assertNotIn("invalid data", sout + cout + serr + cerr)

    def test_implicit_odp(self):
        for size in (1, 4096, 65536, 1 << 20):
            with self.subTest(size=size):
                self.pingpong(size, "-O", iters=30 if size >= 65536 else 100)

    def test_implicit_odp_prefetched(self):
        self.pingpong(65536, "-O", "-P", iters=30)

    def test_explicit_odp(self):
        self.pingpong(4096, "-o")
