"""The cluster's network policy governs RDMA connections: every connection between two containers
is set up over the pod network to the destination container's vrdma port (4791/tcp), so a
firewall rule that drops that traffic (what a NetworkPolicy implementation installs) makes the
connection fail as a fabric that drops packets would -- rdma_cm: RDMA_CM_EVENT_UNREACHABLE;
verbs: the QP's send ends in IBV_WC_RETRY_EXC_ERR -- and removing the rule lets a new connection
through. Across hosts the rule sits in the destination host's FORWARD chain; on one host (where
the containers' bridge does not pass through iptables) in the destination container's INPUT
chain. A victim pair whose traffic the rule does not name runs checked traffic throughout.

Unmodified ibv_rc_pingpong, rping and vrdma_stress (VRDMA_STRESS, set by CTest); needs root
(network namespaces, iptables)."""

import re
import subprocess
import time
import unittest

import conftest_path  # noqa: F401
from test_cross_host_load import PORT as STRESS_PORT
from test_cross_host_load import find_stress, summary
from mediated_common import rdma_cm_pair
from vrdma_py.perftest_output import bw_rows
from vrdma_py.sandbox import NETNS_PREFIX, Sandbox, container_ip

DIRECT_PORT = 4791
VICTIM_SECONDS = 10
SB = None


def setUpModule():
    global SB
    SB = Sandbox(hosts=2, containers=3)
    SB.up()


def tearDownModule():
    if SB:
        SB.down()


class Rule:
    """An iptables rule in a namespace of the sandbox, removed on exit."""

    def __init__(self, netns, chain, *match):
        self.cmd = ["ip", "netns", "exec", NETNS_PREFIX + netns, "iptables"]
        self.spec = [chain, *match, "-p", "tcp", "--dport", str(DIRECT_PORT), "-j", "DROP"]

    def __enter__(self):
        subprocess.run([*self.cmd, "-I", *self.spec], check=True, timeout=10)
        return self

    def __exit__(self, *exc):
        self.remove()

    def remove(self):
        subprocess.run([*self.cmd, "-D", *self.spec], check=False, timeout=10,
                       capture_output=True)


class Policy(unittest.TestCase):
    def pingpong(self, server, client):
        """ibv_rc_pingpong between the two containers: (client rc, client output)."""
        s = SB.start(server, "ibv_rc_pingpong", "-g", "0", "-n", "100")
        try:
            self.assertTrue(SB.wait_listening(server, 18515, timeout=30), s.out + s.err)
            rc, out, err = SB.run(client, "ibv_rc_pingpong", "-g", "0", "-n", "100",
                                  container_ip(server), timeout=60)
            s.wait(30)
        finally:
            s.kill()
        return rc, out + err

    def rping_blocked(self, server, client):
        """rping against a rule: the connect's probe of the vrdma port is dropped, whether the
        listener is up yet or not (rdma_cm listeners are no kernel sockets)."""
        s = SB.start(server, "rping", "-s", "-v", "-C", "5")
        try:
            time.sleep(1.5)
            rc, out, err = SB.run(client, "rping", "-c", "-v", "-C", "5", "-a",
                                  container_ip(server), timeout=60)
        finally:
            s.kill()
            s.wait(10)
        self.assertNotEqual(rc, 0, out + err)
        self.assertIn("RDMA_CM_EVENT_UNREACHABLE", out + err)

    def rping_passes(self, server, client):
        (src, sout, serr), (crc, cout, cerr) = rdma_cm_pair(
            SB, server, client, ["rping", "-s", "-v", "-C", "5"],
            ["rping", "-c", "-v", "-C", "5", "-a", container_ip(server)])
        report = f"server rc={src}\n{sout}{serr}\nclient rc={crc}\n{cout}{cerr}"
        self.assertEqual((src, crc), (0, 0), report)
        self.assertEqual(len(re.findall(r"ping data: rdma-ping-\d+", cout)), 5, report)

    def victim(self, server, client):
        """A vrdma_stress pair the rule does not name, started now; check_victim() ends it."""
        stress = find_stress()
        s = SB.start(server, stress)
        self.assertTrue(SB.wait_listening(server, STRESS_PORT, timeout=30), s.out + s.err)
        c = SB.start(client, stress, "--seconds", str(VICTIM_SECONDS), "--gid-index", "0",
                     container_ip(server))
        return s, c

    def check_victim(self, pair):
        s, c = pair
        try:
            crc = c.wait(VICTIM_SECONDS + 90)
            src = s.wait(60)
        finally:
            s.kill()
            c.kill()
        report = f"victim client rc={crc}\n{c.out}{c.err}\nserver rc={src}\n{s.out}{s.err}"
        self.assertEqual((crc, src), (0, 0), report)
        for side in (summary(c.out), summary(s.out)):
            self.assertIsNotNone(side, report)
            for k in ("errors", "corrupt", "lost"):
                self.assertEqual(side[k], 0, f"{k}: {report}")
        self.assertGreater(summary(c.out)["ops"], 0, report)
        print(f"  victim: {c.out.strip()}", flush=True)

    def blocked_then_allowed(self, rule, server, client, victim):
        pair = self.victim(*victim)
        try:
            with rule:
                rc, out = self.pingpong(server, client)
                self.assertNotEqual(rc, 0, out)
                self.assertIn("transport retry counter exceeded (12)", out,
                              "the blocked verbs connection must end in RETRY_EXC_ERR")
                self.rping_blocked(server, client)
            # The rule is gone: new connections get through.
            rc, out = self.pingpong(server, client)
            self.assertEqual(rc, 0, out)
            self.assertRegex(out, r"\d+ bytes in [\d.]+ seconds")
            self.rping_passes(server, client)
        finally:
            rule.remove()
            self.check_victim(pair)

    def test_across_hosts(self):
        # h0c0 -> h1c0 dropped in h1's FORWARD chain; h0c1 -> h1c0 goes on.
        rule = Rule("h1", "FORWARD", "-s", container_ip("h0c0"), "-d", container_ip("h1c0"))
        self.blocked_then_allowed(rule, "h1c0", "h0c0", victim=("h1c0", "h0c1"))

    def test_one_host(self):
        # h0c0 -> h0c1 dropped in h0c1's INPUT chain; h0c2 -> h0c1 goes on (shared memory).
        rule = Rule("h0c1", "INPUT", "-s", container_ip("h0c0"))
        self.blocked_then_allowed(rule, "h0c1", "h0c0", victim=("h0c1", "h0c2"))

    def test_rule_between_others_changes_nothing(self):
        # A rule naming h0c2 -> h1c2 leaves h0c0 -> h1c0 alone.
        with Rule("h1", "FORWARD", "-s", container_ip("h0c2"), "-d", container_ip("h1c2")):
            t = time.monotonic()
            rc, out = self.pingpong("h1c0", "h0c0")
            self.assertEqual(rc, 0, out)
            self.rping_passes("h1c0", "h0c0")
            self.assertLess(time.monotonic() - t, 60)


if __name__ == "__main__":
    unittest.main()


def direct_traffic(host, container):
    """A container's direct-path figures in its host's vrdma status (the kernel's socket
    statistics vrdmad reads), with the time they were read."""
    status = SB.status(host)
    for c in status["clients"]:
        if c["container"].endswith(container) and "direct_traffic" in c:
            return c["direct_traffic"], time.monotonic()
    raise AssertionError(f"no direct_traffic for {container} in {host}'s status: {status}")


class Metering(unittest.TestCase):
    def test_direct_traffic_is_counted_from_the_kernels_socket_statistics(self):
        # vrdmad moves none of the direct path's bytes: what it reports for each container is
        # what the kernel counted on the container's direct-port connections. While ib_write_bw
        # runs from h0c2 to h1c2, h0c2's sent bytes (on host 0) and h1c2's received bytes (on
        # host 1) grow at the rate ib_write_bw reports.
        server = SB.start("h1c2", "ib_write_bw", "-s", "65536", "-D", "5")
        try:
            self.assertTrue(SB.wait_listening("h1c2", 18515), server.err)
            client = SB.start("h0c2", "ib_write_bw", "-s", "65536", "-D", "5",
                              container_ip("h1c2"))
            try:
                time.sleep(2.0)
                (sent0, t0), (recv0, u0) = direct_traffic("h0", "h0c2"), direct_traffic("h1", "h1c2")
                time.sleep(1.5)
                (sent1, t1), (recv1, u1) = direct_traffic("h0", "h0c2"), direct_traffic("h1", "h1c2")
                self.assertEqual(client.wait(60), 0, client.err)
            finally:
                client.kill()
            self.assertEqual(server.wait(60), 0, server.err)
        finally:
            server.kill()
        rows = bw_rows(client.out)
        self.assertEqual(len(rows), 1, client.out)
        reported = rows[0][3] * 2**20  # perftest's MB: 2^20 bytes
        sent_rate = (sent1["sent_bytes"] - sent0["sent_bytes"]) / (t1 - t0)
        recv_rate = (recv1["received_bytes"] - recv0["received_bytes"]) / (u1 - u0)
        print(f"\nib_write_bw {reported / 1e6:.0f} MB/s; the kernel's counts: h0c2 sent "
              f"{sent_rate / 1e6:.0f} MB/s, h1c2 received {recv_rate / 1e6:.0f} MB/s")
        self.assertGreaterEqual(sent1["connections"], 1)
        for rate in (sent_rate, recv_rate):
            self.assertGreater(rate, 0.5 * reported)
            self.assertLess(rate, 2.0 * reported)
        # The other way only acknowledgements and responses: small next to the data.
        self.assertLess(sent1["received_bytes"] - sent0["received_bytes"],
                        0.1 * (sent1["sent_bytes"] - sent0["sent_bytes"]))
