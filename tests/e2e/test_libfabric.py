"""libfabric (Debian's libfabric-bin 1.17, unmodified) over vrdma between two containers, on one
host or on two (topology.py): fi_info finds the device through the verbs provider, and
fi_pingpong runs its message sizes with its data check (-c) over verbs MSG endpoints (rdma_cm
connections) and over RDM endpoints (ofi_rxm on verbs)."""

import re
import unittest

import conftest_path  # noqa: F401
from vrdma_py.sandbox import container_ip

from topology import CLIENT, CROSS, SB, SERVER  # noqa: E402
from vrdma_py.ucx_run import wait_tcp_listening  # noqa: E402

setUpModule = SB.up
tearDownModule = SB.down

# fi_pingpong's rows: bytes #sent #ack total time MB/sec usec/xfer Mxfers/sec
ROW = re.compile(r"^(\d+[kmg]?)\s+(\d+[kmg]?)\s+=(\d+[kmg]?)\s+\S+\s+([\d.]+)s\s+([\d.]+)\s+"
                 r"([\d.]+)\s+([\d.]+)\s*$", re.M)
SIZES = ["64", "256", "1k", "4k", "64k", "1m"]


def rows(text):
    return {m.group(1): m.groups() for m in ROW.finditer(text)}


class FiInfo(unittest.TestCase):
    def test_verbs_provider_lists_the_device(self):
        rc, out, err = SB.run(CLIENT, "fi_info", "-p", "verbs", timeout=60)
        self.assertEqual(rc, 0, out + err)
        blocks = out.split("provider: ")[1:]
        msg = [b for b in blocks if b.startswith("verbs\n") and "domain: vrdma0\n" in b
               and "type: FI_EP_MSG" in b]
        self.assertTrue(msg, f"no verbs MSG endpoint on vrdma0:\n{out}")
        rdm = [b for b in blocks if b.startswith("verbs;ofi_rxm") and "domain: vrdma0\n" in b
               and "type: FI_EP_RDM" in b]
        self.assertTrue(rdm, f"no verbs;ofi_rxm RDM endpoint on vrdma0:\n{out}")

    def test_every_provider_lists_without_crashing(self):
        # Every libfabric provider is loaded (and asked for its devices) with vrdma's
        # libraries in effect.
        rc, out, err = SB.run(CLIENT, "fi_info", "-l", timeout=60)
        self.assertEqual(rc, 0, out + err)
        self.assertIn("verbs:", out)


class Pingpong(unittest.TestCase):
    port = 47600

    def pingpong(self, provider, ep_type, iters):
        Pingpong.port += 1
        port = str(Pingpong.port)
        args = ["fi_pingpong", "-p", provider, "-e", ep_type, "-I", str(iters), "-c"]
        s = SB.start(SERVER, *args, "-B", port)
        try:
            self.assertTrue(wait_tcp_listening(SB, SERVER, port, s),
                            f"fi_pingpong server never listened:\n{s.out}\n{s.err}")
            c = SB.start(CLIENT, *args, "-P", port, container_ip(SERVER))
            crc = c.wait(300)
            src = s.wait(60)
        finally:
            s.kill()
        self.assertEqual(crc, 0, f"client failed:\n{c.out}\n{c.err}\nserver:\n{s.out}\n{s.err}")
        self.assertEqual(src, 0, f"server failed:\n{s.out}\n{s.err}")
        for out in (c.out, s.out):
            r = rows(out)
            for size in SIZES:
                self.assertIn(size, r, f"no {size} row:\n{out}")
                self.assertEqual(r[size][1], str(iters), r[size])
                self.assertEqual(r[size][2], str(iters), r[size])  # every message acknowledged
                self.assertGreater(float(r[size][5]), 0.0, r[size])  # usec/xfer
        self.assertNotRegex(c.out + c.err + s.out + s.err, r"(?i)data check error|corrupt")

    def test_verbs_msg_endpoints(self):
        self.pingpong("verbs", "msg", 20 if CROSS else 100)

    def test_rxm_rdm_endpoints_over_verbs(self):
        self.pingpong("verbs;ofi_rxm", "rdm", 10 if CROSS else 50)


if __name__ == "__main__":
    unittest.main()
