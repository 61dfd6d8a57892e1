"""Unmodified ibverbs-utils programs between two containers on one host."""

import re
import unittest

import conftest_path  # noqa: F401
from vrdma_py.sandbox import container_ip

from topology import CLIENT, GID, SB, SERVER
setUpModule = SB.up
tearDownModule = SB.down


class DeviceTools(unittest.TestCase):
    def test_ibv_devices_lists_the_device(self):
        rc, out, err = SB.run(SERVER, "ibv_devices", timeout=20)
        self.assertEqual(rc, 0, err)
        self.assertRegex(out, r"vrdma0\s+[0-9a-f]{16}")

    def test_ibv_devinfo_shows_active_port_and_container_gid(self):
        rc, out, err = SB.run(CLIENT, "ibv_devinfo", "-v", timeout=20)
        self.assertEqual(rc, 0, err)
        self.assertIn("hca_id:\tvrdma0", out)
        self.assertRegex(out, r"state:\s+PORT_ACTIVE")
        self.assertRegex(out, r"active_mtu:\s+4096")
        self.assertRegex(out, r"link_layer:\s+Ethernet")
        ip = container_ip(CLIENT).replace(".", r"\.")
        self.assertRegex(out, rf"GID\[\s*0\]:\s+::ffff:{ip}, RoCE v2")

    def test_no_daemon_means_no_device(self):
        rc, out, err = SB.run(SERVER, "env", "VRDMA_SOCKET=/nonexistent/vrdmad.sock",
                              "ibv_devices", timeout=20)
        self.assertEqual(rc, 0, err)
        self.assertNotIn("vrdma0", out)
        self.assertIn("cannot reach vrdmad at /nonexistent/vrdmad.sock", err)


class RcPingpong(unittest.TestCase):
    def pingpong(self, size, *extra, iters=200):
        server = ["ibv_rc_pingpong", "-s", str(size), "-n", str(iters), "-c", *GID, *extra]
        client = server + [container_ip(SERVER)]
        (src, sout, serr), (crc, cout, cerr) = SB.pair(server, client, SERVER, CLIENT, timeout=60)
        self.assertEqual(src, 0, f"server failed:\n{sout}\n{serr}")
        self.assertEqual(crc, 0, f"client failed:\n{cout}\n{cerr}")
        for out in (sout, cout):
            self.assertRegex(out, rf"{size * iters * 2} bytes in [\d.]+ seconds")
        self.assertNotIn("invalid data", sout + cout)
        return sout, cout

    def test_extended_qp_and_cq(self):
        # -N posts through ibv_create_qp_ex and the ibv_wr_* interface; -t polls an extended
        # CQ and reads each receive's completion timestamp (ibv_wc_read_completion_ts).
        for size in (1, 4096, 65536):
            with self.subTest(size=size):
                self.pingpong(size, "-N")
                for out in self.pingpong(size, "-N", "-t"):
                    m = re.search(r"Min receive completion clock cycles = (\d+)", out)
                    self.assertIsNotNone(m, out)
                    self.assertGreater(int(m.group(1)), 0, out)

    def test_sizes(self):
        for size in (1, 4096, 65536, 1 << 20):
            with self.subTest(size=size):
                self.pingpong(size, iters=50 if size >= 65536 else 200)

    def test_completion_channel(self):
        for size in (1, 65536):
            with self.subTest(size=size):
                self.pingpong(size, "-e")

    def test_other_pingpongs(self):
        for prog in ("ibv_uc_pingpong", "ibv_ud_pingpong", "ibv_srq_pingpong"):
            with self.subTest(prog=prog):
                # A UD destination is an AH, which on RoCE needs the GID (-g) on one host too.
                gid = GID or (["-g", "0"] if prog == "ibv_ud_pingpong" else [])
                args = [prog, "-n", "200", *gid]
                (src, sout, serr), (crc, cout, cerr) = SB.pair(
                    args, args + [container_ip(SERVER)], SERVER, CLIENT, timeout=60)
                self.assertEqual((src, crc), (0, 0), f"{prog}:\n{sout}{serr}\n{cout}{cerr}")
                self.assertRegex(cout, r"200 iters in [\d.]+ seconds")

    def test_gid_index_zero(self):
        self.pingpong(4096, "-g", "0")
        self.pingpong(4096, "-g", "0", "-e")


if __name__ == "__main__":
    unittest.main()
