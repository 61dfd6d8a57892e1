"""UD multicast with rdmacm-utils' unmodified `mckey`: one sender and two receivers of one
tenant in three containers (on one host, or across two: VRDMA_E2E_TOPOLOGY=cross), every
message counted, and a receiver of another tenant that joins the same group and gets nothing;
and a member (mcast_member.py, over pyverbs' rdma_cm) that receives nothing once it left."""

import os
import subprocess
import threading
import time
import unittest

import conftest_path  # noqa: F401
from vrdma_py.sandbox import Sandbox, container_ip

CROSS = os.environ.get("VRDMA_E2E_TOPOLOGY", "") == "cross"
# Across hosts a join reaches the sender's host through the directory (etcd's watch), after the
# member's own host said "joined"; datagrams sent before that are lost, as on a fabric whose
# switches have not learnt the group yet. The senders start this much later.
DIRECTORY_SETTLE_S = 3.0 if CROSS else 0.0
if CROSS:
    # Host 0: the sender and one receiver; host 1: the other receiver and the other tenant.
    SB = Sandbox(hosts=2, containers=2,
                 extra_args=["--tenant", "red=10.77.0.0/24", "--tenant", "red=10.77.1.10/32",
                             "--tenant", "blue=10.77.1.11/32"])
    SENDER, RECEIVERS, OTHER_TENANT = "h0c0", ["h0c1", "h1c0"], "h1c1"
else:
    SB = Sandbox(hosts=1, containers=4,
                 extra_args=["--tenant", "red=10.77.0.10/31", "--tenant", "red=10.77.0.12/32",
                             "--tenant", "blue=10.77.0.13/32"])
    SENDER, RECEIVERS, OTHER_TENANT = "h0c0", ["h0c1", "h0c2"], "h0c3"
setUpModule = SB.up
tearDownModule = SB.down

GROUP = "224.1.2.3"
MEMBER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mcast_member.py")
COUNT = 20


class Streamed:
    """A program in a container whose output is read line by line as it comes (mckey writes
    through stdbuf -oL), so that a test can wait for what it prints."""

    def __init__(self, container, *cmd):
        self.proc = SB.start(container, "stdbuf", "-oL", "-eL", *cmd)
        self.lines = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.popen.stdout:
            self.lines.append(line.rstrip("\n"))

    def text(self):
        return "\n".join(self.lines)

    def wait_for(self, needle, timeout):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if any(needle in line for line in self.lines):
                return True
            if self.proc.popen.poll() is not None:
                self.reader.join(5)
                return any(needle in line for line in self.lines)
            time.sleep(0.05)
        return False

    def finish(self, timeout):
        """The exit status, or None if it was still running after `timeout` (then killed)."""
        try:
            rc = self.proc.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            rc = None
        self.proc.kill()
        self.proc.popen.wait(10)
        self.reader.join(10)
        return rc


def mckey(container, *args):
    return Streamed(container, "mckey", "-m", GROUP, "-b", container_ip(container), *args)


class Mckey(unittest.TestCase):
    def test_group_reaches_its_tenants_members_only(self):
        started = []
        try:
            # The receivers: each counts COUNT messages; a receiver of the same tenant that
            # waits for one more than is sent never completes (no message comes twice); the other
            # tenant's waits for a single one.
            rx = [mckey(c, "-C", str(COUNT)) for c in RECEIVERS]
            extra = mckey(RECEIVERS[0], "-C", str(COUNT + 1))
            other = mckey(OTHER_TENANT, "-C", "1")
            started = rx + [extra, other]
            for r in started:
                self.assertTrue(r.wait_for("mckey: joined dgid: ::ffff:" + GROUP, 60),
                                f"did not join:\n{r.text()}")
            time.sleep(DIRECTORY_SETTLE_S)
            sender = mckey(SENDER, "-s", "-C", str(COUNT))
            started.append(sender)
            self.assertEqual(sender.finish(60), 0, sender.text())
            self.assertIn("initiating data transfers", sender.text())
            for r, c in zip(rx, RECEIVERS):
                self.assertEqual(r.finish(60), 0, f"{c}:\n{r.text()}")
                self.assertIn("data transfers complete", r.text(), c)
                self.assertIn("return status 0", r.text(), c)
                self.assertNotIn("failure leaving", r.text(), c)
            # Everything sent has arrived at both receivers: the others have had their chance.
            self.assertIsNone(extra.finish(2), f"a message came twice:\n{extra.text()}")
            self.assertNotIn("data transfers complete", extra.text())
            self.assertIsNone(other.finish(1), f"another tenant received:\n{other.text()}")
            self.assertNotIn("data transfers complete", other.text())
        finally:
            for r in started:
                r.finish(0)


    def test_leaving_stops_delivery(self):
        # Across hosts the member is on the other host than the sender.
        where = RECEIVERS[-1]
        member = Streamed(where, "/usr/bin/python3", MEMBER, container_ip(where), GROUP, "5")
        try:
            self.assertTrue(member.wait_for("joined", 60), member.text())
            time.sleep(DIRECTORY_SETTLE_S)
            first = mckey(SENDER, "-s", "-C", "5")
            self.assertEqual(first.finish(60), 0, first.text())
            self.assertTrue(member.wait_for("left", 60), member.text())
            self.assertIn("got 5", member.lines)
            second = mckey(SENDER, "-s", "-C", "5")
            self.assertEqual(second.finish(60), 0, second.text())
            self.assertIsNone(member.finish(2), f"the member stopped:\n{member.text()}")
            self.assertNotIn("late", member.lines, "a datagram came after the member left")
        finally:
            member.finish(0)


if __name__ == "__main__":
    unittest.main()
