"""A type-2 memory window between two containers, on one host and across two (through the
routers): the peer writes random bytes through the window's rkey and reads them back, then
invalidates the window with SEND_WITH_INV; the owner's receive carries IBV_WC_WITH_INV and the
rkey, and the peer's next write through it fails with IBV_WC_REM_ACCESS_ERR, the owner's memory
untouched (tests/tools/vrdma_mw_check.cc checks each step and prints it)."""

import os
import unittest

import conftest_path  # noqa: F401
from vrdma_py.sandbox import Sandbox, container_ip

HERE = os.path.dirname(os.path.abspath(__file__))
TOOLS = os.path.join(HERE, "..", "..", "build", "tests", "tools")
MW_CHECK = os.environ.get("VRDMA_MW_CHECK") or os.path.join(TOOLS, "vrdma_mw_check")

STEPS = ["bind", "window holds the peer's bytes",
         "receive carries IBV_WC_WITH_INV and the window's rkey",
         "memory untouched after invalidation"]
PEER_STEPS = ["write through the window", "read through the window returns the bytes",
              "send with invalidate", "write after invalidation refused"]


class MemoryWindows(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.sb = Sandbox(hosts=2, containers=2)
        cls.sb.up()

    @classmethod
    def tearDownClass(cls):
        cls.sb.down()

    def check_pair(self, owner, peer):
        (src, sout, serr), (crc, cout, cerr) = self.sb.pair(
            [MW_CHECK], [MW_CHECK, container_ip(owner)], owner, peer, timeout=60, port=18621)
        self.assertEqual((src, crc), (0, 0), f"owner:\n{sout}{serr}\npeer:\n{cout}{cerr}")
        for step in STEPS:
            self.assertIn(f"mw_check: {step}: ok", sout)
        for step in PEER_STEPS:
            self.assertIn(f"mw_check: {step}: ok", cout)
        self.assertIn("status=remote access error", cout)

    def test_one_host(self):
        self.check_pair("h0c0", "h0c1")

    def test_across_hosts(self):
        self.check_pair("h1c0", "h0c0")


if __name__ == "__main__":
    unittest.main()
