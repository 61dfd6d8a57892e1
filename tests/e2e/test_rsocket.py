"""rsockets between two containers (on one host, or on two: see topology.py): Debian's
unmodified rstream and riostream (rdmacm-utils) with their data checks on, and ordinary TCP
programs (tcp_echo, which checks every byte, and iperf3) under LD_PRELOAD=librspreload.so."""

import json
import os
import re
import shutil
import threading
import time
import unittest

import conftest_path  # noqa: F401
from vrdma_py.sandbox import container_ip

from topology import CLIENT, CROSS, SB, SERVER  # noqa: E402

setUpModule = SB.up
tearDownModule = SB.down

PRELOAD = "/usr/lib/x86_64-linux-gnu/rsocket/librspreload.so"
TCP_ECHO = os.environ.get("VRDMA_TCP_ECHO") or shutil.which("tcp_echo")
# rstream and riostream print: name bytes xfers iters total time Gb/sec usec/xfer
ROW = re.compile(r"^(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s+([\d.]+)s\s+([\d.]+)\s+([\d.]+)\s*$",
                 re.M)


def run_pair(test, server_cmd, client_cmd, timeout=300, attempts=100, env=None):
    """Starts a server, then its client. An rsocket listener is no kernel socket, so there is
    no port to wait for: a client that fails while the server still waits (it came before the
    server listened, and was refused at once) is started again (bounded)."""
    s = SB.start(SERVER, *server_cmd, env=env)
    server_rc = []
    reader = threading.Thread(target=lambda: server_rc.append(s.wait(timeout + 30)))
    reader.start()
    c = None
    try:
        for _ in range(attempts):
            c = SB.start(CLIENT, *client_cmd, env=env)
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


def rows(text):
    return {m.group(1): m.groups() for m in ROW.finditer(text)}


def wait_device_user(container, timeout=30):
    """Waits until a program in `container` has opened its vrdma device (an rsocket() call
    does that first)."""
    host = re.match(r"(h\d+)c\d+", container).group(1)
    ip = container_ip(container)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(c.get("ip") == ip and c.get("kind") != "cli" for c in SB.status(host)["clients"]):
            return True
        time.sleep(0.1)
    return False


def no_kernel_listener(test, port):
    """The server's container has no TCP listener on `port`: the program's listen() went to
    rsockets (nothing fell back to the kernel)."""
    rc, out, err = SB.run(SERVER, "ss", "-ltnH", lib=False, timeout=20)
    test.assertEqual(rc, 0, err)
    test.assertNotRegex(out, rf":{port}\b", f"a kernel socket listens on {port}:\n{out}")


class Rstream(unittest.TestCase):
    def check(self, out, names):
        r = rows(out)
        for name in names:
            self.assertIn(name, r, f"no {name} row in:\n{out}")
            # Its time column may round to 0.00 s on one host; the time per transfer not.
            self.assertGreater(float(r[name][7]), 0.0, r[name])
        self.assertNotIn("verification failed", out)

    def test_default_run_with_verified_data(self):
        # Latency then bandwidth for 64 B .. 1 MiB, on two connections, every byte checked.
        ip = container_ip(SERVER)
        sout, cout = run_pair(self, ["rstream", "-T", "v"], ["rstream", "-s", ip, "-T", "v"])
        names = [f"{s}_{k}" for k in ("lat", "bw") for s in ("64", "4k", "64k", "1m")]
        self.check(cout, names)
        self.check(sout, names)

    def test_sizes_and_modes(self):
        ip = container_ip(SERVER)
        cases = [
            ("1", "2000", []),             # 1-byte messages, non-blocking (the default)
            ("65537", "300", ["-T", "b"]),  # blocking calls
            ("1000000", "40", ["-T", "a"]),  # rpoll before every call
            ("4096", "1000", ["-T", "a", "-T", "b"]),  # blocking rpoll
            ("16777216", "3", []),         # 16 MiB transfers
            ("65536", "200", ["-T", "r"]),  # addresses from rdma_getaddrinfo
        ]
        for i, (size, count, opts) in enumerate(cases):
            with self.subTest(size=size, opts=opts):
                port = str(7600 + i)
                args = ["-S", size, "-C", count, "-T", "v", "-p", port, *opts]
                sout, cout = run_pair(self, ["rstream", *args], ["rstream", "-s", ip, *args])
                self.check(cout, ["custom"])
                self.check(sout, ["custom"])
                self.assertEqual(rows(cout)["custom"][1], rows(sout)["custom"][1])

    def test_socket_options_and_small_buffers(self):
        # -B sets SO_SNDBUF/SO_RCVBUF (a small ring), -i the inline size, -k keepalive.
        ip = container_ip(SERVER)
        args = ["-S", "100000", "-C", "200", "-B", "16384", "-i", "32", "-k", "5", "-T", "v",
                "-p", "7701"]
        sout, cout = run_pair(self, ["rstream", *args], ["rstream", "-s", ip, *args])
        self.check(cout, ["custom"])
        self.assertIn("Keepalive: ON", cout)

    def test_connect_to_nobody_is_refused_at_once(self):
        # The server's container is known to the daemon once a program there opened the device.
        rc, _, err = SB.run(SERVER, "ibv_devices", timeout=20)
        self.assertEqual(rc, 0, err)
        start = time.monotonic()
        rc, out, err = SB.run(CLIENT, "rstream", "-s", container_ip(SERVER), "-p", "7702",
                              "-T", "b", timeout=30)
        self.assertNotEqual(rc, 0)
        self.assertIn("Connection refused", out + err)
        self.assertLess(time.monotonic() - start, 15)

    def test_server_killed_mid_transfer_resets_the_client(self):
        ip = container_ip(SERVER)
        args = ["-S", "1000000", "-C", "1000000", "-p", "7703", "-T", "b"]
        s = SB.start(SERVER, "rstream", *args)
        c = None
        try:
            for _ in range(100):
                c = SB.start(CLIENT, "rstream", "-s", ip, *args)
                time.sleep(1.0)
                if c.popen.poll() is None:
                    break  # connected and transferring
                c.wait(10)
            self.assertIsNone(c.popen.poll(), f"client never got going:\n{c.out}\n{c.err}")
            s.kill()
            s.wait(10)
            start = time.monotonic()
            rc = c.wait(30)
            self.assertNotEqual(rc, 0)
            self.assertLess(time.monotonic() - start, 20)
            self.assertRegex(c.out + c.err, r"(rsend|rrecv): Connection reset by peer")
        finally:
            s.kill()
            if c:
                c.kill()


class Riostream(unittest.TestCase):
    def test_default_run_with_verified_data(self):
        ip = container_ip(SERVER)
        if CROSS:
            # riostream waits by spinning on memory, never in a library call, so on the
            # 2-core test bed each routed hop waits for the scheduler to run a router
            # (milliseconds): the default run's 100k round trips would take far too long.
            # The same sizes with fewer transfers, latency and bandwidth shapes.
            for size in ("64", "4096", "65536", "1048576"):
                for count, iters in (("1", "50"), ("50", "1")):
                    with self.subTest(size=size, count=count):
                        args = ["-S", size, "-C", count, "-I", iters, "-T", "v", "-p", "7711"]
                        sout, cout = run_pair(self, ["riostream", *args],
                                              ["riostream", "-s", ip, *args])
                        self.assertIn("custom", rows(cout), cout)
                        self.assertNotIn("verification failed", cout + sout)
            return
        sout, cout = run_pair(self, ["riostream", "-T", "v"], ["riostream", "-s", ip, "-T", "v"])
        for out in (cout, sout):
            r = rows(out)
            for name in [f"{s}_{k}" for k in ("lat", "bw") for s in ("64", "4k", "64k", "1m")]:
                self.assertIn(name, r, f"no {name} row in:\n{out}")
            self.assertNotIn("verification failed", out)

    def test_sizes(self):
        ip = container_ip(SERVER)
        for size, count in (("100", "200"), ("3000000", "20")):
            with self.subTest(size=size):
                args = ["-S", size, "-C", count, "-T", "v", "-p", "7710"]
                sout, cout = run_pair(self, ["riostream", *args], ["riostream", "-s", ip, *args])
                self.assertIn("custom", rows(cout), cout)
                self.assertNotIn("verification failed", cout + sout)


@unittest.skipUnless(os.path.exists(PRELOAD), f"{PRELOAD} (Debian's librdmacm1) is missing")
class Preload(unittest.TestCase):
    def preloaded(self, *cmd):
        return ["env", f"LD_PRELOAD={PRELOAD}", *cmd]

    def test_tcp_echo_checks_every_byte(self):
        self.assertTrue(TCP_ECHO, "tcp_echo not found (VRDMA_TCP_ECHO)")
        port = 7720
        nbytes = 48 << 20
        s = SB.start(SERVER, *self.preloaded(TCP_ECHO, "server", str(port)))
        try:
            # Its socket() became an rsocket; its listen() does not reach the kernel.
            self.assertTrue(wait_device_user(SERVER), "the server never opened the device")
            time.sleep(0.5)
            no_kernel_listener(self, port)
            rc, out, err = SB.run(CLIENT, *self.preloaded(
                TCP_ECHO, "client", container_ip(SERVER), str(port), str(nbytes), "7"),
                timeout=180)
            self.assertEqual(rc, 0, f"client failed:\n{out}\n{err}")
            self.assertIn(f"tcp_echo: verified {nbytes} bytes", out)
            self.assertEqual(s.wait(60), 0, f"server failed:\n{s.out}\n{s.err}")
            self.assertIn(f"tcp_echo: served {nbytes} bytes", s.out)
        finally:
            s.kill()

    def test_iperf3(self):
        # An unmodified TCP benchmark (control connection, data connection, select()).
        port = 7730
        s = SB.start(SERVER, *self.preloaded("iperf3", "-s", "-1", "-p", str(port)))
        try:
            self.assertTrue(wait_device_user(SERVER), "the server never opened the device")
            time.sleep(0.5)
            no_kernel_listener(self, port)
            out = ""
            for _ in range(50):
                rc, out, err = SB.run(CLIENT, *self.preloaded(
                    "iperf3", "-c", container_ip(SERVER), "-p", str(port), "-t", "2", "-J"),
                    timeout=60)
                # iperf3 -J exits 0 when it cannot connect; its JSON says so.
                if (rc == 0 and '"error":' not in out) or s.popen.poll() is not None:
                    break
                time.sleep(0.2)
            self.assertEqual(rc, 0, f"iperf3 client failed:\n{out}\n{err}")
            result = json.loads(out)
            self.assertNotIn("error", result, out)
            received = result["end"]["sum_received"]["bytes"]
            self.assertGreater(received, 0)
            self.assertEqual(s.wait(30), 0, f"iperf3 server failed:\n{s.out}\n{s.err}")
        finally:
            s.kill()


if __name__ == "__main__":
    unittest.main()
