"""Unmodified rdma_cm programs (rdmacm-utils, perftest -R) between two containers (on one
host, or on two: see topology.py), connecting by the containers' IP addresses, and rdma_cm's errors."""

import re
import threading
import time
import unittest

import conftest_path  # noqa: F401
from vrdma_py.perftest_output import bw_rows, lat_rows
from vrdma_py.sandbox import container_ip

from topology import CLIENT, SB, SERVER  # noqa: E402

setUpModule = SB.up
tearDownModule = SB.down


def run_pair(test, server_cmd, client_cmd, timeout=120, attempts=50):
    """Starts an rdma_cm server, then its client. rdma_cm listeners are no kernel sockets,
    so there is no port to wait for: a client that fails while the server still waits (it
    came before the server listened, and was rejected at once) is started again (bounded).
    The server's output is read while the client runs (rping -v fills a pipe)."""
    s = SB.start(SERVER, *server_cmd)
    server_rc = []
    reader = threading.Thread(target=lambda: server_rc.append(s.wait(timeout + 30)))
    reader.start()
    try:
        for _ in range(attempts):
            c = SB.start(CLIENT, *client_cmd)
            crc = c.wait(timeout)
            if crc == 0 or s.popen.poll() is not None:
                break
            time.sleep(0.1)
        reader.join(timeout + 60)
    finally:
        s.kill()
        reader.join(30)
    test.assertEqual(crc, 0, f"client failed:\n{c.out}\n{c.err}")
    test.assertEqual(server_rc, [0], f"server failed:\n{s.out}\n{s.err}")
    return s.out + s.err, c.out + c.err


def ping_lines(text):
    return re.findall(r"rdma-ping-(\d+): ([\x20-\x7e]+)", text)


class Rping(unittest.TestCase):
    def test_rping_verified_data(self):
        n = 1000
        ip = container_ip(SERVER)
        sout, cout = run_pair(self, ["rping", "-s", "-a", ip, "-v", "-C", str(n)],
                              ["rping", "-c", "-a", ip, "-v", "-C", str(n)])
        for name, out in (("client", cout), ("server", sout)):
            lines = ping_lines(out)
            seqs = sorted({int(i) for i, _ in lines})
            self.assertEqual(seqs, list(range(n)), f"{name}: missing ping data lines")
            for i, data in lines:
                # rping's pattern: ping i starts with chr(65 + i % 58) and counts up, wrapping
                # from 'z' (122) to 'A'.
                c = 65 + int(i) % 58
                want = "".join(chr(65 + (c - 65 + k) % 58) for k in range(min(len(data), 40)))
                self.assertEqual(data[:len(want)], want, f"{name}: ping {i}")
        self.assertNotIn("data mismatch", sout + cout)

    def test_rping_sizes(self):
        ip = container_ip(SERVER)
        for size in (64, 65535):  # rping's largest
            with self.subTest(size=size):
                run_pair(self, ["rping", "-s", "-a", ip, "-C", "50", "-S", str(size)],
                         ["rping", "-c", "-a", ip, "-v", "-C", "50", "-S", str(size)])


class Examples(unittest.TestCase):
    def test_rdma_server_client(self):
        sout, cout = run_pair(self, ["rdma_server"],
                              ["rdma_client", "-s", container_ip(SERVER)])
        self.assertIn("rdma_server: end 0", sout)
        self.assertIn("rdma_client: end 0", cout)

    def test_rdma_server_client_other_port(self):
        sout, cout = run_pair(self, ["rdma_server", "-p", "7999"],
                              ["rdma_client", "-s", container_ip(SERVER), "-p", "7999"])
        self.assertIn("rdma_client: end 0", cout)

    def test_udaddy(self):
        sout, cout = run_pair(self, ["udaddy"], ["udaddy", "-s", container_ip(SERVER)])
        for out in (sout, cout):
            self.assertIn("test complete", out)
            self.assertIn("return status 0", out)


class PerftestRdmaCm(unittest.TestCase):
    def perftest(self, prog, *args):
        # With -R the server's first step is its rdma_cm listener (no TCP port to wait for).
        server = [prog, "-R", *args]
        client = server + [container_ip(SERVER)]
        sout, cout = run_pair(self, server, client)
        return cout

    def check_bw(self, out):
        r = bw_rows(out)
        self.assertTrue(r, f"no result rows in:\n{out}")
        for size, iters, peak, avg, rate in r:
            self.assertEqual(size, 65536)
            self.assertGreater(iters, 0)
            self.assertGreater(avg, 0.0)
            self.assertGreater(rate, 0.0)

    def test_write_bw(self):
        self.check_bw(self.perftest("ib_write_bw"))

    def test_send_bw(self):
        self.check_bw(self.perftest("ib_send_bw"))

    def test_read_lat(self):
        out = self.perftest("ib_read_lat")
        r = lat_rows(out)
        self.assertTrue(r, f"no result rows in:\n{out}")
        for size, iters, tmin, tmax, typ, *_ in r:
            self.assertEqual(size, 2)
            self.assertGreater(iters, 0)
            self.assertLessEqual(tmin, typ)
            self.assertLessEqual(typ, tmax)


class Errors(unittest.TestCase):
    def test_no_listener_is_rejected_quickly(self):
        # The server's container is known to the daemon once a program there opened the
        # device; nobody listens on rping's port now.
        rc, _, err = SB.run(SERVER, "ibv_devices", timeout=20)
        self.assertEqual(rc, 0, err)
        start = time.monotonic()
        rc, out, err = SB.run(CLIENT, "rping", "-c", "-a", container_ip(SERVER), "-C", "1",
                              timeout=20)
        self.assertNotEqual(rc, 0)
        self.assertIn("RDMA_CM_EVENT_REJECTED", out + err)
        self.assertLess(time.monotonic() - start, 10)

    def test_unknown_address_is_addr_error(self):
        rc, out, err = SB.run(CLIENT, "rping", "-c", "-a", "10.77.0.99", "-C", "1", timeout=20)
        self.assertNotEqual(rc, 0)
        self.assertIn("RDMA_CM_EVENT_ADDR_ERROR", out + err)

    def test_rdma_client_without_server_fails(self):
        rc, out, err = SB.run(CLIENT, "rdma_client", "-s", container_ip(SERVER), "-p", "7001",
                              timeout=20)
        self.assertNotEqual(rc, 0, out + err)

    def test_second_listener_is_eaddrinuse(self):
        # Two servers on the same address and port: whichever listens second fails in
        # rdma_listen with EADDRINUSE at once; the other keeps waiting and is killed.
        ip = container_ip(SERVER)
        servers = [SB.start(SERVER, "rping", "-s", "-a", ip, "-C", "1") for _ in range(2)]
        try:
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and all(p.popen.poll() is None for p in servers):
                time.sleep(0.05)
            done = [p for p in servers if p.popen.poll() is not None]
            self.assertEqual(len(done), 1, "neither server failed")
            done[0].wait(5)
            self.assertNotEqual(done[0].popen.returncode, 0)
            self.assertIn("rdma_listen: Address already in use", done[0].out + done[0].err)
        finally:
            for p in servers:
                p.kill()
                if p.popen.returncode is None:
                    p.wait(10)


if __name__ == "__main__":
    unittest.main()
