"""Tenants from the platform across hosts: each host's vrdmad admits its containers into the
tenants its tenant file names (--platform-tenants) and publishes each container's tenant in
its directory entry, which only that host may write; a router or rdma_cm request from another
host is accepted only if the tenant the sender's host published for the source address is the
target's. Containers of one Kubernetes namespace on two hosts connect (data checked); of two
namespaces, or unknown to the platform, they do not; a changed mapping holds once the
container's next program has published it. The file is written here as the device plugin
writes it (`vrdma device-plugin --tenants-from-cri`, tested in test_platform_tenants)."""

import os
import re
import shutil
import tempfile
import time
import unittest

import conftest_path  # noqa: F401
from vrdma_py.sandbox import NETNS_PREFIX, Sandbox, container_ip, host_file

WORK = tempfile.mkdtemp(prefix="vrdma-ptx-")  # root's, mode 0700: a directory vrdmad trusts
TENANT_FILE = os.path.join(WORK, "tenants")

SB = Sandbox(hosts=2, containers=3,
             extra_args=["--daemon-arg=--platform-tenants", f"--daemon-arg={TENANT_FILE}"])


def write_tenants(**tenants):
    """write_tenants(h0c0="team-a", ...): the file both hosts' vrdmad read, replaced at once."""
    tmp = TENANT_FILE + ".new"
    with open(tmp, "w") as f:
        for container, tenant in sorted(tenants.items()):
            f.write(f"{tenant} /run/netns/{NETNS_PREFIX}{container}\n")
    os.chmod(tmp, 0o644)
    os.rename(tmp, TENANT_FILE)


INITIAL = dict(h0c0="team-a", h1c0="team-a", h1c1="team-b")  # h1c2: unknown to the platform


def setUpModule():
    write_tenants(**INITIAL)
    SB.up()


def tearDownModule():
    try:
        SB.down()
    finally:
        shutil.rmtree(WORK, ignore_errors=True)


def published_tenant(container, host):
    key = f"/vrdma/hosts/{host}/containers/{container_ip(container)}"
    return SB.etcd_get(key).get(key, {}).get("tenant")


def wait_published(container, host, tenant, timeout=15):
    """Runs a program in `container` (its Hello publishes the tenant vrdmad gave it) and waits,
    bounded, until the directory holds that tenant."""
    SB.run(container, "ibv_devinfo", timeout=30)
    end = time.monotonic() + timeout
    got = None
    while time.monotonic() < end:
        got = published_tenant(container, host)
        if got == tenant:
            return
        time.sleep(0.2)
    raise AssertionError(f"{container}: directory says tenant {got!r}, want {tenant!r}")


def pingpong(client, server="h0c0"):
    """ibv_rc_pingpong -c (it checks every buffer it receives) from `client` to `server`:
    (client rc, client output, server rc, server output)."""
    args = ["ibv_rc_pingpong", "-g", "0", "-c", "-n", "20", "-s", "65536"]
    s = SB.start(server, *args)
    try:
        if not SB.wait_listening(server, 18515):
            raise AssertionError(f"server never listened:\n{s.out}\n{s.err}")
        rc, out, err = SB.run(client, *args, container_ip(server), timeout=60)
        if rc == 0:
            src = s.wait(30)
        else:
            time.sleep(1)
            src = s.popen.poll()  # None: still waiting for a peer that never came
    finally:
        s.kill()
        s.wait(10)
    return rc, out + err, src, s.out + s.err


def rping(client, server="h0c0", port=7471, count=20):
    """rping -V (verifies the data it gets back) from `client` to a one-shot rping server:
    (client rc, client output)."""
    ip = container_ip(server)
    srv = SB.start(server, "rping", "-s", "-a", ip, "-p", str(port))
    try:
        if not SB.wait_listening(server, port, proto="t", timeout=2):
            time.sleep(0.5)  # rdma_cm listens in vrdmad, not in the kernel
        rc, out, err = SB.run(client, "rping", "-c", "-V", "-v", "-a", ip, "-p", str(port), "-C",
                              str(count), timeout=30)
        return rc, out + err
    finally:
        srv.kill()
        srv.wait(10)


def daemon_log(host="h0"):
    with open(host_file(host, "vrdmad.log")) as f:
        return f.read()


class PlatformTenantsCrossHost(unittest.TestCase):
    def test_1_each_host_publishes_its_containers_tenants(self):
        wait_published("h0c0", 0, "team-a")
        wait_published("h1c0", 1, "team-a")
        wait_published("h1c1", 1, "team-b")
        wait_published("h1c2", 1, "@" + container_ip("h1c2"))

    def test_2_same_namespace_connects_across_hosts(self):
        wait_published("h1c0", 1, "team-a")
        rc, out, src, sout = pingpong("h1c0")
        self.assertEqual((rc, src), (0, 0), out + sout)
        for o in (out, sout):
            self.assertRegex(o, r"2621440 bytes in [\d.]+ seconds")
        self.assertNotIn("invalid data", out + sout)
        rc, out = rping("h1c0")
        self.assertEqual(rc, 0, out)
        self.assertEqual(len(re.findall(r"rdma-ping-\d+: ", out)), 20, out)

    def test_3_other_namespace_cannot_connect_across_hosts(self):
        wait_published("h1c1", 1, "team-b")
        rc, out, src, sout = pingpong("h1c1")
        self.assertNotEqual(rc, 0, "a container of another namespace on host 1 reached h0c0")
        self.assertNotEqual(src, 0)
        rc, out = rping("h1c1", port=7472)
        self.assertNotEqual(rc, 0, f"rping of another namespace got through:\n{out}")
        self.assertNotRegex(out, r"rdma-ping-\d+: ")

    def test_4_container_unknown_to_the_platform_shares_nothing(self):
        wait_published("h1c2", 1, "@" + container_ip("h1c2"))
        rc, out, src, sout = pingpong("h1c2")
        self.assertNotEqual(rc, 0, "a container the platform does not know reached h0c0")
        rc, out = rping("h1c2", port=7473)
        self.assertNotEqual(rc, 0, out)

    def test_5_changed_mapping_holds_once_published(self):
        try:
            write_tenants(**dict(INITIAL, h1c1="team-a"))
            wait_published("h1c1", 1, "team-a")
            rc, out, src, sout = pingpong("h1c1")
            self.assertEqual((rc, src), (0, 0), out + sout)
            self.assertNotIn("invalid data", out + sout)
            # And back: h1c1 no longer reaches h0c0.
            write_tenants(**INITIAL)
            wait_published("h1c1", 1, "team-b")
            rc, out, _, _ = pingpong("h1c1")
            self.assertNotEqual(rc, 0, "h1c1 kept the tenant it no longer has")
        finally:
            write_tenants(**INITIAL)


if __name__ == "__main__":
    unittest.main()
