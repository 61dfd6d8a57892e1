"""Faults between hosts: the underlay link cut under traffic (on the direct path, as every
connection between two containers of a tenant goes), a host's vrdmad killed (on the routed
path, which it carries), the etcd directory stopped. Unmodified programs; each case builds its
own two-host sandbox."""

import os
import re
import signal
import subprocess
import sys
import time
import unittest

import conftest_path  # noqa: F401
from vrdma_py.perftest_output import bw_rows
from test_cross_host_load import PORT as STRESS_PORT
from test_cross_host_load import check_stress_pair, find_stress
from vrdma_py.sandbox import NETNS_PREFIX, ROUTED, VRDMAD, Sandbox, container_ip

SERVER, CLIENT = "h1c0", "h0c0"
# perftest's RC attributes: timeout 14 (4.096 us << 14 = 67 ms), retry_cnt 7: a lost peer must
# turn into IBV_WC_RETRY_EXC_ERR after 8 x 67 ms = 0.54 s. Allow for scheduling on a busy
# 2-core machine, but far less than any TCP timeout.
RETRY_BOUND_S = 0.54
SLACK_S = 2.5
RETRY_EXC_ERR = 12


def underlay(*args):
    subprocess.run(["ip", "netns", "exec", NETNS_PREFIX + "net", "ip", "link", *args], check=True,
                   timeout=10)


def start_bw(sb, seconds):
    """ib_write_bw for `seconds` between SERVER and CLIENT; returns (server, client) once the
    client has started sending."""
    server = sb.start(SERVER, "ib_write_bw", "-F", "-D", str(seconds))
    if not sb.wait_listening(SERVER, 18515):
        raise AssertionError("ib_write_bw server never listened")
    client = sb.start(CLIENT, "ib_write_bw", "-F", "-D", str(seconds), container_ip(SERVER))
    return server, client


def wait_exit(proc, timeout):
    """Seconds until the process ended (None if it did not within timeout)."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if proc.popen.poll() is not None:
            return time.monotonic() - start
        time.sleep(0.01)
    return None


def wait_traffic(sb, host="h0", timeout=20, path="direct"):
    """Waits until the QPs of `host` have sent data (traffic is flowing), on `path`."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        qps = [q for q in sb.qps(host) if q.get("path") == path]
        if sum(q.get("tx_bytes", 0) for q in qps) > 8 << 20:
            return
        time.sleep(0.05)
    raise AssertionError(f"no traffic from {host} on the {path} path: {sb.qps(host)}")


def run_bw_pair(test, sb, timeout=60):
    (src, sout, serr), (crc, cout, cerr) = sb.pair(
        ["ib_write_bw", "-F", "-n", "2000"],
        ["ib_write_bw", "-F", "-n", "2000", container_ip(SERVER)], SERVER, CLIENT,
        timeout=timeout)
    test.assertEqual((src, crc), (0, 0), f"{sout}{serr}\n{cout}{cerr}")
    test.assertTrue(bw_rows(cout), cout)


class LinkCut(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.sb = Sandbox(hosts=2, containers=1)
        cls.sb.up()

    @classmethod
    def tearDownClass(cls):
        try:
            underlay("set", "h1", "up")
        except Exception:  # noqa: BLE001 - the sandbox may already be gone
            pass
        cls.sb.down()

    def test_cut_fails_qps_within_their_timeout_and_restore_works(self):
        sb = self.sb
        server, client = start_bw(sb, 30)
        wait_traffic(sb)
        underlay("set", "h1", "down")
        elapsed = wait_exit(client, RETRY_BOUND_S + SLACK_S)
        print(f"link cut: client failed after {elapsed} s", file=sys.stderr)
        try:
            self.assertIsNotNone(elapsed, "the client did not fail after the link was cut")
            rc = client.wait(5)
            self.assertNotEqual(rc, 0)
            self.assertRegex(client.out + client.err, rf"[Ss]tatus {RETRY_EXC_ERR}\b",
                             "the client's QP did not end with IBV_WC_RETRY_EXC_ERR")
            self.assertGreater(elapsed, 0.1)
        finally:
            underlay("set", "h1", "up")
        # The server was waiting on its TCP exchange with the client: once the link is back
        # it hears that the client went away.
        if wait_exit(server, 30) is None:
            server.kill()
        server.wait(10)
        # New connections work over the restored link.
        run_bw_pair(self, sb)


class HostLoss(unittest.TestCase):
    """vrdmad carries the routed path: its death is a switch's, its peers' QPs fail."""

    @classmethod
    def setUpClass(cls):
        cls.sb = Sandbox(hosts=2, containers=1, extra_args=ROUTED)
        cls.sb.up()

    @classmethod
    def tearDownClass(cls):
        cls.sb.down()

    def test_killed_vrdmad_fails_remote_peers_and_its_entries_expire(self):
        sb = self.sb
        before = sb.etcd_get("/vrdma/hosts/")
        self.assertIn("/vrdma/hosts/1/info", before)
        server, client = start_bw(sb, 30)
        wait_traffic(sb, path="routed")
        pid = next(h["pid"] for h in sb.state()["hosts"] if h["name"] == "h1")
        os.kill(pid, signal.SIGKILL)
        elapsed = wait_exit(client, RETRY_BOUND_S + SLACK_S)
        print(f"vrdmad killed: remote client failed after {elapsed} s", file=sys.stderr)
        self.assertIsNotNone(elapsed, "the remote client did not fail when vrdmad died")
        self.assertNotEqual(client.wait(5), 0)
        self.assertRegex(client.out + client.err, r"[Ss]tatus \d+|[Ee]rror")
        server.kill()
        server.wait(10)
        # Its lease (5 s) runs out and every entry of host 1 goes.
        end = time.monotonic() + 20
        keys = None
        while time.monotonic() < end:
            keys = sb.etcd_get("/vrdma/")
            if not any(k.startswith("/vrdma/hosts/1/") for k in keys):
                break
            time.sleep(0.2)
        else:
            self.fail(f"host 1's directory entries did not expire: {keys}")
        self.assertIn("/vrdma/hosts/0/info", keys)


class DirectPathDaemonRestart(unittest.TestCase):
    """A host's vrdmad killed and started again under a vrdma_stress pair on the direct path:
    the data never passes through vrdmad, so the pair finishes clean."""

    @classmethod
    def setUpClass(cls):
        cls.sb = Sandbox(hosts=2, containers=1)
        cls.sb.up()

    @classmethod
    def tearDownClass(cls):
        cls.sb.down()

    def test_pair_on_the_direct_path_survives_a_vrdmad_restart(self):
        sb = self.sb
        stress = find_stress()
        server = sb.start(SERVER, stress)
        new_daemon = None
        try:
            self.assertTrue(sb.wait_listening(SERVER, STRESS_PORT, timeout=30), server.err)
            client = sb.start(CLIENT, stress, "--seconds", "8", "--gid-index", "0",
                              container_ip(SERVER))
            wait_traffic(sb, path="direct")
            new_daemon = []
            for host in ("h1", "h0"):  # the server's vrdmad, then the client's
                args = sb.daemon_args(host)
                os.kill(sb.daemon_pid(host), signal.SIGKILL)
                time.sleep(0.5)
                new_daemon.append(sb.start(host, VRDMAD, *args, lib=False))
                time.sleep(1.0)
            crc = client.wait(60)
            src = server.wait(30)
            check_stress_pair(self, "across both hosts' vrdmad restarts (h0c0 -> h1c0)", crc,
                              client, src, server)
            self.assertIn("lost vrdmad", client.err)
            self.assertIn("lost vrdmad", server.err)
        finally:
            server.kill()
            for d in new_daemon or []:
                d.kill(signal.SIGTERM)
                d.wait(10)


class EtcdOutage(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.sb = Sandbox(hosts=2, containers=1)
        cls.sb.up()

    @classmethod
    def tearDownClass(cls):
        try:
            cls.sb.etcd_start()
        except Exception:  # noqa: BLE001
            pass
        cls.sb.down()

    def rping(self):
        sb = self.sb
        ip = container_ip(SERVER)
        server = sb.start(SERVER, "rping", "-s", "-a", ip, "-C", "3")
        try:
            for _ in range(50):
                rc, out, err = sb.run(CLIENT, "rping", "-c", "-a", ip, "-C", "3", timeout=20)
                if rc == 0 or server.popen.poll() is not None:
                    break
                time.sleep(0.1)
            return rc, out + err
        finally:
            server.kill()
            server.wait(10)

    def test_established_traffic_continues_new_connections_wait_for_etcd(self):
        sb = self.sb
        rc, out = self.rping()
        self.assertEqual(rc, 0, out)
        server, client = start_bw(sb, 6)
        wait_traffic(sb)
        sb.etcd_stop()
        try:
            # Established: goes on to its end.
            self.assertEqual(client.wait(30), 0, client.out + client.err)
            self.assertEqual(server.wait(30), 0, server.out + server.err)
            self.assertTrue(bw_rows(client.out))
            # New: refused with a clear error while the directory is unavailable.
            rc, _, err = sb.run(CLIENT, "rping", "-c", "-a", container_ip(SERVER), "-C", "1",
                                timeout=20)
            self.assertNotEqual(rc, 0)
            self.assertIn("RDMA_CM_EVENT_ADDR_ERROR", err)
            self.assertIn("error -11", err)  # EAGAIN: try again, not "no such host"
            log = open(os.path.join(sb.state()["run_dir"], "h0", "vrdmad.log")).read()
            self.assertRegex(log, r"directory is unavailable|directory: .*unavailable")
        finally:
            sb.etcd_start()
        # Back: new connections work again (the daemons resynchronise within seconds).
        end = time.monotonic() + 30
        while True:
            rc, out = self.rping()
            if rc == 0 or time.monotonic() > end:
                break
            time.sleep(0.5)
        self.assertEqual(rc, 0, out)


if __name__ == "__main__":
    unittest.main()
