"""Tenants: containers of different tenants cannot reach each other's queues or
memory; containers of one tenant can."""

import unittest

import conftest_path  # noqa: F401
from vrdma_py.sandbox import Sandbox, container_ip

# h0c0 and h0c1 are tenant "red", h0c2 is tenant "blue".
SB = Sandbox(hosts=1, containers=3,
             extra_args=["--tenant", "red=10.77.0.10/31", "--tenant", "blue=10.77.0.12/32"])
setUpModule = SB.up
tearDownModule = SB.down


def pingpong(client):
    server = ["ibv_rc_pingpong", "-n", "20"]
    return SB.pair(server, server + [container_ip("h0c0")], server="h0c0", client=client,
                   timeout=60)


class Tenants(unittest.TestCase):
    def test_same_tenant_connects(self):
        (src, sout, serr), (crc, cout, cerr) = pingpong("h0c1")
        self.assertEqual((src, crc), (0, 0), serr + cerr)

    def test_other_tenant_is_refused(self):
        # The client's sends can never reach h0c0: they time out. (The server,
        # which only waits, would wait forever, as on a real fabric.)
        server = SB.start("h0c0", "ibv_rc_pingpong", "-n", "20")
        self.assertTrue(SB.wait_listening("h0c0", 18515))
        rc, out, err = SB.run("h0c2", "ibv_rc_pingpong", "-n", "20", container_ip("h0c0"),
                              timeout=60)
        server.kill()
        server.wait(10)
        self.assertNotEqual(rc, 0, "a container of another tenant reached h0c0")
        self.assertRegex(err + out, r"(?i)error|failed")
        st = SB.status()
        tenants = {c["container"]: c["tenant"] for c in st["clients"] if c["kind"] == "verbs"}
        self.assertNotIn("h0c2", [k for k, v in tenants.items() if v == "red"])


if __name__ == "__main__":
    unittest.main()
