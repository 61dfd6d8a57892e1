"""XRC with ibverbs-utils' unmodified `ibv_xsrq_pingpong`: a server and a client, each with an
XRC domain (its /tmp/xrc_domain file), an XRC SRQ, an XRC_RECV QP and an XRC_SEND QP; every
message goes out through the XRC_SEND QP naming the other side's SRQ number and completes on
that SRQ's CQ. Between two containers of one host (vrdmad decides what the XRC_SEND QP
reaches), or with VRDMA_E2E_TOPOLOGY=cross between containers on two hosts (the routers carry
the SRQ number; the destination host's router checks it against the XRC_RECV QP's domain)."""

import re
import time
import unittest

import conftest_path  # noqa: F401
from vrdma_py.sandbox import container_ip

from topology import CLIENT, CROSS, GID, SB, SERVER
setUpModule = SB.up
tearDownModule = SB.down

# The addresses each side prints: "local:"/"remote:" with its QPNs, its SRQ number, its GID.
ADDR = re.compile(r"(local|remote): LID \w+, QPN RECV (\w+) SEND (\w+), PSN \w+, SRQN (\w+), "
                  r"GID (\S+)")


class XsrqPingpong(unittest.TestCase):
    def pingpong(self, *extra, iters=100):
        args = ["ibv_xsrq_pingpong", "-n", str(iters), *GID, *extra]
        (src, sout, serr), (crc, cout, cerr) = SB.pair(
            args, args + [container_ip(SERVER)], SERVER, CLIENT, timeout=60)
        detail = f"server:\n{sout}{serr}\nclient:\n{cout}{cerr}"
        self.assertEqual((src, crc), (0, 0), detail)
        for out in (sout, cout):
            self.assertEqual(out.strip().splitlines()[-1], "success", detail)
        self.assertNotIn("error", (serr + cerr).lower(), detail)
        # What each side said of itself is what the other heard.
        s = {m.group(1): m.groups()[1:] for m in ADDR.finditer(sout)}
        c = {m.group(1): m.groups()[1:] for m in ADDR.finditer(cout)}
        self.assertEqual(s["local"], c["remote"], detail)
        self.assertEqual(c["local"], s["remote"], detail)
        if CROSS:
            self.assertEqual(s["local"][3], f"::ffff:{container_ip(SERVER)}", detail)
            self.assertEqual(c["local"][3], f"::ffff:{container_ip(CLIENT)}", detail)
        return sout, cout

    def test_sizes(self):
        for size in (1, 4096, 65536):
            with self.subTest(size=size):
                self.pingpong("-s", str(size))

    def test_completion_channel(self):
        self.pingpong("-e", iters=50)

    def test_two_clients_share_the_servers_srq(self):
        # The server takes two clients (-c 2), each over an XRC_RECV QP of its own feeding the
        # one SRQ: each receive's completion names the XRC_RECV QP it came through (qp_num),
        # which the server looks up to answer that client.
        base = ["ibv_xsrq_pingpong", "-n", "100", "-s", "512", *GID]
        server = SB.start(SERVER, *base, "-c", "2")
        clients = []
        try:
            self.assertTrue(SB.wait_listening(SERVER, 18515, timeout=20), server.err)
            # The second client connects once the server has taken the first (one listen).
            for _ in range(2):
                clients.append(SB.start(CLIENT, *base, container_ip(SERVER)))
                time.sleep(0.5)
            rcs = [c.wait(60) for c in clients] + [server.wait(60)]
        finally:
            for p in clients + [server]:
                p.kill()
        detail = "\n".join(f"{p.out}{p.err}" for p in clients + [server])
        self.assertEqual(rcs, [0, 0, 0], detail)
        for p in clients + [server]:
            self.assertEqual(p.out.strip().splitlines()[-1], "success", detail)

    def test_many_iterations(self):
        self.pingpong("-s", "64", iters=2000)


if __name__ == "__main__":
    unittest.main()
