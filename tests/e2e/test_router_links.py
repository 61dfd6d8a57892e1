"""Several bulk links per host pair (vrdmad --router-links 3): four container pairs run
vrdma_stress across hosts at once (every opcode, every byte checked); their QPs are spread over
the three TLS links h0 opens to h1 (lanes main, bulk1, bulk2), each of which carries traffic,
and no pair sees an error, a corruption or a loss. The routed path (vrdmad --no-direct-path):
the direct path would carry these pairs between the containers themselves.

VRDMA_STRESS names the vrdma_stress binary (set by CTest)."""

import unittest

import conftest_path  # noqa: F401
from test_cross_host_load import StressPairs, find_stress
from vrdma_py.sandbox import ROUTED, Sandbox

PAIRS = 4
LINKS = 3
SECONDS = 8
SB = Sandbox(hosts=2, containers=PAIRS, extra_args=[*ROUTED, f"--daemon-arg=--router-links={LINKS}"])
setUpModule = SB.up
tearDownModule = SB.down


class RouterLinks(unittest.TestCase):
    def bulk_links(self, host, outbound):
        return {l["lane"]: l for l in SB.status(host)["daemon"]["router"]["links"]
                if l["direction"] == ("out" if outbound else "in") and l["lane"] != "latency"}

    def test_bulk_qps_spread_over_the_links_with_every_byte_checked(self):
        self.assertEqual(SB.status("h0")["daemon"]["router"]["bulk_links_per_host"], LINKS)
        StressPairs(SB, find_stress(), PAIRS, SECONDS).run(self)
        # h0's links to h1: one per bulk lane, TLS, each carried requests; h1 accepted them.
        out = self.bulk_links("h0", True)
        print("\n  h0 -> h1 links: " + ", ".join(
            f"{lane} {l['bytes_out'] / 1e6:.1f} MB out" for lane, l in sorted(out.items())),
            flush=True)
        self.assertEqual(sorted(out), ["bulk1", "bulk2", "main"], out)
        for lane, l in out.items():
            self.assertEqual(l["security"], "tls", l)
            self.assertGreater(l["bytes_out"], 1 << 20, f"{lane} carried nothing: {l}")
        self.assertEqual(sorted(self.bulk_links("h1", False)), ["bulk1", "bulk2", "main"])


if __name__ == "__main__":
    unittest.main()
