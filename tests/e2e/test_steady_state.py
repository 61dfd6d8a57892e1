"""Steady state: the data path makes (almost) no system calls, and an idle
vrdmad uses no CPU."""

import os
import re
import time
import unittest

import conftest_path  # noqa: F401
from vrdma_py.sandbox import Sandbox, container_ip

SB = Sandbox(hosts=1, containers=2)
setUpModule = SB.up
tearDownModule = SB.down


def cpu_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def strace_total(path):
    with open(path) as f:
        text = f.read()
    m = re.search(r"^\s*100\.00\s+\S+\s+\S+\s+(\d+)\s+(?:\d+\s+)?total\s*$", text, re.M)
    if not m:
        raise AssertionError(f"no strace summary in:\n{text}")
    return int(m.group(1))


class SteadyState(unittest.TestCase):
    def test_syscalls_are_far_fewer_than_operations(self):
        iters = 200000
        out = "/tmp/vrdma-strace-client.txt"
        args = ["ib_write_bw", "-s", "64", "-n", str(iters)]
        (src, sout, serr), (crc, cout, cerr) = SB.pair(
            args, ["strace", "-f", "-c", "-o", out, *args, container_ip("h0c0")], timeout=180)
        self.assertEqual(crc, 0, cout + cerr)
        self.assertEqual(src, 0, sout + serr)
        calls = strace_total(out)
        os.unlink(out)
        # Setup and teardown make a few hundred calls; the 200000 writes none.
        self.assertLess(calls, iters / 100, f"{calls} system calls for {iters} operations")

    def test_idle_daemon_uses_no_cpu(self):
        pid = SB.daemon_pid()
        # A connected but idle program: a server waiting for its peer.
        s = SB.start("h0c0", "ibv_rc_pingpong")
        self.assertTrue(SB.wait_listening("h0c0", 18515))
        before = cpu_ticks(pid)
        prog_before = cpu_ticks(s.pid)
        time.sleep(3)
        self.assertLessEqual(cpu_ticks(pid) - before, 1, "vrdmad used CPU while idle")
        self.assertLessEqual(cpu_ticks(s.pid) - prog_before, 1, "an idle program used CPU")
        s.kill()
        s.wait(10)


if __name__ == "__main__":
    unittest.main()
