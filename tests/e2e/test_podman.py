"""Unmodified verbs and rdma_cm programs in real OCI containers: two rootful podman containers
on a podman bridge network, given vrdma by nothing but `--device vrdma.io/hca=<name>` (a CDI
spec), served by a vrdmad on the host that identifies them by their network namespaces.
A container without the device sees no vrdma device. See python/vrdma_py/podman.py for the
test bed and deploy/podman/ for the podman configuration."""

import contextlib
import json
import os
import re
import select
import subprocess
import threading
import time
import unittest

import conftest_path  # noqa: F401
from vrdma_py.perftest_output import bw_rows, lat_rows
from vrdma_py.podman import CDI_DIR, PodmanBed
from vrdma_py.sandbox import VRDMA, vrdma

BED = PodmanBed()
SERVER_IP, CLIENT_IP, OTHER_IP = BED.ip(10), BED.ip(11), BED.ip(12)
TOOLS = os.path.join(os.path.dirname(os.path.realpath(VRDMA)), "..", "..", "tests", "tools")


def setUpModule():
    BED.up()


def tearDownModule():
    BED.down()


def node_guid(ip):
    """The node GUID vrdmad gives the container at `ip` (02:76:72:64 then the address)."""
    return "02767264" + "".join(f"{int(x):02x}" for x in ip.split("."))


def pair(test, server_cmd, client_cmd, port=18515, timeout=120, device=True, options=()):
    """Runs server_cmd in container `srv` (SERVER_IP), waits for its TCP port, then
    client_cmd in container `cli` (CLIENT_IP); returns both outputs, server first."""
    s = BED.start("srv", server_cmd, SERVER_IP, device=device, options=options)
    try:
        if not BED.host.wait_listening("srv", port, proc=s):
            s.kill()
            s.wait(30)
            test.fail(f"server never listened on {port}:\n{s.out}\n{s.err}")
        crc, cout, cerr = BED.run("cli", client_cmd, CLIENT_IP, device=device, options=options,
                                  timeout=timeout)
        src = s.wait(timeout)
    finally:
        s.kill()
    test.assertEqual(crc, 0, f"client failed:\n{cout}\n{cerr}")
    test.assertEqual(src, 0, f"server failed:\n{s.out}\n{s.err}")
    return s.out + s.err, cout + cerr


class Device(unittest.TestCase):
    def test_device_lists_vrdma0_with_the_containers_address(self):
        rc, out, err = BED.run("dev", ["ibv_devinfo", "-v"], OTHER_IP)
        self.assertEqual(rc, 0, err)
        self.assertIn("hca_id:\tvrdma0", out)
        self.assertRegex(out, r"state:\s+PORT_ACTIVE")
        g = node_guid(OTHER_IP)
        self.assertRegex(out, rf"node_guid:\s+{g[0:4]}:{g[4:8]}:{g[8:12]}:{g[12:16]}")
        self.assertRegex(out, rf"GID\[\s*0\]:\s+::ffff:{re.escape(OTHER_IP)}, RoCE v2")

    def test_no_device_without_the_cdi_device(self):
        # Same image, same network, no --device: the host's own libibverbs finds no device.
        rc, out, err = BED.run("nodev", ["sh", "-c", "env; ls /run/vrdma/; ibv_devices"], OTHER_IP,
                               device=False)
        self.assertNotEqual(rc, 0, out)
        self.assertNotIn("vrdma0", out)
        self.assertNotIn("VRDMA_SOCKET", out)
        self.assertIn("/run/vrdma", err)  # ls: cannot access
        self.assertIn("Failed to get IB devices list", err)

    def test_library_without_the_device_cannot_reach_vrdmad(self):
        # The drop-in library mounted by hand is not enough: vrdmad's socket comes only with the
        # device, and a container without it gets no device either.
        libdir = self.spec_mount("/usr/local/lib/vrdma")
        rc, out, err = BED.run("nodev", ["ibv_devices"], OTHER_IP, device=False,
                               options=["-v", f"{libdir}:/usr/local/lib/vrdma:ro",
                                        "-e", "LD_LIBRARY_PATH=/usr/local/lib/vrdma"])
        self.assertNotIn("vrdma0", out)
        self.assertIn("cannot reach vrdmad", err)

    def spec_mount(self, container_path):
        edits = BED.spec["devices"][0]["containerEdits"]
        return next(m["hostPath"] for m in edits["mounts"] if m["containerPath"] == container_path)

    def test_container_runs_with_default_confinement(self):
        # What the container has beyond the spec: podman's defaults, no more. vrdma needs no
        # capability, no /dev/infiniband node and no locked-memory allowance; seccomp is on.
        script = "grep -E '^(CapEff|Seccomp):' /proc/self/status; ls /dev; ulimit -l"
        rc, out, err = BED.run("conf", ["sh", "-c", script], OTHER_IP)
        self.assertEqual(rc, 0, err)
        self.assertRegex(out, r"Seccomp:\s+2")
        caps = int(re.search(r"CapEff:\s+([0-9a-f]+)", out).group(1), 16)
        self.assertFalse(caps & (1 << 14), "CAP_IPC_LOCK should not be needed")
        self.assertNotIn("infiniband", out)

    def test_restarted_vrdmad_is_reached_by_a_running_container(self):
        # The spec mounts vrdmad's directory, not its socket file: a vrdmad that restarts (and
        # makes a new socket file) serves containers that were started before it. The container
        # lists its devices every 0.2 s while vrdmad stops and starts again.
        c = BED.start("long", ["sh", "-c", "for i in $(seq 600); do echo \"== $i\";"
                               " ibv_devices 2>&1; sleep 0.2; done"], OTHER_IP)
        try:
            self.assertTrue(wait_output(c, r"vrdma0"), "vrdma0 never listed")
            BED.stop_vrdmad()
            self.assertTrue(wait_output(c, r"cannot reach vrdmad"), "vrdmad's absence not seen")
            BED.start_vrdmad()
            self.assertTrue(wait_output(c, r"vrdma0"), "vrdma0 not listed after vrdmad restarted")
        finally:
            c.kill()
            c.wait(30)


def wait_output(proc, pattern, timeout=20):
    """Reads a running container's output until a line matches `pattern` (bounded)."""
    end = time.monotonic() + timeout
    fd = proc.popen.stdout.fileno()
    buf = b""
    while time.monotonic() < end:
        ready, _, _ = select.select([fd], [], [], max(0.0, end - time.monotonic()))
        if not ready:
            break
        chunk = os.read(fd, 65536)
        if not chunk:
            return False
        buf += chunk
        lines = buf.split(b"\n")
        buf = lines.pop()
        if any(re.search(pattern, line.decode(errors="replace")) for line in lines):
            return True
    return False


class Programs(unittest.TestCase):
    def test_rc_pingpong_checks_its_data(self):
        for size, iters in ((1, 500), (4096, 500), (1 << 20, 50)):
            with self.subTest(size=size):
                args = ["ibv_rc_pingpong", "-c", "-s", str(size), "-n", str(iters)]
                sout, cout = pair(self, args, args + [SERVER_IP])
                for out in (sout, cout):
                    self.assertRegex(out, rf"{size * iters * 2} bytes in [\d.]+ seconds")
                self.assertNotIn("invalid data", sout + cout)

    def test_vrdmad_identifies_containers_by_network_namespace(self):
        # While the server waits for its client, vrdmad shows it under its podman network
        # namespace with its address on the podman network.
        s = BED.start("srv", ["ibv_rc_pingpong", "-n", "10"], SERVER_IP)
        try:
            self.assertTrue(BED.host.wait_listening("srv", 18515, proc=s), s.err)
            status = json.loads(subprocess.run(
                [VRDMA, "status", "--socket", BED.socket, "--json"], capture_output=True,
                text=True, timeout=30, check=True).stdout)
            pid = BED.host.podman("inspect", "--format", "{{.State.Pid}}", "srv").stdout.strip()
            netns = os.readlink(f"/proc/{pid}/ns/net")
            pinned = [n for n in os.listdir("/run/netns") if n.startswith("netns-") and
                      os.stat(f"/run/netns/{n}").st_ino == os.stat(f"/proc/{pid}/ns/net").st_ino]
            self.assertEqual(len(pinned), 1, netns)
            clients = [c for c in status["clients"] if c["ip"] == SERVER_IP]
            self.assertEqual(len(clients), 1, status)
            self.assertEqual(clients[0]["container"], pinned[0])
            self.assertEqual(clients[0]["tenant"], BED.tenant)
            crc, cout, cerr = BED.run("cli", ["ibv_rc_pingpong", "-n", "10", SERVER_IP], CLIENT_IP)
            self.assertEqual(crc, 0, cerr)
            self.assertEqual(s.wait(60), 0, s.err)
        finally:
            s.kill()
        log = BED.daemon_log()
        self.assertRegex(log, rf"connected: pid=\d+ uid=0 container={pinned[0]} "
                              rf"ip={re.escape(SERVER_IP)} tenant={BED.tenant}")
        self.assertRegex(log, rf"connected: pid=\d+ uid=0 container=netns-[0-9a-f-]+ "
                              rf"ip={re.escape(CLIENT_IP)} tenant={BED.tenant}")

    def test_status_shows_how_page_moves_are_held(self):
        # Podman's default seccomp profile refuses userfaultfd(2): registrations then stop the
        # program's other threads while pages move, and vrdma status says so; with
        # /dev/userfaultfd given to the container the library holds writes through it, and
        # status says that.
        for options, expected in (((), "threads-stopped"), (("--device", "/dev/userfaultfd"),
                                                  "/dev/userfaultfd")):
            if options and not os.path.exists("/dev/userfaultfd"):
                continue  # a kernel without the device node: the first case still ran
            with self.subTest(options=options):
                s = BED.start("srv", ["ibv_rc_pingpong", "-n", "10"], SERVER_IP, options=options)
                try:
                    self.assertTrue(BED.host.wait_listening("srv", 18515, proc=s), s.err)
                    status = json.loads(subprocess.run(
                        [VRDMA, "status", "--socket", BED.socket, "--json"], capture_output=True,
                        text=True, timeout=30, check=True).stdout)
                    clients = [c for c in status["clients"] if c["ip"] == SERVER_IP]
                    self.assertEqual(len(clients), 1, status)
                    self.assertEqual(clients[0]["page_move_guard"], expected)
                    text = subprocess.run([VRDMA, "status", "--socket", BED.socket],
                                          capture_output=True, text=True, timeout=30,
                                          check=True).stdout
                    self.assertIn("page moves held (threads stopped)" if expected == "threads-stopped"
                                  else f"page moves held ({expected})", text)
                finally:
                    s.kill()
                    s.wait(30)

    def test_registration_keeps_every_write_under_the_default_profile(self):
        # In a container started the ordinary way (podman's default seccomp profile refuses
        # userfaultfd(2), no /dev/userfaultfd), threads write into a buffer with stores and with
        # read(2) from a pipe while another thread registers and deregisters it 2000 times:
        # every write must be there afterwards.
        tool = os.path.realpath(os.path.join(TOOLS, "vrdma_reg_writes"))
        opts = ["-v", f"{tool}:/usr/local/bin/vrdma_reg_writes:ro"]
        rc, out, err = BED.run("regw", ["sh", "-c", "grep Seccomp: /proc/self/status; "
                                        "test ! -e /dev/userfaultfd && echo no-uffd-device; "
                                        "exec vrdma_reg_writes --iterations 2000 --seconds 120"],
                               OTHER_IP, options=opts, timeout=180)
        self.assertRegex(out, r"Seccomp:\s+2")
        self.assertIn("no-uffd-device", out)
        m = re.search(r"registrations (\d+) store_writes (\d+) lost (\d+) pipe_blocks (\d+) "
                      r"torn (\d+) us_per_registration ([\d.]+)", out)
        self.assertIsNotNone(m, out + err)
        regs, writes, lost, blocks, torn = map(int, m.groups()[:5])
        print(f"\nregistrations under writes in a default podman container: {regs} reg+dereg "
              f"of 256 KiB ({m.group(6)} us each), {writes} stores, {blocks} pipe blocks, "
              f"{lost} lost, {torn} torn")
        self.assertEqual((lost, torn), (0, 0), out + err)
        self.assertEqual(regs, 2000, out + err)
        self.assertEqual(rc, 0, out + err)

    def test_ib_write_bw(self):
        sout, cout = pair(self, ["ib_write_bw"], ["ib_write_bw", SERVER_IP])
        rows = bw_rows(cout)
        self.assertEqual([r[0] for r in rows], [65536], cout)
        size, iters, peak, avg, rate = rows[0]
        self.assertGreater(avg, 0.0)
        self.assertIn("Device         : vrdma0", cout)
        print(f"\nib_write_bw between podman containers: {size} B, {avg:.0f} MB/s average, "
              f"{rate:.3f} Mpps")

    def test_ib_send_lat(self):
        sout, cout = pair(self, ["ib_send_lat"], ["ib_send_lat", SERVER_IP])
        rows = lat_rows(cout)
        self.assertEqual([r[0] for r in rows], [2], cout)
        size, iters, tmin, tmax, typical, avg, stdev, p99, p999 = rows[0]
        self.assertGreater(typical, 0.0)
        print(f"\nib_send_lat between podman containers: {size} B, t_typical {typical} us, "
              f"p99 {p99} us")

    def test_large_registrations_need_no_memlock(self):
        # 32 MiB buffers on each side, in containers whose locked-memory limit is 64 KiB and
        # that have no capability at all.
        # Any --ulimit makes podman set RLIMIT_NOFILE and RLIMIT_NPROC too, to defaults above
        # what this kind of machine lets it raise them to: lower ones are always allowed.
        opts = ["--ulimit", "memlock=65536:65536", "--ulimit", "nofile=1024:1024",
                "--ulimit", "nproc=4096:4096", "--cap-drop", "all"]
        rc, out, err = BED.run("limits", ["sh", "-c", "ulimit -l; grep CapEff /proc/self/status"],
                               OTHER_IP, options=opts)
        self.assertEqual(rc, 0, err)
        self.assertRegex(out, r"^64\nCapEff:\s+0+\n")
        args = ["ib_write_bw", "-s", str(32 << 20), "-n", "20"]
        sout, cout = pair(self, args, args + [SERVER_IP], options=opts)
        self.assertEqual([r[0] for r in bw_rows(cout)], [32 << 20], cout)

    def test_rping_checks_its_data(self):
        n = 200
        server = ["rping", "-s", "-a", SERVER_IP, "-v", "-C", str(n)]
        client = ["rping", "-c", "-a", SERVER_IP, "-v", "-C", str(n)]
        s = BED.start("srv", server, SERVER_IP)
        done = []
        reader = threading.Thread(target=lambda: done.append(s.wait(180)))
        reader.start()
        try:
            # rdma_cm listeners are no kernel sockets: a client that came before the server
            # listened is rejected at once and started again (bounded).
            for _ in range(60):
                crc, cout, cerr = BED.run("cli", client, CLIENT_IP, timeout=120)
                if crc == 0 or s.popen.poll() is not None:
                    break
                time.sleep(0.2)
            reader.join(150)
        finally:
            s.kill()
            reader.join(30)
        self.assertEqual(crc, 0, f"client failed:\n{cout}\n{cerr}")
        self.assertEqual(done, [0], f"server failed:\n{s.out}\n{s.err}")
        for who, out in (("client", cout), ("server", s.out)):
            lines = re.findall(r"rdma-ping-(\d+): ([\x20-\x7e]+)", out)
            self.assertEqual(sorted(int(i) for i, _ in lines), list(range(n)), f"{who}:\n{out}")
            for i, data in lines:
                # ping i starts with chr(65 + i % 58) and counts up, wrapping from 'z' to 'A'.
                c = int(i) % 58
                want = "".join(chr(65 + (c + k) % 58) for k in range(40))
                self.assertEqual(data[:40], want, f"{who}: ping {i}")


def gid_of(ip):
    """The sysfs text of an IPv4-mapped GID: 0000:0000:0000:0000:0000:ffff:0a4e:000a."""
    a, b, c, d = (int(x) for x in ip.split("."))
    return f"0000:0000:0000:0000:0000:ffff:{a:02x}{b:02x}:{c:02x}{d:02x}"


class GeneratedSpec(unittest.TestCase):
    """The spec `vrdma cdi generate` writes, run by podman and crun: its device node and its
    createContainer hook's sysfs view, as programs in the container find them."""

    def test_hook_builds_the_containers_sysfs_view(self):
        script = ("stat -c '%F %t:%T' /dev/infiniband/uverbs0; "
                  "cat /sys/class/infiniband/vrdma0/ports/1/gids/0 "
                  "/sys/class/infiniband/vrdma0/node_guid "
                  "/sys/class/infiniband_verbs/uverbs0/ibdev; "
                  "ibv_devinfo -d vrdma0 | grep -E 'hca_id|state'")
        with generated_device() as (spec, device):
            self.assertEqual(spec["devices"][0]["containerEdits"]["hooks"][0]["hookName"],
                             "createContainer")
            rc, out, err = BED.run("gen", ["sh", "-c", script], OTHER_IP, device=False,
                                   options=["--device", device])
        self.assertEqual(rc, 0, out + err)
        lines = out.splitlines()
        node = spec["devices"][0]["containerEdits"]["deviceNodes"][0]
        self.assertEqual(lines[0], f"character special file {node['major']:x}:{node['minor']:x}")
        self.assertEqual(lines[1], gid_of(OTHER_IP))
        g = node_guid(OTHER_IP)
        self.assertEqual(lines[2], f"{g[0:4]}:{g[4:8]}:{g[8:12]}:{g[12:16]}")
        self.assertEqual(lines[3], "vrdma0")
        self.assertIn("hca_id:\tvrdma0", out)
        self.assertRegex(out, r"state:\s+PORT_ACTIVE")

    def test_ucx_with_its_defaults(self):
        # UCX as a user runs it, between two containers started the ordinary way with the
        # generated spec (podman's default seccomp profile: registrations stop the other
        # threads): it finds vrdma0 by itself and carries tag matching (1 MiB: rendezvous,
        # registering the buffers) and RMA over rc_verbs. UCX_LOG_LEVEL=info only prints the
        # transports it chose.
        with generated_device() as (spec, device):
            opts = ["--device", device]
            for test, size in (("tag_bw", 1 << 20), ("ucp_put_bw", 65536)):
                with self.subTest(test=test):
                    s = BED.start("srv", ["ucx_perftest"], SERVER_IP, device=False, options=opts)
                    try:
                        self.assertTrue(BED.host.wait_listening("srv", 13337, proc=s), s.err)
                        rc, out, err = BED.run(
                            "cli", ["env", "UCX_LOG_LEVEL=info", "ucx_perftest", SERVER_IP,
                                    "-t", test, "-s", str(size), "-n", "500"],
                            CLIENT_IP, device=False, options=opts, timeout=120)
                        self.assertEqual(s.wait(60), 0, s.err)
                    finally:
                        s.kill()
                    self.assertEqual(rc, 0, out + err)
                    self.assertRegex(out + err, r"ep_cfg\[\d+\]: \w+\(rc_verbs/vrdma0:1")
                    self.assertIn("Final:", out)
                    print(f"\nucx_perftest {test} {size} B between default podman containers: "
                          f"{out.split('Final:')[1].split()[4]} MB/s")


@contextlib.contextmanager
def generated_device():
    """The spec `vrdma cdi generate` writes (as an operator installs it, with its hook), under a
    kind of this test's own; yields the spec and the --device name that selects it."""
    spec = json.loads(vrdma("cdi", "generate", "-o", "-", "--socket", BED.socket,
                            "--lib-dir", os.environ.get("VRDMA_LIBDIR") or
                            "/usr/local/lib/vrdma").stdout)
    spec["kind"] = f"vrdma-e2e-{os.getpid()}.example/hca"
    path = os.path.join(CDI_DIR, f"vrdma-e2e-generated-{os.getpid()}.json")
    with open(path, "w") as f:
        json.dump(spec, f)
    try:
        yield spec, f"{spec['kind']}={spec['devices'][0]['name']}"
    finally:
        os.unlink(path)


class DevicePluginAllocation(unittest.TestCase):
    """Containers started with exactly the device plugin's Allocate answer (its mounts, device
    specs and envs, as podman run arguments: `vrdma device-plugin --print-allocation
    --engine-args`, the answer e2e_device_plugin checks against Allocate itself) run
    ibv_rc_pingpong against each other."""

    def allocation(self):
        base = ["device-plugin", "--socket", BED.socket, "--lib-dir",
                os.environ.get("VRDMA_LIBDIR") or "/usr/local/lib/vrdma"]
        answer = json.loads(vrdma(*base, "--print-allocation").stdout)
        args = vrdma(*base, "--print-allocation", "--engine-args").stdout.split("\n")
        return answer, [a for a in args if a]

    def test_engine_args_are_the_allocate_answer(self):
        answer, args = self.allocation()
        want = ([f"--volume={m['host_path']}:{m['container_path']}:"
                 f"{'ro' if m['read_only'] else 'rw'}" for m in answer["mounts"]] +
                [f"--device={d['host_path']}:{d['container_path']}:{d['permissions']}"
                 for d in answer["devices"]] +
                sorted(f"--env={k}={v}" for k, v in answer["envs"].items()))
        self.assertEqual(args, want)
        self.assertTrue(answer["mounts"] and answer["devices"] and answer["envs"], answer)
        self.assertEqual((answer.get("cdi_devices", []), answer.get("annotations", {})), ([], {}))

    def test_containers_with_the_allocation_run_rc_pingpong(self):
        _, opts = self.allocation()
        rc, out, err = BED.run("alloc", ["sh", "-c", "test -c /dev/infiniband/uverbs0 && env"],
                               OTHER_IP, device=False, options=opts)
        self.assertEqual(rc, 0, out + err)
        self.assertIn(f"VRDMA_SOCKET={BED.socket}", out)
        args = ["ibv_rc_pingpong", "-c", "-s", "4096", "-n", "200"]
        sout, cout = pair(self, args, args + [SERVER_IP], device=False, options=opts)
        for o in (sout, cout):
            self.assertRegex(o, rf"{4096 * 200 * 2} bytes in [\d.]+ seconds")
        self.assertNotIn("invalid data", sout + cout)


if __name__ == "__main__":
    unittest.main()
