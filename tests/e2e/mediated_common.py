"""The mediated path between tenants, checked the same way on one host and across hosts.

A module defines a Sandbox whose vrdmad(s) run with `--allow red->blue` and names its
containers: RED and BLUE (the allowed pair), GREEN (a tenant no rule names), and, with GID set,
the GID index programs need across hosts. `MediatedCases` then runs real programs between them:
ibv_rc_pingpong -c, perftest, rping -v -V both ways of the one-way rule, and attacks from BLUE on
RED's memory while RED's traffic goes on.
"""

import os
import re
import threading
import time

import conftest_path  # noqa: F401
from vrdma_py.perftest_output import bw_rows, lat_rows
from vrdma_py.sandbox import container_ip

TOOLS = os.path.join(os.path.dirname(__file__), "..", "..", "build", "tests", "tools")
BAD_RKEY = os.environ.get("VRDMA_BAD_RKEY") or os.path.join(TOOLS, "vrdma_bad_rkey")


def pair(sb, server, client, server_cmd, client_cmd, port=18515, timeout=90):
    """A TCP-rendezvous pair (pingpong, perftest): both (rc, out, err)."""
    return sb.pair(server_cmd, client_cmd, server=server, client=client, port=port,
                   timeout=timeout)


def rdma_cm_pair(sb, server, client, server_cmd, client_cmd, timeout=60, attempts=20):
    """An rdma_cm pair (rping). rdma_cm listeners are no kernel sockets: a client that fails
    while the server still waits is started again (bounded). Returns both (rc, out, err)."""
    s = sb.start(server, *server_cmd)
    server_rc = []
    reader = threading.Thread(target=lambda: server_rc.append(s.wait(timeout + 30)))
    reader.start()
    c = None
    try:
        for _ in range(attempts):
            c = sb.start(client, *client_cmd)
            crc = c.wait(timeout)
            if crc == 0 or s.popen.poll() is not None:
                break
            time.sleep(0.2)
        reader.join(timeout + 40)
    finally:
        s.kill()
        if c:
            c.kill()
        reader.join(10)
    return (server_rc[0] if server_rc else None, s.out, s.err), (crc, c.out, c.err)


def ping_lines(out):
    return re.findall(r"ping data: rdma-ping-(\d+): (\S*)", out)


class MediatedCases:
    """Mixed into a unittest.TestCase; the module sets SB, RED, BLUE, GREEN, GID (list)."""
    SB = None
    RED = BLUE = GREEN = None
    GID = []

    def check_both(self, res, what):
        (src, sout, serr), (crc, cout, cerr) = res
        self.assertEqual(src, 0, f"{what}: server failed:\n{sout}\n{serr}")
        self.assertEqual(crc, 0, f"{what}: client failed:\n{cout}\n{cerr}")
        return sout, cout

    # ---- the allowed pair ------------------------------------------------------------------

    def test_pingpong_between_the_allowed_tenants(self):
        # The rule is one-way for initiating rdma_cm connections; QPs connect both ways (each
        # RTR names the other), so either side may be the pingpong server.
        for server, client in ((self.BLUE, self.RED), (self.RED, self.BLUE)):
            with self.subTest(server=server, client=client):
                cmd = ["ibv_rc_pingpong", "-c", "-n", "200", *self.GID]
                sout, cout = self.check_both(
                    pair(self.SB, server, client, cmd, cmd + [container_ip(server)]),
                    "ibv_rc_pingpong")
                self.assertIn("200 iters", cout)

    def test_perftest_between_the_allowed_tenants(self):
        gid = ["-x", "0"] if self.GID else []
        ip = container_ip(self.BLUE)
        for prog in ("ib_write_bw", "ib_read_bw"):
            with self.subTest(prog=prog):
                sout, cout = self.check_both(
                    pair(self.SB, self.BLUE, self.RED, [prog, *gid], [prog, *gid, ip]), prog)
                rows = bw_rows(cout)
                self.assertEqual([r[0] for r in rows], [65536], cout)
                self.assertGreater(rows[0][3], 0.0, cout)
        # UD: datagrams between the pair (through the router, checked there).
        sout, cout = self.check_both(
            pair(self.SB, self.BLUE, self.RED, ["ib_send_bw", "-c", "UD", *gid],
                 ["ib_send_bw", "-c", "UD", *gid, ip]), "ib_send_bw -c UD")
        rows = bw_rows(cout)
        self.assertEqual([r[0] for r in rows], [4096], cout)
        self.assertGreater(rows[0][3], 0.0, cout)
        sout, cout = self.check_both(
            pair(self.SB, self.BLUE, self.RED, ["ib_send_lat", "-s", "8", *gid],
                 ["ib_send_lat", "-s", "8", *gid, ip]), "ib_send_lat")
        rows = lat_rows(cout)
        self.assertTrue(rows, cout)
        self.assertEqual(rows[0][0], 8)

    def test_rping_in_the_allowed_direction(self):
        ip = container_ip(self.BLUE)
        n = 200
        sout, cout = self.check_both(
            rdma_cm_pair(self.SB, self.BLUE, self.RED,
                         ["rping", "-s", "-a", ip, "-v", "-V", "-C", str(n)],
                         ["rping", "-c", "-a", ip, "-v", "-V", "-C", str(n)]), "rping")
        for name, out in (("client", cout), ("server", sout)):
            seqs = sorted({int(i) for i, _ in ping_lines(out)})
            self.assertEqual(seqs, list(range(n)), f"{name}: missing ping data lines")
        self.assertNotIn("data mismatch", sout + cout)

    # ---- refusals --------------------------------------------------------------------------

    def rping_refused(self, server, client):
        ip = container_ip(server)
        s = self.SB.start(server, "rping", "-s", "-a", ip, "-C", "5")
        try:
            time.sleep(1.5)  # the listener is up (checked below: a same-tenant client gets in)
            rc, out, err = self.SB.run(client, "rping", "-c", "-a", ip, "-C", "5", timeout=30)
            self.assertNotEqual(rc, 0, f"{client} reached {server}'s listener:\n{out}{err}")
            self.assertRegex(out + err, r"REJECTED|UNREACHABLE|error")
            self.assertIsNone(s.popen.poll(), f"the server ended:\n{s.out}{s.err}")
        finally:
            s.kill()
            s.wait(10)

    def test_rping_against_the_rule_is_refused(self):
        # red->blue: blue's containers may not connect to red's listeners.
        self.rping_refused(self.RED, self.BLUE)

    def test_a_tenant_no_rule_names_is_refused(self):
        self.rping_refused(self.BLUE, self.GREEN)
        # QPs: the green client's sends never reach red's QP (its connect is refused as if the
        # QP did not exist): it times out, as on a fabric.
        server = self.SB.start(self.RED, "ibv_rc_pingpong", "-n", "20", *self.GID)
        try:
            self.assertTrue(self.SB.wait_listening(self.RED, 18515))
            rc, out, err = self.SB.run(self.GREEN, "ibv_rc_pingpong", "-n", "20", *self.GID,
                                       container_ip(self.RED), timeout=60)
            self.assertNotEqual(rc, 0, f"{self.GREEN} reached {self.RED}:\n{out}{err}")
            self.assertRegex(err + out, r"(?i)error|failed")
        finally:
            server.kill()
            server.wait(10)

    # ---- attacks from blue on red's memory -------------------------------------------------

    def test_blue_cannot_reach_red_memory_beyond_its_rkey(self):
        # Red's traffic goes on meanwhile: a mediated ib_write_bw between red and blue.
        gid = ["-x", "0"] if self.GID else []
        bw_server = self.SB.start(self.RED, "ib_write_bw", "-p", "18640", "-D", "12", *gid)
        try:
            self.assertTrue(self.SB.wait_listening(self.RED, 18640))
            bw_client = self.SB.start(self.BLUE, "ib_write_bw", "-p", "18640", "-D", "12", *gid,
                                      container_ip(self.RED))
            for i, mode in enumerate(("rkey", "bounds", "read")):
                with self.subTest(mode=mode):
                    port = 18650 + i
                    (src, sout, serr), (crc, cout, cerr) = pair(
                        self.SB, self.RED, self.BLUE, [BAD_RKEY, "--port", str(port)],
                        [BAD_RKEY, container_ip(self.RED), "--port", str(port), "--mode", mode],
                        port=port, timeout=60)
                    self.assertIn("status=remote access error", cout, cout + cerr)
                    self.assertEqual(crc, 0, cout + cerr)
                    self.assertIn("bad_rkey: server buffer untouched", sout, sout + serr)
                    self.assertEqual(src, 0, sout + serr)
            self.assertEqual(bw_client.wait(90), 0, bw_client.out + bw_client.err)
            self.assertEqual(bw_server.wait(30), 0, bw_server.out + bw_server.err)
            rows = bw_rows(bw_client.out)
            self.assertTrue(rows and rows[0][3] > 0, bw_client.out)
        finally:
            bw_server.kill()
            bw_server.wait(10)
