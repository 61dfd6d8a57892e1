"""Attacks on the direct path across hosts: each container's vrdma port (4791/tcp, held by its
host's vrdmad in the container's namespace) and the direct connections vrdmad hands to
programs. The victim: vrdma_stress from h0c0 to h1c0 (every opcode, every byte checked) on the
direct path for the whole of each attack. The attackers: container h0c2 of the same tenant
(nothing but the connection rules stands between it and the victim), with raw sockets on the
victim's vrdma port, and as a hostile peer process that speaks the frames itself on a
connection vrdmad legitimately handed it (raw_control.py direct).

An attack that gets through, or a victim that sees an error, a corrupt byte or a lost
operation, fails the suite; the module prints the Report table. Needs root (namespaces)."""

import json
import os
import random
import socket
import struct
import time
import unittest

import conftest_path  # noqa: F401
import router_wire as rw
from vrdma_py.attacks import Report, Victims
from vrdma_py.sandbox import NETNS_PREFIX, Sandbox, container_ip

SB = Sandbox(hosts=2, containers=3, extra_args=["--tenant", "lab=10.77.0.0/16"])
REPORT = Report("direct path attacks (across hosts)")
VICTIMS = [("h1c0", "h0c0")]
PORT = 4791
RAW = os.path.join(os.path.dirname(os.path.abspath(__file__)), "raw_control.py")
HELLO_DEADLINE_S = 2.0  # DirectPortLimits::hello_ns
PER_SOURCE = 8  # DirectPortLimits::arrivals_per_source
DIRECT_HELLO, DIRECT_MAGIC, WIRE_VERSION = 12, 0x44445256, 5


def setUpModule():
    SB.up()


def tearDownModule():
    try:
        print(REPORT.table(), flush=True)
    finally:
        SB.down()
    bad = REPORT.failures()
    if bad:
        raise AssertionError("attacks succeeded or victims were disturbed:\n" +
                             "\n".join(f"{a}: {d}" for a, s, v, d in bad))


def ip32(ip):
    return struct.unpack("<I", socket.inet_aton(ip))[0]


def hello_frame(ticket, src_ip, dst_ip, src_qpn, dst_qpn, qp_type=2):
    body = struct.pack("<II16sIIIIII", DIRECT_MAGIC, WIRE_VERSION, ticket, ip32(src_ip),
                       ip32(dst_ip), src_qpn, dst_qpn, qp_type, 0)
    return struct.pack("<B3xI", DIRECT_HELLO, 0) + body


def victim_qpn(timeout=20):
    """The victim server's connected RC QP (h1c0), from h1's status."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        for c in SB.status("h1")["clients"]:
            if c["container"] == "h1c0":
                qps = [q["qpn"] for q in c["qps"] if q["state"] in ("RTR", "RTS")]
                if qps:
                    return qps[0]
        time.sleep(0.1)
    raise AssertionError("no connected QP in h1c0")


def daemon_fds(host):
    return len(os.listdir(f"/proc/{SB.daemon_pid(host)}/fd"))


def attacker_socket(src_ip=None, freebind=False):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(2)
    if freebind:
        s.setsockopt(socket.SOL_IP, 15, 1)  # IP_FREEBIND: an address that is not ours
    if src_ip:
        s.bind((src_ip, 0))
    return s


def answered(sock, seconds=3.0):
    """What the port says after a hello: b"\\x00" accepted, b"" closed (or None: nothing)."""
    sock.settimeout(seconds)
    try:
        return sock.recv(1)
    except socket.timeout:
        return None
    except OSError:
        return b""


class DirectAttacks(unittest.TestCase):
    def record(self, name, succeeded, victims, detail=""):
        ok = REPORT.record(name, succeeded, victims, detail)
        self.assertFalse(succeeded, f"{name}: the attack succeeded: {detail}")
        self.assertTrue(ok, f"{name}: victims disturbed:\n" + "\n".join(victims.disturbed))

    def test_01_connections_that_say_nothing(self):
        # 40 connections that never send a byte: a source holds 8 at most (its oldest make
        # room), and each is closed at the hello deadline.
        with Victims(SB, VICTIMS) as v:
            fds_before = daemon_fds("h1")
            socks = []
            with rw.netns(NETNS_PREFIX + "h0c2"):
                for _ in range(40):
                    s = attacker_socket()
                    try:
                        s.connect((container_ip("h1c0"), PORT))
                        socks.append(s)
                    except OSError:
                        s.close()
            time.sleep(0.3)
            open_now = [s for s in socks if not rw.closed_within(s, 0.01)]
            fds_peak = daemon_fds("h1")
            late = sum(rw.closed_within(s, HELLO_DEADLINE_S + 2) for s in open_now)
            for s in socks:
                s.close()
        detail = (f"{len(socks)} connections: {len(open_now)} held, {late} of them closed by the "
                  f"hello deadline; vrdmad fds {fds_before} -> {fds_peak}")
        print(detail)
        self.record("silent connections to a container's vrdma port",
                    len(open_now) > PER_SOURCE or late != len(open_now) or
                    fds_peak - fds_before > PER_SOURCE + 4, v, detail)

    def test_02_guessed_tickets(self):
        # Hellos naming the victim's real addresses and QPs, with tickets of the attacker's
        # making: none is taken.
        got = {}
        with Victims(SB, VICTIMS) as v:
            qpn = victim_qpn()
            with rw.netns(NETNS_PREFIX + "h0c2"):
                for i in range(50):
                    s = attacker_socket()
                    s.connect((container_ip("h1c0"), PORT))
                    ticket = bytes(16) if i == 0 else random.randbytes(16)
                    s.sendall(hello_frame(ticket, container_ip("h0c2"), container_ip("h1c0"),
                                          random.getrandbits(24), qpn))
                    a = answered(s)
                    got[repr(a)] = got.get(repr(a), 0) + 1
                    s.close()
        detail = f"50 hellos with guessed tickets to QP {qpn:#x}: answers {got}"
        print(detail)
        self.record("guessed tickets", "b'\\x00'" in got, v, detail)

    def test_03_forged_source_address(self):
        # (a) The victim client's address as the TCP source (IP_FREEBIND): the handshake's
        # answer goes to the real h0c0, so no connection is made. (b) The attacker's own
        # connection whose hello claims to come from h0c0: refused (a ticket names the address
        # the connection comes from).
        results = {}
        with Victims(SB, VICTIMS) as v:
            qpn = victim_qpn()
            with rw.netns(NETNS_PREFIX + "h0c2"):
                s = attacker_socket(container_ip("h0c0"), freebind=True)
                try:
                    s.connect((container_ip("h1c0"), PORT))
                    results["spoofed TCP source"] = "connected"
                except OSError as e:
                    results["spoofed TCP source"] = type(e).__name__
                s.close()
                s = attacker_socket()
                s.connect((container_ip("h1c0"), PORT))
                s.sendall(hello_frame(random.randbytes(16), container_ip("h0c0"),
                                      container_ip("h1c0"), 0x123456, qpn))
                results["hello claiming h0c0"] = repr(answered(s))
                s.close()
        detail = f"{results}"
        print(detail)
        self.record("forged source address", results["spoofed TCP source"] == "connected" or
                    results["hello claiming h0c0"] == "b'\\x00'", v, detail)

    def test_04_hostile_peer_process(self):
        # A program of h0c2 connects a QP of its own to the victim's QP (vrdmad hands it the
        # direct connection: same tenant) and writes frames itself: WRITEs and READs with
        # guessed rkeys, a request announcing 1 GiB of payload (its bytes are read and dropped as
        # they come: nothing is allocated for them), garbage (the connection ends). The victim's
        # QP never named it: every request is refused (an error status, then silence), and
        # nothing of it reaches the victim's memory.
        with Victims(SB, VICTIMS) as v:
            qpn = victim_qpn()
            rc, out, err = SB.run("h0c2", "python3", RAW, "direct", container_ip("h1c0"),
                                  hex(qpn), "--rkeys", "50", lib=False, timeout=120)
        lines = [line for line in out.splitlines() if line.startswith("{")]
        self.assertEqual(rc, 0, out + err)
        self.assertTrue(lines, out + err)
        res = json.loads(lines[-1])
        print(res)
        self.assertEqual(res.get("connects"), ["ok"] * 3, res)
        answers = res.get("answers", {})
        # IBV_WC_SUCCESS is 0: any success is an attack that got through. Refusals are error
        # statuses, or the connection's end.
        self.record("hostile peer: guessed rkeys, oversized and malformed frames",
                    "0" in answers or res.get("garbage_closed") is not True, v, str(res))
        self.assertTrue(answers, res)

    def test_05_connection_flood_leaves_room_for_new_victims(self):
        # 2000 connections from h0c2 while a new pair (h0c1 -> h1c1) connects and runs.
        with Victims(SB, VICTIMS) as v:
            flood = SB.start("h0c2", "python3", "-c", FLOOD, container_ip("h1c0"), str(PORT),
                             lib=False)
            time.sleep(1)
            (src, sout, serr), (crc, cout, cerr) = SB.pair(
                ["ib_send_bw", "-n", "2000"], ["ib_send_bw", "-n", "2000", container_ip("h1c1")],
                server="h1c1", client="h0c1", timeout=60)
            frc = flood.wait(60)
        detail = f"flood: {flood.out.strip()} (rc {frc}); new pair h0c1 -> h1c1: rc {crc}/{src}"
        print(detail)
        if (crc, src) != (0, 0):
            v.disturbed.append(f"new pair failed:\n{cout}{cerr}\n{sout}{serr}")
        self.record("connection flood on a vrdma port", (crc, src) != (0, 0), v, detail)


FLOOD = r"""
import socket, sys, time
ip, port = sys.argv[1], int(sys.argv[2])
held, made, end = [], 0, time.monotonic() + 4
while time.monotonic() < end and made < 2000:
    s = socket.socket()
    s.settimeout(1)
    try:
        s.connect((ip, port))
        made += 1
        held.append(s)
    except OSError:
        s.close()
    if len(held) > 200:
        held.pop(0).close()
print(f"{made} connections made")
"""


if __name__ == "__main__":
    unittest.main()
