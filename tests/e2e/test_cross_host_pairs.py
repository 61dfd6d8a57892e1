"""Many pairs across hosts at once: 32 container pairs, each a client on h0 (h0c<i>) and a
server on h1 (h1c<i>), run ib_write_bw at the same time, and every pair finishes with no
error (a router busy with 32 QPs on one link must not fail healthy QPs with RETRY_EXC_ERR);
then 8 of those pairs run vrdma_stress with every opcode at once: 0 errors, 0 corruption, 0
loss.

VRDMA_STRESS names the vrdma_stress binary (set by CTest)."""

import re
import time
import unittest

import conftest_path  # noqa: F401
from test_cross_host_load import StressPairs, find_stress
from vrdma_py.sandbox import Sandbox, container_ip

PAIRS = 32
STRESS_PAIRS = 8
STRESS_SECONDS = 8
ITERS = "300"  # 64 KiB writes per pair: ~20 MB each, 600 MB in all
BW_ROW = re.compile(r"^\s*65536\s+(\d+)\s+([\d.]+)\s+([\d.]+)", re.M)

SB = Sandbox(hosts=2, containers=PAIRS)
setUpModule = SB.up
tearDownModule = SB.down


class ManyPairs(unittest.TestCase):
    def start_servers(self, n, *cmd, port):
        servers = [SB.start(f"h1c{i}", *cmd) for i in range(n)]
        for i in range(n):
            if not SB.wait_listening(f"h1c{i}", port, timeout=60):
                raise AssertionError(f"the server in h1c{i} never listened:\n"
                                     f"{servers[i].out}{servers[i].err}")
        return servers

    def test_1_thirty_two_ib_write_bw_pairs_finish(self):
        servers = self.start_servers(PAIRS, "ib_write_bw", "-F", "-n", ITERS, port=18515)
        t0 = time.monotonic()
        clients = [SB.start(f"h0c{i}", "ib_write_bw", "-F", "-n", ITERS, container_ip(f"h1c{i}"))
                   for i in range(PAIRS)]
        failures, total = [], 0.0
        for i in range(PAIRS):
            crc = clients[i].wait(150)
            src = servers[i].wait(60)
            c, s = clients[i], servers[i]
            row = BW_ROW.search(c.out)
            if crc != 0 or src != 0 or not row:
                failures.append(f"pair {i}: client rc={crc} server rc={src}\n"
                                f"client:\n{c.out}{c.err}\nserver:\n{s.out}{s.err}")
            else:
                total += float(row.group(3))
        elapsed = time.monotonic() - t0
        print(f"\n  {PAIRS} pairs of ib_write_bw (64 KiB, {ITERS} iterations each) in "
              f"{elapsed:.1f} s; sum of the pairs' averages {total:.0f} MB/s", flush=True)
        self.assertEqual(failures, [], f"{len(failures)} of {PAIRS} pairs failed:\n" +
                         "\n".join(failures[:4]))

    def test_2_eight_stress_pairs_every_opcode(self):
        StressPairs(SB, find_stress(), STRESS_PAIRS, STRESS_SECONDS).run(self)


if __name__ == "__main__":
    unittest.main()
