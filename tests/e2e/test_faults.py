"""Faults: a program killed mid-transfer, vrdmad killed and restarted under a running pair
(which goes on), and garbage on the control socket. Nothing may hang, and nothing of a dead
client may stay in vrdmad."""

import os
import signal
import socket
import struct
import time
import unittest

import conftest_path  # noqa: F401
from test_cross_host_load import PORT as STRESS_PORT
from test_cross_host_load import check_stress_pair, find_stress
from vrdma_py.sandbox import VRDMAD, Sandbox, container_ip, host_file, vrdma

SB = Sandbox(hosts=1, containers=2)
setUpModule = SB.up
tearDownModule = SB.down
SOCKET = host_file("h0", "vrdmad.sock")


def verbs_clients(status):
    return [c for c in status["clients"] if c["kind"] == "verbs"]


def wait_for(pred, timeout, step=0.1):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = pred()
        if v:
            return v
        time.sleep(step)
    return pred()


def daemon_pid():
    return SB.daemon_pid()


class KilledProgram(unittest.TestCase):
    def test_status_shows_a_live_program_and_forgets_a_dead_one(self):
        s = SB.start("h0c0", "ibv_rc_pingpong", "-s", "4096")
        self.assertTrue(SB.wait_listening("h0c0", 18515))
        st = SB.status()
        mine = [c for c in verbs_clients(st) if c["container"] == "h0c0"]
        self.assertEqual(len(mine), 1, st)
        self.assertEqual(len(mine[0]["qps"]), 1)
        self.assertEqual(len(mine[0]["mrs"]), 1)
        self.assertEqual(mine[0]["ip"], container_ip("h0c0"))
        s.kill()
        s.wait(10)
        self.assertTrue(wait_for(lambda: not verbs_clients(SB.status()), 5), SB.status())

    def test_killing_the_server_mid_transfer_fails_the_client(self):
        server = SB.start("h0c0", "ib_write_bw", "-D", "20")
        self.assertTrue(SB.wait_listening("h0c0", 18515))
        client = SB.start("h0c1", "ib_write_bw", "-D", "20", container_ip("h0c0"))
        time.sleep(2)
        self.assertIsNone(client.popen.poll(), "client ended before the fault")
        server.kill()
        t0 = time.monotonic()
        rc = client.wait(15)
        elapsed = time.monotonic() - t0
        self.assertNotEqual(rc, 0, client.out)
        self.assertLess(elapsed, 15)
        self.assertTrue(wait_for(lambda: not verbs_clients(SB.status()), 5), SB.status())

    def test_killing_the_client_flushes_the_waiting_server(self):
        # The pingpong server waits for a receive; its peer vanishes.
        server = SB.start("h0c0", "ibv_rc_pingpong", "-n", "100000000", "-s", "64")
        self.assertTrue(SB.wait_listening("h0c0", 18515))
        client = SB.start("h0c1", "ibv_rc_pingpong", "-n", "100000000", "-s", "64",
                          container_ip("h0c0"))
        time.sleep(2)
        self.assertIsNone(server.popen.poll(), server.err)
        client.kill()
        rc = server.wait(15)
        self.assertNotEqual(rc, 0)
        self.assertRegex(server.out + server.err, r"(?i)flush|failed status|error")
        self.assertTrue(wait_for(lambda: not verbs_clients(SB.status()), 5), SB.status())


class DaemonRestart(unittest.TestCase):
    def test_programs_go_on_and_new_ones_work_after_restart(self):
        # vrdma_stress between two containers of the host (every opcode, every byte checked)
        # while vrdmad is killed and a new one started: the data moves through shared memory
        # between the two processes, so the pair finishes clean; new programs work once the new
        # vrdmad is up.
        stress = find_stress()
        server = SB.start("h0c0", stress)
        try:
            self.assertTrue(SB.wait_listening("h0c0", STRESS_PORT, timeout=30), server.err)
            client = SB.start("h0c1", stress, "--seconds", "8", container_ip("h0c0"))
            time.sleep(2.5)
            args = SB.daemon_args()  # the same socket and tenant as the sandbox's
            os.kill(daemon_pid(), signal.SIGKILL)
            time.sleep(0.5)
            d = SB.start("h0", VRDMAD, *args, lib=False)
            try:
                self.assertTrue(wait_for(lambda: os.path.exists(SOCKET) and vrdma(
                    "status", "--socket", SOCKET, check=False).returncode == 0, 5))
                (src, sout, serr), (crc, cout, cerr) = SB.pair(
                    ["ibv_rc_pingpong", "-c", "-n", "100", "-p", "18520"],
                    ["ibv_rc_pingpong", "-c", "-n", "100", "-p", "18520", container_ip("h0c0")],
                    timeout=30, port=18520)
                self.assertEqual(src, 0, serr)
                self.assertEqual(crc, 0, cerr)
                self.assertIn("iters in", cout)
                crc = client.wait(60)
                src = server.wait(30)
                counters = check_stress_pair(self, "across a vrdmad restart (h0c1 -> h0c0)",
                                             crc, client, src, server)
                self.assertGreater(counters["ops"], 0)
                self.assertIn("lost vrdmad", client.err + server.err)
            finally:
                d.kill(signal.SIGTERM)
                d.wait(10)
                SB.down()
                SB.up()
        finally:
            server.kill()


class GarbageOnTheSocket(unittest.TestCase):
    def raw(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        s.settimeout(5)
        s.connect(SOCKET)
        return s

    def assert_dropped_or_refused(self, s):
        try:
            data = s.recv(70000)
        except (ConnectionResetError, BrokenPipeError):
            return
        if data:
            magic, op, _, seq, status, length = struct.unpack("<IHHIiI", data[:20])
            self.assertNotEqual(status, 0, "garbage was accepted")

    def test_garbage_truncated_and_oversized_messages(self):
        cases = [
            os.urandom(7),                                   # shorter than a header
            os.urandom(200),                                 # random bytes
            struct.pack("<IHHIiI", 0x31445256, 1, 0, 1, 0, 1000) + b"x" * 8,  # length lies
            struct.pack("<IHHIiI", 0x31445256, 777, 0, 1, 0, 0),              # unknown op
            b"\0" * 100000,                                  # larger than any message
        ]
        for payload in cases:
            with self.subTest(size=len(payload)):
                s = self.raw()
                try:
                    s.send(payload)
                except OSError:
                    pass  # refused by the kernel for its size: fine
                self.assert_dropped_or_refused(s)
                s.close()
        # Others keep working.
        (src, sout, serr), (crc, cout, cerr) = SB.pair(
            ["ibv_rc_pingpong", "-n", "50"], ["ibv_rc_pingpong", "-n", "50", container_ip("h0c0")],
            timeout=30)
        self.assertEqual((src, crc), (0, 0), serr + cerr)
        os.kill(daemon_pid(), 0)  # still alive


if __name__ == "__main__":
    unittest.main()
