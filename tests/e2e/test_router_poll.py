"""Routers that poll after work (vrdmad --router-poll-us, on the routed path:
--no-direct-path): status says so; after routed traffic
a router thread goes on polling for that long (it uses CPU with nothing to do), then sleeps
again (an idle vrdmad uses no CPU, polling configured or not)."""

import time
import unittest

import conftest_path  # noqa: F401
from test_router_threads import thread_cpu
from vrdma_py.sandbox import ROUTED, Sandbox, container_ip, vrdma

POLL_US = 300_000
SB = Sandbox(hosts=2, containers=1, extra_args=[*ROUTED, f"--daemon-arg=--router-poll-us={POLL_US}"])
setUpModule = SB.up
tearDownModule = SB.down


def router_ticks():
    """CPU ticks (user + system, 1/100 s) of the router threads of both hosts."""
    return sum(sum(thread_cpu(SB.daemon_pid(host)).values()) for host in ("h0", "h1"))


class RouterPoll(unittest.TestCase):
    def test_status_names_the_polling_time(self):
        for host in ("h0", "h1"):
            self.assertEqual(SB.status(host)["daemon"]["router"]["poll_us"], POLL_US)
        text = vrdma("status", "--host", "h0").stdout
        self.assertIn(f"polls {POLL_US} us after work", text)

    def test_polls_after_work_then_sleeps(self):
        # Idle before any traffic: the routers sleep.
        before = router_ticks()
        time.sleep(1)
        self.assertLessEqual(router_ticks() - before, 2, "idle routers used CPU")
        (src, sout, serr), (crc, cout, cerr) = SB.pair(
            ["ib_send_lat", "-s", "8", "-n", "2000"],
            ["ib_send_lat", "-s", "8", "-n", "2000", container_ip("h1c0")],
            server="h1c0", client="h0c0", timeout=120)
        self.assertEqual((src, crc), (0, 0), cout + cerr + sout + serr)
        # The last frames were routed moments ago: the threads that carried them poll on for
        # 0.3 s (up to 30 ticks each) before they sleep.
        after = router_ticks()
        time.sleep(1)
        polled = router_ticks() - after
        self.assertGreaterEqual(polled, 8, f"routers used {polled} ticks after the traffic")
        # And then sleep: a second later they use nothing.
        quiet = router_ticks()
        time.sleep(1)
        self.assertLessEqual(router_ticks() - quiet, 2, "routers kept polling")


if __name__ == "__main__":
    unittest.main()
