"""Attacks on the routers between hosts, against a live three-host sandbox whose routers link
over mutual TLS. Victims: vrdma_stress between h0c0 and h1c0 (every opcode, every byte
checked) for the whole of each attack, and for the rdma_cm attacks an rping pair (h0c2 ->
h1c2, data validated). The attackers: a container, something on the underlay that is no
router, TLS clients without a valid certificate or with one host's certificate claiming
another, and a hostile router: host 2's real certificate, from host 2's router address,
speaking the routers' frames itself (router_wire.py).

Every container is in one tenant (the hardest case: nothing but the connection rules stands
between attacker and victim). An attack that gets through, or a victim that sees an error, a
corrupt byte or a lost operation, fails the suite; the module prints the Report table."""

import contextlib
import errno
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
import unittest

import conftest_path  # noqa: F401
import router_wire as rw
from vrdma_py.attacks import Report, Victims
from vrdma_py.sandbox import NETNS_PREFIX, ROUTED, RUN_DIR, Sandbox, container_ip, host_file

# The routers' own attack surface: the containers' QPs go through them (--no-direct-path; the
# direct path's is test_attacks_direct.py's).
SB = Sandbox(hosts=3, containers=4,
             extra_args=["--tenant", "lab=10.77.0.0/16", "--log-level", "debug", *ROUTED])
REPORT = Report("router attacks (across hosts, mutual TLS)")
VICTIMS = [("h1c0", "h0c0")]
ROUTER = {h: f"10.76.0.{h + 1}" for h in range(3)}
PORT = 7471
LINKS_PER_HOST = 9 + 2  # RouterLimits::max_links_per_host


def setUpModule():
    SB.up()


def tearDownModule():
    try:
        print(REPORT.table())
    finally:
        SB.down()
    bad = REPORT.failures()
    if bad:
        raise AssertionError("attacks succeeded or victims were disturbed:\n" +
                             "\n".join(f"{a}: {d}" for a, s, v, d in bad))


def ns(name):
    return NETNS_PREFIX + name


def pki(name):
    return os.path.join(RUN_DIR, "pki", name)


def host_ctx(host):
    """A TLS client context with host `host`'s certificate (the sandbox's PKI)."""
    return rw.tls_context(pki("ca.pem"), pki(f"host-{host}.pem"), pki(f"host-{host}.key"))


def hostile(host=2, to=1, claim=None, src=None):
    """A link to host `to`'s router from host `host`'s namespace and router address, with
    host `host`'s certificate, saying Hello as `claim` (default: itself)."""
    with rw.netns(ns(f"h{host}")):
        peer = rw.Peer.open(src or ROUTER[host], (ROUTER[to], PORT), host_ctx(host))
    peer.hello(host if claim is None else claim)
    return peer


def daemon_pid(host):
    return SB.daemon_pid(f"h{host}")


def rss_anon_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1])
    return 0


def qps_of(host, container, qp_type="RC"):
    """Numbers of the connected QPs (RTR or RTS) of the programs in `container` (from the
    host's status)."""
    out = []
    for c in SB.status(f"h{host}")["clients"]:
        if c["container"] == container:
            out += [q["qpn"] for q in c["qps"]
                    if q["type"] == qp_type and q["state"] in ("RTR", "RTS")]
    return out


def wait_qp(host, container, timeout=20):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        q = qps_of(host, container)
        if q:
            return q[0]
        time.sleep(0.1)
    raise AssertionError(f"no connected QP in {container}")


def xrc_qps(host, container, qp_type, timeout=20, connected=False):
    """Numbers of the XRC QPs (XRC_SEND, XRC_RECV, XRC_SRQ) of the programs in `container`
    (`connected`: in RTR or RTS), once there is one."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        out = []
        for c in SB.status(f"h{host}")["clients"]:
            if c["container"] == container:
                out += [q["qpn"] for q in c["qps"] if q["type"] == qp_type and
                        (not connected or q["state"] in ("RTR", "RTS"))]
        if out:
            return out
        time.sleep(0.1)
    raise AssertionError(f"no {qp_type} QP in {container}")


def wait_cm_listener(host, ip, port, timeout=20):
    """Waits until host's vrdmad has an rdma_cm listener on ip:port (its debug log)."""
    end = time.monotonic() + timeout
    needle = f"listening on {ip}:{port}"
    while time.monotonic() < end:
        with open(host_file(f"h{host}", "vrdmad.log")) as f:
            if needle in f.read():
                return True
        time.sleep(0.05)
    return False


class Decoy:
    """ib_write_bw between h1c1 (server: an RC QP that posts no receive) and h2c0: a
    connection that host 2 legitimately holds, so that the hostile router (host 2) has a
    destination QP that agreed to its source. Only the attacker's own link uses it."""

    def __enter__(self):
        self.server = SB.start("h1c1", "ib_write_bw", "-F", "-D", "60", "-s", "4096")
        if not SB.wait_listening("h1c1", 18515, timeout=30):
            raise AssertionError("decoy server never listened")
        self.client = SB.start("h2c0", "ib_write_bw", "-F", "-D", "60", "-s", "4096",
                               container_ip("h1c1"))
        self.server_qpn = wait_qp(1, "h1c1")
        self.client_qpn = wait_qp(2, "h2c0")
        return self

    def __exit__(self, *exc):
        for p in (self.client, self.server):
            p.kill()
            try:
                p.wait(10)
            except AssertionError:
                pass
        return False

    def connect(self, peer):
        """The decoy's connection, as host 2 may state it: (h2c0, client QPN) -> server."""
        st = peer.connect_qp(container_ip("h2c0"), container_ip("h1c1"), self.client_qpn,
                             self.server_qpn)
        if st != 0:
            with open(host_file("h1", "vrdmad.log")) as f:
                why = [line for line in f if "refused" in line]
            print(f"decoy connection refused ({self.client_qpn:#x} -> {self.server_qpn:#x}):",
                  *why[-3:], sep="\n")
            print(SB.status("h1"), SB.status("h2"))
            for p in (self.client, self.server):
                p.kill()
                with contextlib.suppress(AssertionError):
                    p.wait(5)
                print(p.name, p.out, p.err)
        return st


class RouterAttacks(unittest.TestCase):
    def record(self, name, succeeded, victims, detail=""):
        ok = REPORT.record(name, succeeded, victims, detail)
        self.assertFalse(succeeded, f"{name}: the attack succeeded: {detail}")
        self.assertTrue(ok, f"{name}: victims disturbed:\n" + "\n".join(victims.disturbed))

    # ---- who may open a link ----------------------------------------------------------

    def test_01_container_cannot_reach_a_router(self):
        through, answered = [], []
        with Victims(SB, VICTIMS) as v:
            for host, addr in ROUTER.items():
                with rw.netns(ns("h0c0")):
                    try:
                        s = rw.tcp_connect(None, (addr, PORT), timeout=2)
                    except OSError:
                        continue  # dropped by the host's firewall
                through.append(addr)
                # Past the firewall, the router itself must close it at once.
                if not rw.closed_within(s, 1.0):
                    answered.append(addr)
                s.close()
        detail = (f"connections past the firewall: {through or 'none'}; left open by a router: "
                  f"{answered or 'none'}")
        self.assertEqual(through, [], "the sandbox's firewall let a container reach a router")
        self.record("raw TCP from a container to every router port", bool(answered), v, detail)

    def test_02_non_router_address_is_closed_before_a_byte(self):
        with Victims(SB, VICTIMS) as v:
            with rw.netns(ns("net")):  # the underlay's 10.76.0.254: reachable, no router
                s = rw.tcp_connect(None, (ROUTER[1], PORT), timeout=2)
            closed = rw.closed_within(s, 1.0)
            s.close()
        self.record("TCP from an underlay address that is no host's router", not closed, v,
                    "closed at once" if closed else "left open")

    # ---- who may speak on one ---------------------------------------------------------

    def test_03_tls_without_a_valid_certificate(self):
        tmp = tempfile.mkdtemp(prefix="vrdma-rogue-")
        try:
            def sh(*a):
                subprocess.run(a, check=True, capture_output=True, timeout=30)
            # A CA of its own and a certificate that looks right: CN vrdma-host-2, host 2's IP.
            sh("openssl", "req", "-x509", "-new", "-newkey", "ec", "-pkeyopt",
               "ec_paramgen_curve:P-256", "-nodes", "-keyout", f"{tmp}/ca.key", "-out",
               f"{tmp}/ca.pem", "-subj", "/CN=rogue-ca", "-days", "2")
            sh("openssl", "req", "-x509", "-new", "-newkey", "ec", "-pkeyopt",
               "ec_paramgen_curve:P-256", "-nodes", "-keyout", f"{tmp}/h.key", "-out",
               f"{tmp}/h.pem", "-subj", "/CN=vrdma-host-2", "-days", "2", "-CA",
               f"{tmp}/ca.pem", "-CAkey", f"{tmp}/ca.key", "-addext",
               f"subjectAltName=IP:{ROUTER[2]}")
            results = []
            with Victims(SB, VICTIMS) as v:
                for what, ctx in (
                        ("no certificate", rw.tls_context(pki("ca.pem"))),
                        ("certificate of another CA",
                         rw.tls_context(pki("ca.pem"), f"{tmp}/h.pem", f"{tmp}/h.key")),
                        ("self-signed server check off, other CA",
                         rw.tls_context(None, f"{tmp}/h.pem", f"{tmp}/h.key", verify=False))):
                    try:
                        with rw.netns(ns("h2")):
                            peer = rw.Peer.open(ROUTER[2], (ROUTER[1], PORT), ctx)
                        peer.hello(2)
                        alive = peer.alive()
                        peer.close()
                    except (OSError, EOFError):
                        alive = False
                    results.append((what, alive))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        self.record("TLS client without a valid certificate", any(a for _, a in results), v,
                    "; ".join(f"{w}: {'ANSWERED' if a else 'refused'}" for w, a in results))

    def test_04_valid_certificate_claiming_another_host(self):
        results = []
        with Victims(SB, VICTIMS) as v:
            # Host 0's certificate, from host 0's address, Hello as host 1 (to host 2).
            peer = hostile(host=0, to=2, claim=1)
            results.append(("host 0 says it is host 1", peer.alive()))
            peer.close()
            # Host 2's certificate from host 0's address (a stolen key used elsewhere).
            with rw.netns(ns("h0")):
                try:
                    peer = rw.Peer.open(ROUTER[0], (ROUTER[1], PORT), host_ctx(2))
                    peer.hello(2)
                    results.append(("host 2's certificate from host 0's address", peer.alive()))
                    peer.close()
                except (OSError, EOFError):
                    results.append(("host 2's certificate from host 0's address", False))
            # The control: host 2 as itself is answered (else the refusals prove nothing).
            peer = hostile(host=2, to=1)
            control = peer.alive()
            peer.close()
        self.assertTrue(control, "a valid host's own link was not answered")
        self.record("valid certificate, another host in Hello or address",
                    any(a for _, a in results), v,
                    "; ".join(f"{w}: {'ANSWERED' if a else 'refused'}" for w, a in results))

    # ---- what a host may ask of a QP ----------------------------------------------------

    def test_05_requests_to_a_qp_that_did_not_name_the_sender(self):
        got = []
        with Victims(SB, VICTIMS) as v:
            victim = wait_qp(1, "h1c0")
            victim_peer = wait_qp(0, "h0c0")
            peer = hostile()
            dst = container_ip("h1c0")
            # No connection at all: refused at once.
            peer.request(0x4242, victim, 0, rw.SEND, length=8, payload=b"x" * 8)
            got.append(("request without Connect", peer.response(0x4242, 0)))
            # Host 2 speaks for host 0's container: refused.
            st = peer.connect_qp(container_ip("h0c0"), dst, victim_peer, victim)
            got.append(("Connect as h0c0 (host 0's address)", st))
            # Its own container: the QP exists, but it named h0c0's QP, not this one.
            st = peer.connect_qp(container_ip("h2c0"), dst, 0x4242, victim)
            got.append(("Connect as h2c0", st))
            peer.request(0x4242, victim, 0, rw.SEND, length=64, payload=b"A" * 64, timeout=8)
            peer.request(0x4242, victim, 1, rw.WRITE, length=64, payload=b"B" * 64,
                         rkey=0x12345678, addr=0x1000, timeout=8)
            peer.request(0x4242, victim, 2, rw.FAA, length=8, rkey=0x12345678, addr=0x1000,
                         timeout=8)
            for seq in range(3):
                got.append((f"unnamed request {seq}", peer.response(0x4242, seq, timeout=3)))
            # A datagram to the RC QP: no UD QP there, nothing delivered.
            peer.request(0x4343, victim, 0, rw.SEND, qp_type=rw.UD, length=8, payload=b"u" * 8,
                         src_ip=container_ip("h2c0"), dst_ip=dst)
            peer.close()
        delivered = [w for w, r in got if isinstance(r, tuple) and r[0] == rw.SUCCESS]
        accepted_foreign = got[1][1] == 0
        detail = "; ".join(f"{w}: {r}" for w, r in got)
        self.assertEqual(got[0][1], (rw.REM_INV_REQ_ERR, 0), detail)
        self.assertEqual(got[3][1], (rw.RETRY_EXC_ERR, 0), detail)
        self.record("requests to a QP whose RTR did not name the sender",
                    bool(delivered) or accepted_foreign, v, detail)

    def test_06_qp_type_comes_from_the_destination(self):
        got = []
        with Victims(SB, VICTIMS) as v, Decoy() as d:
            q, s = d.client_qpn, d.server_qpn
            peer = hostile()
            self.assertEqual(d.connect(peer), 0)
            # The rkey oracle: requests "as UC" to an RC QP, where a failure would not end the
            # connection. A WRITE as UC: refused for its type, and the connection ends.
            peer.request(q, s, 0, rw.WRITE, qp_type=rw.UC, length=8, payload=b"w" * 8,
                         rkey=0x1234, addr=0x10000)
            got.append(("WRITE as UC, guessed rkey", peer.response(q, 0)))
            peer.request(q, s, 1, rw.WRITE, qp_type=rw.UC, length=8, payload=b"w" * 8,
                         rkey=0x1235, addr=0x10000)
            got.append(("next guess", peer.response(q, 1, timeout=1)))
            # A READ as UC is no frame at all: the link closes.
            self.assertEqual(d.connect(peer), 0)
            peer.request(q, s, 0, rw.READ, qp_type=rw.UC, length=8, rkey=0x1236, addr=0x10000)
            try:
                got.append(("READ as UC", peer.response(q, 0)))
            except EOFError:
                got.append(("READ as UC", "link closed"))
            peer.close()
            # As RC (the QP's own type), a wrong rkey costs the connection: one guess per
            # Connect, as on a fabric.
            peer = hostile()
            self.assertEqual(d.connect(peer), 0)
            peer.request(q, s, 0, rw.READ, length=8, rkey=0x1237, addr=0x10000)
            got.append(("READ as RC, guessed rkey", peer.response(q, 0)))
            peer.request(q, s, 1, rw.READ, length=8, rkey=0x1238, addr=0x10000)
            got.append(("next guess", peer.response(q, 1, timeout=1)))
            peer.close()
        detail = "; ".join(f"{w}: {r}" for w, r in got)
        self.assertEqual(got[0][1], (rw.REM_INV_REQ_ERR, 0), detail)
        self.assertEqual(got[2][1], "link closed", detail)
        self.assertEqual(got[3][1], (rw.REM_ACCESS_ERR, 0), detail)
        answered_guesses = [w for w, r in (got[0], got[1], got[4])
                            if isinstance(r, tuple) and r[0] in (rw.SUCCESS, rw.REM_ACCESS_ERR)]
        self.record("requests \"as UC\" to an RC QP (rkey oracle)",
                    bool(answered_guesses) or got[1][1] is not None or got[4][1] is not None, v,
                    detail)

    def test_07_forged_sequence_numbers(self):
        got = []
        with Victims(SB, VICTIMS) as v, Decoy() as d:
            peer = hostile()
            q, s = d.client_qpn, d.server_qpn
            self.assertEqual(d.connect(peer), 0)
            peer.request(q, s, 0, rw.WRITE)  # a zero-length WRITE: needs no rkey
            got.append(("seq 0", peer.response(q, 0)))
            peer.request(q, s, 5, rw.WRITE)
            got.append(("seq 5 (a gap)", peer.response(q, 5)))
            peer.request(q, s, 6, rw.WRITE)
            got.append(("seq 6 after the gap", peer.response(q, 6)))
            self.assertEqual(d.connect(peer), 0)
            peer.request(q, s, 0, rw.WRITE)
            got.append(("seq 0 again after Connect", peer.response(q, 0)))
            peer.request(q, s, 0, rw.WRITE)
            got.append(("seq 0 repeated", peer.response(q, 0)))
            peer.request(q, s, 1, rw.WRITE)
            got.append(("seq 1 after the repeat", peer.response(q, 1)))
            peer.close()
        detail = "; ".join(f"{w}: {r}" for w, r in got)
        self.assertEqual(got[0][1], (rw.SUCCESS, 0), detail)
        self.assertEqual(got[3][1], (rw.SUCCESS, 0), detail)
        for i in (1, 2, 4, 5):
            self.assertEqual(got[i][1], (rw.REM_INV_REQ_ERR, 0), detail)
        forged_ok = [w for w, r in got[1:3] + got[4:] if r is not None and r[0] == rw.SUCCESS]
        self.record("requests with forged sequence numbers", bool(forged_ok), v, detail)

    # ---- what a host may make a router hold ---------------------------------------------

    def test_08_huge_payloads_allocate_nothing(self):
        got = []
        pid = daemon_pid(1)
        with Victims(SB, VICTIMS) as v, Decoy() as d:
            before = rss_anon_kib(pid)
            # 2 GiB announced to a QP without receives (RNR), 256 MiB of it sent.
            peer = hostile()
            self.assertEqual(d.connect(peer), 0)
            peer.request(d.client_qpn, d.server_qpn, 0, rw.SEND, length=1 << 31,
                         announce=1 << 31)
            chunk = b"\0" * (1 << 20)
            for _ in range(256):
                peer.send_raw(chunk)
            peak = rss_anon_kib(pid)
            peer.close()
            # 2 GiB announced to the victim QP, which did not agree (not ready).
            peer = hostile()
            victim = wait_qp(1, "h1c0")
            self.assertEqual(peer.connect_qp(container_ip("h2c0"), container_ip("h1c0"), 0x4242,
                                             victim), 0)
            peer.request(0x4242, victim, 0, rw.SEND, length=1 << 31, announce=1 << 31)
            for _ in range(128):
                peer.send_raw(chunk)
            peak = max(peak, rss_anon_kib(pid))
            peer.close()
            # 32 MiB, all sent, to the QP without receives: over the bound, refused at once.
            peer = hostile()
            self.assertEqual(d.connect(peer), 0)
            peer.request(d.client_qpn, d.server_qpn, 0, rw.SEND, length=32 << 20,
                         announce=32 << 20, rnr_retry=7)
            for _ in range(32):
                peer.send_raw(chunk)
            got.append(("32 MiB SEND, no receive", peer.response(d.client_qpn, 0, timeout=5)))
            peak = max(peak, rss_anon_kib(pid))
            peer.close()
        grew = peak - before
        detail = (f"vrdmad RssAnon {before} KiB -> peak {peak} KiB (+{grew} KiB); " +
                  "; ".join(f"{w}: {r}" for w, r in got))
        print(detail)
        self.record("2 GiB payloads announced to held requests",
                    grew > 48 * 1024 or got[0][1] != (rw.RNR_RETRY_EXC_ERR, 0), v, detail)

    def test_09_link_flood(self):
        pid = daemon_pid(1)
        fds_before = len(os.listdir(f"/proc/{pid}/fd"))
        with Victims(SB, VICTIMS) as v:
            socks = []
            with rw.netns(ns("h2")):
                for _ in range(40):
                    try:
                        socks.append(rw.tcp_connect(ROUTER[2], (ROUTER[1], PORT), timeout=2))
                    except OSError:
                        pass
            time.sleep(0.5)
            early = sum(rw.closed_within(s, 0.01) for s in socks)
            fds_peak = len(os.listdir(f"/proc/{pid}/fd"))
            open_now = [s for s in socks if not rw.closed_within(s, 0.01)]
            # The ones let in never start TLS: closed at the handshake deadline.
            late = sum(rw.closed_within(s, 4.0) for s in open_now)
            for s in socks:
                s.close()
            # A TLS link that never says Hello: closed at the Hello deadline.
            with rw.netns(ns("h2")):
                quiet = rw.Peer.open(ROUTER[2], (ROUTER[1], PORT), host_ctx(2))
            hello_closed = rw.closed_within(quiet.sock, 5.0)
            quiet.close()
        detail = (f"{len(socks)} connections: {early} closed at once, {late} of the "
                  f"{len(open_now)} let in closed by the handshake deadline; TLS without Hello "
                  f"{'closed' if hello_closed else 'left open'}; vrdmad fds {fds_before} -> "
                  f"{fds_peak}")
        print(detail)
        # vrdmad lets a host's address hold one link per lane (main, latency, bulk1..bulk7:
        # wire::kLanes) and two more; the rest are closed at once.
        self.record("link flood from a host's address",
                    len(open_now) > LINKS_PER_HOST or late != len(open_now) or not hello_closed,
                    v, detail)

    def test_09b_unauthenticated_flood_takes_no_slots(self):
        """Something on host 2's own address (a hostNetwork pod has it) keeps 64 plain TCP
        connections open to host 1's router, opening a new one for each that closes. Host 2's
        router still gets new links (they said Hello: the connections that did not take none
        of their slots) and a new connection between containers of the two hosts runs."""
        stop = threading.Event()
        held = []
        opened = [0]

        def flood():
            with rw.netns(ns("h2")):
                while not stop.is_set():
                    held[:] = [s for s in held if not rw.closed_within(s, 0.001)]
                    while len(held) < 64 and not stop.is_set():
                        try:
                            held.append(rw.tcp_connect(ROUTER[2], (ROUTER[1], PORT), timeout=1))
                            opened[0] += 1
                        except OSError:
                            break
                    stop.wait(0.05)
            for s in held:
                s.close()

        t = threading.Thread(target=flood)
        links, pair = [], None
        with Victims(SB, VICTIMS) as v:
            t.start()
            try:
                time.sleep(2)
                for _ in range(3):
                    peer = hostile()  # host 2's certificate, from its router address
                    links.append(peer.alive())
                    peer.close()
                pair = SB.pair(["ib_send_bw", "-n", "2000"], ["ib_send_bw", "-n", "2000",
                                                             container_ip("h1c2")],
                               server="h1c2", client="h2c2", timeout=60)
            finally:
                stop.set()
                t.join(30)
        (src, sout, serr), (crc, cout, cerr) = pair
        detail = (f"{opened[0]} plain connections opened from host 2's address; new links from "
                  f"host 2 answered: {links}; ib_send_bw h2c2 -> h1c2: rc {crc}/{src}")
        print(detail)
        if crc != 0 or src != 0:
            v.disturbed.append(f"ib_send_bw h2c2 -> h1c2 failed:\n{cout}{cerr}\n{sout}{serr}")
        self.assertGreaterEqual(opened[0], 64, detail)
        self.record("connections without a Hello filling a host's link slots",
                    not all(links) or crc != 0 or src != 0, v, detail)

    # ---- rdma_cm ------------------------------------------------------------------------

    def cm_ids(self, server_ip):
        """The rping connection's ids: h0's (connector) and h1's (listener side), from the
        daemons' debug logs."""
        with open(host_file("h0", "vrdmad.log")) as f:
            m = re.findall(rf"connection (\d+) to {re.escape(server_ip)}:\d+ on host 1", f.read())
        with open(host_file("h1", "vrdmad.log")) as f:
            n = re.findall(r"cm: connection (\d+) from host 0 \(its connection (\d+)\)", f.read())
        if not m:
            return None
        h0 = int(m[-1])
        h1 = next((int(a) for a, b in n if int(b) == h0), None)
        return h0, h1

    def test_10_forged_rdma_cm_messages(self):
        server_ip = container_ip("h1c2")
        with Victims(SB, VICTIMS) as v:
            server = SB.start("h1c2", "rping", "-s", "-a", server_ip, "-C", "4000", "-V")
            self.assertTrue(wait_cm_listener(1, server_ip, 7174), "rping never listened")
            client = SB.start("h0c2", "rping", "-c", "-a", server_ip, "-C", "4000", "-V")
            ids = None
            end = time.monotonic() + 10
            while ids is None or ids[1] is None:
                ids = self.cm_ids(server_ip)
                if time.monotonic() > end:
                    break
                time.sleep(0.05)
            self.assertTrue(ids and ids[1], f"connection ids not found in the logs: {ids}")
            h0_id, h1_id = ids
            ev = b"\0" * 88
            dc = bytes(8)
            # To host 1, about its side (the acceptor's): a disconnect "from host 0".
            p1 = hostile(to=1)
            p1.cm(rw.CM_DISCONNECT, h0_id, h1_id, dc)
            p1.cm(rw.CM_RTU, h0_id, 0, dc)
            # A request in host 0's container's name.
            p1.cm(rw.CM_CONNECT, 999, 0, rw.cm_connect_body(server_ip, 7174, container_ip("h0c0")))
            # To host 0, about its side (the connector's): reply, reject, disconnect "from host 1".
            p0 = hostile(to=0)
            p0.cm(rw.CM_REJECTED, h1_id, h0_id, ev)
            p0.cm(rw.CM_REPLY, h1_id, h0_id, ev)
            p0.cm(rw.CM_DISCONNECT, h1_id, h0_id, dc)
            # Sequential guesses of other connections' ids.
            for guess in range(1, 200):
                p0.cm(rw.CM_DISCONNECT, guess, guess, dc)
                p1.cm(rw.CM_DISCONNECT, guess, guess, dc)
            alive = p0.alive() and p1.alive()
            p0.close()
            p1.close()
            crc = client.wait(90)
            src = server.wait(30)
        with open(host_file("h1", "vrdmad.log")) as f:
            refused = "source address not the host's" in f.read()
        detail = (f"rping client {crc}, server {src}; forged links answered: {alive}; request "
                  f"in another host's name refused: {refused}")
        if crc or src:
            detail += f"\nclient:\n{client.out}{client.err}\nserver:\n{server.out}{server.err}"
        self.assertTrue(alive, "the hostile links were closed: the forgeries were not even read")
        self.record("forged rdma_cm reply/reject/disconnect/request for another host's "
                    "connections", crc != 0 or src != 0 or not refused, v, detail)

    def test_11_rdma_cm_request_flood(self):
        target_ip = container_ip("h1c3")
        with Victims(SB, VICTIMS) as v:
            # The flood's target: a listener (that may well be overwhelmed: it is the
            # attacker's choice; the victims are elsewhere).
            target = SB.start("h1c3", "rping", "-s", "-a", target_ip, "-p", "7300")
            self.assertTrue(wait_cm_listener(1, target_ip, 7300), "rping never listened")
            peer = hostile(to=1)
            body = rw.cm_connect_body(target_ip, 7300, container_ip("h2c0"))
            for i in range(1, 17001):  # more than the whole quota of connections a client has
                peer.cm(rw.CM_CONNECT, i, 0, body)
            alive = peer.alive(timeout=10)
            peer.close()
            # Host 0's clients still connect to host 1.
            server_ip = container_ip("h1c2")
            server = SB.start("h1c2", "rping", "-s", "-a", server_ip, "-p", "7400", "-C", "20",
                              "-V")
            self.assertTrue(wait_cm_listener(1, server_ip, 7400), "rping never listened")
            rc, out, err = SB.run("h0c2", "rping", "-c", "-a", server_ip, "-p", "7400", "-C",
                                  "20", "-V", timeout=60)
            server.wait(30)
            target.kill()
        with open(host_file("h1", "vrdmad.log")) as f:
            log = f.read()
        quota = "over its quota" in log
        reasons = {r: log.count(f"refused ({r})") for r in ("no listener", "quota", "tenant")}
        print(f"refusals of host 2's requests: {reasons}; client drops: "
              f"{log.count('send failed')}")
        detail = f"17000 requests from host 2 (link alive {alive}); its quota hit: {quota}; " \
                 f"host 0's rping afterwards: exit {rc}"
        if rc:
            detail += f"\n{out}{err}"
        print(detail)
        self.record("rdma_cm request flood from one host", rc != 0, v, detail)

    # ---- XRC: what an SRQ number reaches ------------------------------------------------

    def test_12_forged_xrc_srq_numbers(self):
        """A victim's XRC traffic (ibv_xsrq_pingpong, h0c1 -> h1c2) goes on while the hostile
        router, over an XRC connection host 1 rightly accepts (its own container h2c1's
        XRC_SEND QP, named by the RTR of a decoy XRC_RECV QP in h1c3), names the victim's SRQ."""
        got = []
        # Sleeping on completion events (-e): the busy-polling default would take the cores
        # the other victims need. max_send_wr is the iterations (the device allows 16384).
        xsrq = ["ibv_xsrq_pingpong", "-g", "0", "-e"]
        victim_args = xsrq + ["-s", "64", "-n", "16000"]
        procs = []
        try:
            with Victims(SB, VICTIMS) as v:
                victim_srv = SB.start("h1c2", *victim_args)
                # The decoy server waits for a second client: its first connection stays idle.
                decoy_srv = SB.start("h1c3", *xsrq, "-c", "2")
                procs += [victim_srv, decoy_srv]
                for c, p in (("h1c2", victim_srv), ("h1c3", decoy_srv)):
                    if not SB.wait_listening(c, 18515, timeout=30):
                        p.kill()
                        with contextlib.suppress(AssertionError):
                            p.wait(5)
                        self.fail(f"{c} never listened:\n{p.out}\n{p.err}")
                victim_cli = SB.start("h0c1", *victim_args, container_ip("h1c2"))
                decoy_cli = SB.start("h2c1", *xsrq, container_ip("h1c3"))
                procs += [victim_cli, decoy_cli]
                victim_srqn = xrc_qps(1, "h1c2", "XRC_SRQ")[0]
                victim_recv = xrc_qps(1, "h1c2", "XRC_RECV")[0]
                decoy_srqn = xrc_qps(1, "h1c3", "XRC_SRQ")[0]
                # Once the decoy's XRC_RECV QP named the XRC_SEND QP of h2c1 in its RTR.
                decoy_recv = xrc_qps(1, "h1c3", "XRC_RECV", connected=True)[0]
                attacker_send = xrc_qps(2, "h2c1", "XRC_SEND", connected=True)[0]
                src, dst = container_ip("h2c1"), container_ip("h1c3")
                peer = hostile()

                def connect():
                    return peer.connect_qp(src, dst, attacker_send, decoy_recv,
                                           qp_type=rw.XRC_SEND)
                self.assertEqual(connect(), 0)
                # The control: the decoy's own SRQ, through its own XRC_RECV QP, is reached.
                peer.request(attacker_send, decoy_recv, 0, rw.SEND, qp_type=rw.XRC_RECV,
                             length=8, payload=b"c" * 8, xrc_srqn=decoy_srqn)
                got.append(("SEND to the decoy's own SRQ", peer.response(attacker_send, 0)))
                # The victim's SRQ through the decoy's XRC_RECV QP: a SEND, then (on a new
                # Connect: a failed request ends what the connection may do) a WRITE.
                peer.request(attacker_send, decoy_recv, 1, rw.SEND, qp_type=rw.XRC_RECV,
                             length=64, payload=b"A" * 64, xrc_srqn=victim_srqn)
                got.append(("SEND to the victim's SRQ", peer.response(attacker_send, 1)))
                self.assertEqual(connect(), 0)
                peer.request(attacker_send, decoy_recv, 0, rw.WRITE, qp_type=rw.XRC_RECV,
                             length=64, payload=b"B" * 64, rkey=0x12345678, addr=0x1000,
                             xrc_srqn=victim_srqn)
                got.append(("WRITE through the victim's SRQ", peer.response(attacker_send, 0)))
                # Straight to the victim's SRQ: no QP to connect to.
                got.append(("Connect to the victim's SRQ", peer.connect_qp(
                    src, container_ip("h1c2"), attacker_send + 1, victim_srqn,
                    qp_type=rw.XRC_SEND)))
                # To the victim's XRC_RECV QP (one tenant: the Connect is taken, as RC's is):
                # its RTR names the victim's sender, so nothing is let through.
                got.append(("Connect to the victim's XRC_RECV QP", peer.connect_qp(
                    src, container_ip("h1c2"), attacker_send, victim_recv,
                    qp_type=rw.XRC_SEND)))
                peer.request(attacker_send, victim_recv, 0, rw.SEND, qp_type=rw.XRC_RECV,
                             length=64, payload=b"C" * 64, xrc_srqn=victim_srqn, timeout=8)
                got.append(("SEND through the victim's XRC_RECV QP",
                            peer.response(attacker_send, 0)))
                # An XRC request that names no SRQ is no frame: the link closes.
                self.assertEqual(connect(), 0)
                peer.request(attacker_send, decoy_recv, 0, rw.SEND, qp_type=rw.XRC_RECV,
                             length=8, payload=b"z" * 8, xrc_srqn=0)
                try:
                    got.append(("XRC request without an SRQ", peer.response(attacker_send, 0)))
                except EOFError:
                    got.append(("XRC request without an SRQ", "link closed"))
                peer.close()
                # The victim's XRC pair runs to its end.
                results = [(p.name, p.wait(120), p.out, p.err) for p in (victim_cli, victim_srv)]
                if not all(rc == 0 and out.strip().endswith("success")
                           for _, rc, out, _ in results):
                    v.disturbed.append("ibv_xsrq_pingpong h0c1 -> h1c2: " + " | ".join(
                        f"{n} rc={rc} {out[-300:]} {err[-300:]}" for n, rc, out, err in results))
        finally:
            for p in procs:
                p.kill()
                with contextlib.suppress(AssertionError):
                    p.wait(5)
        detail = "; ".join(f"{w}: {r}" for w, r in got)
        self.assertEqual(got[0][1], (rw.SUCCESS, 8), detail)
        self.assertEqual(got[1][1], (rw.REM_INV_REQ_ERR, 0), detail)
        self.assertEqual(got[2][1], (rw.REM_INV_REQ_ERR, 0), detail)
        self.assertEqual(got[3][1], errno.ECONNREFUSED, detail)
        self.assertEqual(got[5][1], (rw.RETRY_EXC_ERR, 0), detail)
        self.assertEqual(got[6][1], "link closed", detail)
        reached = [w for w, r in got[1:6] if r == 0 and w.startswith("Connect to the victim's SRQ")
                   or isinstance(r, tuple) and r[0] == rw.SUCCESS]
        self.record("forged XRC SRQ numbers (another container's SRQ)", bool(reached), v, detail)

if __name__ == "__main__":
    unittest.main()
