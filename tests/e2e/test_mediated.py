"""The mediated path on one host: containers of tenants that `--allow red->blue` pairs connect
through vrdmad's router (a link from it to itself), never through shared memory; without a rule
they are refused as before.

h0c0 red, h0c1 blue, h0c2 green (no rule), h0c3 red (red's same-tenant peer, the direct path).
"""

import json
import os
import time
import unittest

import conftest_path  # noqa: F401
from vrdma_py.sandbox import Sandbox, container_ip

from mediated_common import BAD_RKEY, MediatedCases, pair

SB = Sandbox(hosts=1, containers=4,
             extra_args=["--tenant", "red=10.77.0.10/32", "--tenant", "blue=10.77.0.11/32",
                         "--tenant", "green=10.77.0.12/32", "--tenant", "red=10.77.0.13/32",
                         "--daemon-arg=--allow=red->blue"])
setUpModule = SB.up
tearDownModule = SB.down
RAW = os.path.join(os.path.dirname(os.path.abspath(__file__)), "raw_control.py")


def verbs_pid(container, timeout=20):
    """The pid of the verbs client of `container` that has a QP (vrdma status, as the host's
    administrator)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        for c in SB.status()["clients"]:
            if c.get("container") == container and c.get("kind") == "verbs" and c.get("qps"):
                return c["pid"], c["id"]
        time.sleep(0.1)
    raise AssertionError(f"no verbs client with a QP in {container}")


def memfd_inodes(pid):
    """Inodes of the memfds a process holds (descriptors) or maps."""
    inodes = set()
    fd_dir = f"/proc/{pid}/fd"
    for n in os.listdir(fd_dir):
        try:
            if os.readlink(f"{fd_dir}/{n}").startswith("/memfd:"):
                inodes.add(os.stat(f"{fd_dir}/{n}").st_ino)
        except OSError:
            pass  # closed meanwhile
    with open(f"/proc/{pid}/maps") as f:
        for line in f:
            parts = line.split(None, 5)
            if len(parts) == 6 and parts[5].startswith("/memfd:"):
                inodes.add(int(parts[4]))
    return inodes


class OneHost(MediatedCases, unittest.TestCase):
    SB = SB
    RED, BLUE, GREEN = "h0c0", "h0c1", "h0c2"

    def test_router_carries_the_pair(self):
        cmd = ["ibv_rc_pingpong", "-n", "50"]
        self.check_both(pair(SB, self.BLUE, self.RED, cmd, cmd + [container_ip(self.BLUE)]),
                        "ibv_rc_pingpong")
        st = SB.status()
        self.assertEqual(st["daemon"]["allow"], ["red->blue"])
        self.assertTrue(st["daemon"]["router"]["enabled"], st["daemon"])
        self.assertTrue(st["daemon"]["router"]["links"], "no link of the router to this host")

    def shared_memfds(self, server, client, prog_args):
        """Runs ib_write_bw between two containers and returns the memfd inodes each process
        holds of the other's (while both run)."""
        ip = container_ip(server)
        s = SB.start(server, "ib_write_bw", "-D", "5", *prog_args)
        try:
            self.assertTrue(SB.wait_listening(server, 18515))
            c = SB.start(client, "ib_write_bw", "-D", "5", *prog_args, ip)
            spid, _ = verbs_pid(server)
            cpid, _ = verbs_pid(client)
            time.sleep(1.5)  # both are sending and receiving
            own_s, own_c = memfd_inodes(spid), memfd_inodes(cpid)
            self.assertTrue(own_s and own_c, "no memfd found: the check would see nothing")
            self.assertEqual(c.wait(60), 0, c.out + c.err)
            self.assertEqual(s.wait(30), 0, s.out + s.err)
            return own_s, own_c
        finally:
            s.kill()
            s.wait(10)

    def test_no_memory_of_the_other_tenant_in_either_process(self):
        # Control: same-tenant peers share memory (the direct path), and the check sees it.
        red_a, red_b = self.shared_memfds(self.RED, "h0c3", [])
        self.assertTrue(red_a & red_b, "the direct path shares no memfd: the check sees nothing")
        # The mediated pair: no descriptor and no mapping of the other's memory, either way.
        red, blue = self.shared_memfds(self.RED, self.BLUE, [])
        self.assertEqual(red & blue, set(), "red and blue share memory")

    def grant(self, attacker):
        """vrdma_bad_rkey's server in red; `attacker` connects a raw QP to it as a legitimate
        peer and asks vrdmad for the server's MR and descriptors."""
        port = 18660
        s = SB.start(self.RED, BAD_RKEY, "--port", str(port))
        try:
            self.assertTrue(SB.wait_listening(self.RED, port))
            _, owner = verbs_pid(self.RED)
            rc, out, err = SB.run(attacker, "python3", RAW, "grant", container_ip(self.RED),
                                  str(port), "--owner", str(owner), lib=False, timeout=60)
            self.assertEqual(rc, 0, out + err)
            res = json.loads(out.strip().splitlines()[-1])
            self.assertNotIn("error", res, res)
            self.assertEqual(s.wait(30), 0, s.out + s.err)
            self.assertIn("server buffer untouched", s.out)
            return res
        finally:
            s.kill()
            s.wait(10)

    def test_raw_grant_requests_of_the_other_tenant_are_refused(self):
        # Control: a same-tenant peer connected this way gets the MR (the request is right).
        res = self.grant("h0c3")
        self.assertEqual(res["connect"], "ok", res)
        self.assertEqual(res["get_mr"], "ok", res)
        # Blue, connected to red's QP with red's consent, gets neither memory nor descriptors.
        res = self.grant(self.BLUE)
        self.assertNotEqual(res["get_mr"], "ok", res)
        self.assertEqual([k for k, v in res["get_fd"].items() if v == "ok"], [], res)


if __name__ == "__main__":
    unittest.main()
